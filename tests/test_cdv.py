"""CDV on a tiny planted corpus (a real BiLSTM trained on real MiniLM sentence embeddings), its document
vectors beside a real index, free boundaries, evidence, `capr explain` plots, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from capr.cdv import CDVArgs, CDVModel, train_cdv
from capr.cdv.search import cdv_search, evidence_sentences, explain, free_search
from capr.cdv.spans import BoundaryConfig, char_f1, free_spans, grow_span
from capr.cdv.store import CDVStore
from capr.errors import CaprError, QueryError
from capr.index import build_index, load_index
from capr.labels.generate import LabeledPassage, write_labels
from capr.records import Document, Section
from conftest import capr_cli, need_data

DISEASES = ["Zorvex syndrome", "Kalimba fever", "Dunmore disease", "Ostrava palsy", "Venn anemia", "Brisk pox"]
# the second sentence of every section never names the disease: only the document context says whose it is
SECTIONS = {
    "symptoms": ("{d} causes itching of the palms and night sweats.", "Patients also notice a hoarse voice."),
    "treatment": ("{d} is treated with rest and oral steroids.", "Most people recover within two weeks of therapy."),
    "causes": ("{d} is caused by a mutation in a single gene.", "The faulty gene is inherited from one parent."),
}


def planted_documents() -> list[Document]:
    docs = []
    for i, d in enumerate(DISEASES):
        text, sections = "", []
        for aspect, (a, b) in SECTIONS.items():
            body = f"{a.format(d=d)} {b}"
            start = len(text)
            text += body
            sections.append(Section(heading=aspect.title(), aspect=aspect, start=start, end=len(text), section_id=f"{i}-{aspect}"))
            text += "\n\n"
        docs.append(Document(doc_id=f"d{i}", title=d, text=text.rstrip(), sections=sections))
    return docs


def planted_labels() -> list[LabeledPassage]:
    out = []
    for doc in planted_documents():
        for s in doc.sections:
            t = doc.text[s.start : s.end]
            cut = t.index(". ") + 1
            out.append(LabeledPassage(pid=f"{doc.doc_id}-{s.aspect}", doc_id=doc.doc_id, text=t, aspect=s.aspect,
                                      entities=[doc.title], title=doc.title, heading=s.heading,
                                      sentences=[(0, cut), (cut + 1, len(t))]))
    return out


@pytest.fixture(scope="module")
def cdv_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("cdv") / "model"
    args = CDVArgs(max_steps=150, batch_docs=6, lr=3e-3, dropout=0.0, lstm_hidden=64, discourse_dim=128, seed=5)
    result = train_cdv(planted_labels(), out, args, progress=False)
    return out, result


@pytest.fixture(scope="module")
def planted_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("cdv-index") / "idx"
    build_index(planted_documents(), root)
    return root


def test_training_lowers_loss_and_saves_a_card(cdv_model):
    out, result = cdv_model
    assert np.mean(result.losses[-10:]) < 0.5 * np.mean(result.losses[:10])
    card = json.loads((out / "capr.json").read_text())
    assert card["kind"] == "cdv" and card["steps"] == 150 and card["weights_sha1"]
    model = CDVModel.load(out)
    assert model.stamp == card["weights_sha1"][:16]


def test_planted_passages_rank_first_and_context_carries_the_entity(cdv_model, planted_index):
    index = load_index(planted_index)
    store = CDVStore.open(index, CDVModel.load(cdv_model[0]))
    correct = 0
    for i, d in enumerate(DISEASES):
        for aspect in SECTIONS:
            hits = cdv_search(index, store, d, aspect, k=3)
            correct += hits[0].passage.doc_id == f"d{i}" and hits[0].passage.aspect == aspect
    assert correct >= 0.8 * len(DISEASES) * len(SECTIONS)
    # "Patients also notice a hoarse voice." is the same sentence in every document: only the document context
    # (the BiLSTM) can tell whose symptom it is
    qe, _ = store.query("Kalimba fever", None)

    def hoarse(k: int) -> float:
        dv, text = store.docs[f"d{k}"], index.document(f"d{k}").text
        j = next(j for j, (a, b) in enumerate(zip(dv.sent_start, dv.sent_end)) if "hoarse voice" in text[a:b])
        return float(dv.entity[j] @ qe)

    assert hoarse(1) > max(hoarse(k) for k in range(len(DISEASES)) if k != 1)


def test_store_follows_index_updates(cdv_model, planted_index, tmp_path):
    import shutil

    root = tmp_path / "idx"
    shutil.copytree(planted_index, root)
    model = CDVModel.load(cdv_model[0])
    index = load_index(root)
    store = CDVStore.open(index, model)
    path = CDVStore.path_for(index, model)
    assert path.exists() and set(store.docs) == {f"d{i}" for i in range(len(DISEASES))}
    from capr.index import IndexWriter

    with IndexWriter(root, mode="update") as w:
        w.delete("d0")
        w.add(Document(doc_id="new", title="Quill fever", text="Quill fever causes a purple rash on both arms."))
    index = load_index(root)
    store = CDVStore.open(index, model)
    assert "d0" not in store.docs and "new" in store.docs
    assert "d0-causes" not in store.row_of and len(store.docs["new"].sent_start) == 1
    reopened = CDVStore.open(load_index(root), model, save=False)
    assert set(reopened.docs) == set(store.docs)


def test_dev_documents_are_a_stable_share_of_document_ids():
    """The held-out documents the trainer evaluates on, and dev-only threshold choices reuse, depend on the seed and
    each document's id only: not on the order or the rest of the labels; too few documents hold out none."""
    from capr.cdv.data import documents_from_labels
    from capr.cdv.trainer import dev_documents

    labels = [LabeledPassage(pid=f"p{i}-{j}", doc_id=f"doc{i}", text=f"Condition {i} has sign {j}. It lasts days.",
                             aspect="symptoms", entities=[f"Condition {i}"]) for i in range(200) for j in range(2)]
    docs = documents_from_labels(labels)
    args = CDVArgs(dev_fraction=0.2, seed=3)
    dev = {d.doc_id for d in dev_documents(docs, args)}
    assert 20 <= len(dev) <= 60  # about 40 of 200
    assert {d.doc_id for d in dev_documents(docs[::-1], args)} == dev
    assert {d.doc_id for d in dev_documents(docs[:100], args)} == {i for i in dev if int(i[3:]) < 100}
    assert {d.doc_id for d in dev_documents(docs, CDVArgs(dev_fraction=0.2, seed=4))} != dev
    assert dev_documents(docs[:19], args) == []


def test_free_spans_and_overlap():
    s = np.array([0.1, 0.2, 0.9, 0.8, 0.7, 0.1, 0.95, 0.2])
    spans = free_spans(s, BoundaryConfig(open=0.85, close=0.65))
    assert [(sp.first, sp.end) for sp in spans] == [(2, 5), (6, 7)]
    assert spans[1].score == pytest.approx(0.95)
    absolute = free_spans(s, BoundaryConfig(open=0.9, close=0.75, relative=False))
    assert [(sp.first, sp.end) for sp in absolute] == [(2, 4), (6, 7)]
    assert char_f1((0, 10), (0, 10)) == 1.0 and char_f1((0, 10), (20, 30)) == 0.0
    assert char_f1((0, 10), (5, 15)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="θ_close"):
        BoundaryConfig(open=0.5, close=0.7)
    grown = grow_span(s, 3, BoundaryConfig(open=0.8, close=0.6))  # seed 0.8 → scaled 0.82: grows over 0.9 and 0.7
    assert (grown.first, grown.end) == (2, 5)
    alone = grow_span(s, 1, BoundaryConfig(open=0.8, close=0.6))  # a weak seed stays a single sentence
    assert (alone.first, alone.end) == (1, 2)


def test_free_search_and_evidence(cdv_model, planted_index):
    index = load_index(planted_index)
    store = CDVStore.open(index, CDVModel.load(cdv_model[0]))
    spans = free_search(index, store, "Brisk pox", "treatment", k=3)
    assert spans and spans[0].doc_id == "d5" and [h.rank for h in spans] == list(range(1, len(spans) + 1))
    assert all(not (a.doc_id == b.doc_id and a.start < b.end and b.start < a.end) for a in spans for b in spans if a is not b)
    doc = index.document("d5")
    assert spans[0].text == doc.text[spans[0].start : spans[0].end] and "steroids" in spans[0].text
    passage = index.passage_by_pid(spans[0].pids[0])
    sents = evidence_sentences(store, passage, store.query("Brisk pox", "treatment"))
    assert sents and any(s.evidence for s in sents)
    assert all(passage.start <= s.start < s.end <= passage.end for s in sents)
    with pytest.raises(QueryError, match="entity"):
        free_search(index, store, "", None)


def test_cli_train_search_explain_and_errors(tmp_path, planted_index, runner):
    from capr.cli import app

    def cli(*args: str, code: int = 0):
        res = runner.invoke(app, list(args))
        assert res.exit_code == code, res.output
        return res

    labels = tmp_path / "labels.jsonl"
    write_labels(labels, planted_labels())
    model = tmp_path / "cdv"
    capr_cli("train", "cdv", "--labels", str(labels), "--out", str(model), "--max-steps", "5", "--json")  # real entry point
    assert json.loads((model / "capr.json").read_text())["kind"] == "cdv"
    idx = str(planted_index)
    res = json.loads(cli("search", idx, "--entity", "Venn anemia", "--aspect", "causes", "--cdv", str(model),
                         "--evidence", "cdv", "-k", "3", "--json").stdout)
    assert res["retriever"] == "cdv" and len(res["results"]) == 3
    assert all("sentences" in r and r["sentences"] for r in res["results"])
    free = json.loads(cli("search", idx, "--entity", "Venn anemia", "--aspect", "causes", "--cdv", str(model),
                          "--boundaries", "free", "--json").stdout)
    assert free["boundaries"] == "free" and all(r["end"] > r["start"] for r in free["results"])
    lex = json.loads(cli("search", idx, "Venn anemia causes", "--evidence", "lexical", "--json").stdout)
    assert any(s["evidence"] for s in lex["results"][0]["sentences"])
    assert "▸" in cli("search", idx, "Venn anemia causes", "--evidence", "lexical").stdout
    assert "--cdv" in cli("search", idx, "--entity", "x", "--boundaries", "free", code=2).output
    assert "no-such-doc" in cli("explain", idx, "no-such-doc", "--cdv", str(model), "--entity", "x", code=2).output
    assert "not a CDV model" in cli("explain", idx, "d1", "--cdv", str(tmp_path), "--entity", "x", code=2).output
    assert "entity" in cli("explain", idx, "d1", "--cdv", str(model), code=2).output
    with pytest.raises(CaprError, match="not a CDV model"):
        CDVModel.load(tmp_path)


def test_explain_plot_on_a_real_medquad_document(tmp_path, cdv_model):
    from capr.corpus import Format, read_documents
    from capr.corpus.segment import SegmenterConfig

    src = need_data("medquad_cdv_test")
    docs = []
    for doc in read_documents(src, Format.medquad_cdv):
        if len(doc.sections or []) >= 3:
            docs.append(doc)
        if len(docs) == 3:
            break
    root = tmp_path / "mq"
    build_index(docs, root, segmenter=SegmenterConfig(max_tokens=0, include_title=False))
    doc = docs[0]
    plot = tmp_path / "curves.png"
    proc = capr_cli("explain", str(root), doc.doc_id, "--cdv", str(cdv_model[0]), "--entity", doc.title,
                    "--aspect", "symptoms", "--plot", str(plot), "--json")
    res = json.loads(proc.stdout)
    index = load_index(root)
    n_sent = sum(len(index.passage_by_pid(p["pid"]).sentences or [None]) for p in res["passages"])
    assert len(res["sentences"]) == n_sent > 3
    assert res["plot"]["points"] == {"entity": n_sent, "aspect": n_sent, "combined": n_sent}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image as mpimg

    h, w = mpimg.imread(plot).shape[:2]
    assert h > 300 and w > 600
    ex = explain(index, CDVStore.open(index, CDVModel.load(cdv_model[0])), doc.doc_id, doc.title, "symptoms")
    assert all(len(v) == n_sent for v in ex.curves.values())
    assert ex.best is not None and doc.text[ex.best.start : ex.best.end] == ex.best.text
