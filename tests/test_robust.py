"""Robustness: damaged indexes, serve options, re-ranker specs, delete counts, aspects and queries with no
words each give one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import capr_cli, one_line_error as _one_line_error, write_jsonl as _write_jsonl


@pytest.fixture(scope="module")
def small_index(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("robust")
    src = _write_jsonl(tmp / "docs.jsonl", [
        {"doc_id": "d1", "text": "HISTORY:\nThe patient has a headache and fever."},
        {"doc_id": "d2", "text": "PLAN:\nIbuprofen for the headache."},
    ])
    out = tmp / "idx"
    capr_cli("index", "--lexical-only", str(src), "--out", str(out))
    return out


# ------------------------------------------------------------------ 1. damaged index copies
def _manifest(idx: Path) -> Path:
    return idx / (idx / "CURRENT").read_text().strip() / "manifest.json"


def _bad_manifest(idx: Path) -> str:
    _manifest(idx).write_text("{not json", encoding="utf-8")
    return f"the index is damaged: {_manifest(idx).relative_to(idx)}: not valid JSON"


def _no_passages(idx: Path) -> str:
    (idx / "segments" / "seg-000001" / "passages.zst").unlink()
    return "the index is damaged: segments/seg-000001/passages.zst: missing"


def _truncated_tf(idx: Path) -> str:
    tf = idx / "segments" / "seg-000001" / "lexical" / "tf.npy"
    tf.write_bytes(tf.read_bytes()[:40])
    return "the index is damaged: segments/seg-000001/lexical/tf.npy: EOF: reading array header"


def _cut_pids(idx: Path) -> str:
    p = idx / "segments" / "seg-000001" / "sourced.json"
    p.write_bytes(p.read_bytes()[:1])
    return "the index is damaged: segments/seg-000001/sourced.json: cut short"


def _short_live_mask(idx: Path) -> str:
    import numpy as np

    mask = idx / (idx / "CURRENT").read_text().strip() / "live" / "seg-000001.npy"
    np.save(mask, np.ones(1, dtype=bool))
    return f"the index is damaged: {mask.relative_to(idx)}: expected 2 true/false flags"


DAMAGE = {"manifest": _bad_manifest, "passages": _no_passages, "tf": _truncated_tf, "pids": _cut_pids,
          "live": _short_live_mask}
COMMANDS = {"search": lambda idx, tmp: ["search", str(idx), "headache"],
            "delete": lambda idx, tmp: ["delete", str(idx), "--doc-id", "d1"],
            "compact": lambda idx, tmp: ["compact", str(idx)],
            "add": lambda idx, tmp: ["add", str(idx), str(_write_jsonl(tmp / "more.jsonl", [{"doc_id": "d3", "text": "more headache"}]))]}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_damaged_index_is_one_line_naming_the_file(small_index, tmp_path, damage, command):
    idx = tmp_path / "copy"
    shutil.copytree(small_index, idx)
    expected = DAMAGE[damage](idx)
    if (command, damage) == ("search", "pids"):  # a search never reads sourced.json: it still answers
        proc = capr_cli(*COMMANDS[command](idx, tmp_path), check=False)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        return
    before = (idx / "CURRENT").read_text()
    proc = capr_cli(*COMMANDS[command](idx, tmp_path), check=False)
    _one_line_error(proc, f"{idx}: {expected}")
    # a write is refused before it commits a generation on top of the damage
    assert (idx / "CURRENT").read_text() == before


def test_damaged_index_serve_refuses_at_start(small_index, tmp_path):
    idx = tmp_path / "copy"
    shutil.copytree(small_index, idx)
    expected = _truncated_tf(idx)
    proc = capr_cli("serve", "--index", str(idx), "--port", "8799", check=False, timeout=30)
    _one_line_error(proc, expected)
    assert "serving" not in proc.stderr


def test_damaged_index_python_api(small_index, tmp_path):
    from capr import load_index
    from capr.index.reading import DamagedIndexError
    from capr.search import search

    idx = tmp_path / "copy"
    shutil.copytree(small_index, idx)
    _truncated_tf(idx)
    index = load_index(idx)  # the term matrix is read on first use ...
    with pytest.raises(DamagedIndexError) as e:
        search(index, "headache")  # ... and then named, not a numpy ValueError
    assert e.value.file == "segments/seg-000001/lexical/tf.npy"


def test_missing_index_keeps_its_message(tmp_path):
    proc = capr_cli("search", str(tmp_path / "nope"), "headache", check=False)
    _one_line_error(proc, f"{tmp_path / 'nope'}: no such index directory")
    assert "damaged" not in proc.stderr


# ------------------------------------------------------------------ 2. capr serve options checked at startup
@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_serve_port_out_of_range(small_index, port):
    proc = capr_cli("serve", "--index", str(small_index), "--port", port, check=False, timeout=30)
    _one_line_error(proc, f"--port {port}: a TCP port is 1..65535")
    assert "serving" not in proc.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "1e305"])
def test_serve_switch_interval_not_a_sane_number(small_index, value):
    """NaN passed the >= 0 check and the server died in the interpreter (Fatal Python error: take_gil)."""
    proc = capr_cli("serve", "--index", str(small_index), "--port", "8799", "--switch-interval-ms", value,
                    check=False, timeout=30)
    _one_line_error(proc, "switch_interval_ms must be between 0 and 1000, got ")
    assert "serving" not in proc.stderr


@pytest.mark.parametrize("spec,reason", [
    ("bi:/nonexistent", "re-ranker bi:/nonexistent: no such model folder"),
    ("bi:minilm,cross:/nonexistent", "re-ranker cross:/nonexistent: no such model folder"),
    ("bi:minilm,", "an empty member between commas"),
    ("foo:bar", "unknown kind 'foo'"),
    ("cross", "expected KIND:PATH"),
])
def test_serve_reranker_spec_checked_at_start(small_index, spec, reason):
    proc = capr_cli("serve", "--index", str(small_index), "--port", "8799", "--reranker", spec, check=False, timeout=30)
    _one_line_error(proc, reason)
    assert "serving" not in proc.stderr


def test_reranker_spec_check_loads_no_model(tmp_path, monkeypatch):
    """bi:minilm names the bundled model; an ensemble's members are each checked; nothing is loaded."""
    import capr.search.second_stage as rr

    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    for cls in ("BiReranker", "CrossReranker", "PolyReranker"):
        monkeypatch.setattr(rr, cls, boom)
    bi = _bi_encoder_folder(tmp_path / "bi")
    rr.check_reranker_spec("bi:minilm")
    rr.check_reranker_spec(f"bi:minilm,bi:{bi}")


# ------------------------------------------------------------------ 3. cross:/poly: given a bi-encoder folder
def _bi_encoder_folder(path: Path) -> Path:
    """The files that make a folder a sentence-transformers bi-encoder (no weights: nothing loads them)."""
    path.mkdir(parents=True)
    (path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    return path


@pytest.mark.parametrize("kind", ["cross", "cross-int8", "poly"])
def test_bi_encoder_folder_is_refused_as_cross_or_poly(tmp_path, kind):
    from capr.errors import QueryError
    from capr.search.second_stage import load_reranker

    bi = _bi_encoder_folder(tmp_path / "bi")
    what = "a poly-encoder" if kind == "poly" else "a cross-encoder"
    with pytest.raises(QueryError) as e:
        load_reranker(f"{kind}:{bi}")
    assert str(e.value) == (f"{kind}:{bi} is a bi-encoder (sentence-transformers with pooling), not {what}; "
                            f"use bi:{bi}")


def test_bi_encoder_as_cross_cli_is_one_line(small_index):
    from capr.models.encoder import resolve_model

    bi = resolve_model("minilm")  # the bundled MiniLM: a real sentence-transformers bi-encoder
    for kind in ("cross", "poly"):
        proc = capr_cli("search", str(small_index), "headache", "--reranker", f"{kind}:{bi}", check=False)
        _one_line_error(proc, f"{kind}:{bi} is a bi-encoder (sentence-transformers with pooling)", f"use bi:{bi}")
        assert "Converting" not in proc.stderr and not proc.stdout.strip()


def test_capr_card_kind_decides(tmp_path):
    from capr.errors import QueryError
    from capr.search.second_stage import check_model_folder

    def folder(name: str, card: dict | None, codes: bool = False) -> Path:
        p = _bi_encoder_folder(tmp_path / name)
        if card is not None:
            (p / "capr.json").write_text(json.dumps(card))
        if codes:
            (p / "poly_codes.pt").write_bytes(b"")
        return p

    # capr's own cross-encoder card wins over any file heuristics (a residual one holds a bi-encoder inside)
    check_model_folder("cross", folder("c", {"kind": "cross"}))
    check_model_folder("poly", folder("p", {"kind": "poly"}, codes=True))
    with pytest.raises(QueryError, match="poly_codes.pt is missing"):
        check_model_folder("poly", folder("p2", {"kind": "poly"}))
    cdv = tmp_path / "cdv"
    cdv.mkdir()
    (cdv / "capr.json").write_text('{"kind": "cdv"}')
    with pytest.raises(QueryError, match=r"is a capr cdv model \(capr.json\), not a cross-encoder"):
        check_model_folder("cross", cdv)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(QueryError, match="not a capr poly-encoder"):
        check_model_folder("poly", plain)
    check_model_folder("cross", plain)  # no modules.json: left to the loader (an HF sequence-classification folder)


def test_real_cross_encoder_folders_still_load(tmp_path):
    """A Hugging Face sequence-classification folder, and the same saved by sentence-transformers' CrossEncoder
    (modules.json without Pooling, model_type CrossEncoder), are cross-encoders."""
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from capr.models.encoder import resolve_model
    from capr.search.second_stage import load_reranker

    src = resolve_model("minilm")
    hf = tmp_path / "hf"
    AutoModelForSequenceClassification.from_pretrained(src, num_labels=1).save_pretrained(str(hf))
    AutoTokenizer.from_pretrained(src).save_pretrained(str(hf))
    st = tmp_path / "st"
    CrossEncoder(str(hf), num_labels=1).save_pretrained(str(st))
    for folder in (hf, st):
        assert load_reranker(f"cross:{folder}").score("headache", ["a headache", "fever"]).shape == (2,)


# ------------------------------------------------------------------ 4. delete counts distinct documents
def test_delete_same_id_twice_counts_one(small_index, tmp_path):
    idx = tmp_path / "copy"
    shutil.copytree(small_index, idx)
    proc = capr_cli("delete", str(idx), "--doc-id", "d1", "--doc-id", "d1")
    assert "deleted 1 document(s)" in proc.stderr and "now has 1 documents" in proc.stderr, proc.stderr
    proc = capr_cli("delete", str(idx), "--doc-id", "d2", "--doc-id", "d2", "--doc-id", "d2")
    assert "deleted 1 document(s)" in proc.stderr and "now has 0 documents" in proc.stderr, proc.stderr


# ------------------------------------------------------------------ 5. aspects outside the synonym table
@pytest.fixture(scope="module")
def drug_index(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("aspects")
    src = _write_jsonl(tmp / "docs.jsonl", [
        {"doc_id": "ibu", "title": "Ibuprofen", "text": "TREATMENT:\nIbuprofen relieves pain.\n\n"
                                                        "WARNINGS:\nSide effects of ibuprofen include stomach upset."},
        {"doc_id": "para", "title": "Paracetamol", "text": "TREATMENT:\nParacetamol relieves fever."},
    ])
    out = tmp / "idx"
    capr_cli("index", "--lexical-only", str(src), "--out", str(out))
    return out


def test_multi_word_aspect_whose_words_the_index_has_is_searched(drug_index):
    """'side effects' is in no synonym table and no section, but the index has both words: it is searched as
    words, as a table aspect without a section ('stages' here) always was, not refused."""
    proc = capr_cli("search", str(drug_index), "ibuprofen", "-a", "side effects", "--json")
    hits = json.loads(proc.stdout)["results"]
    assert hits[0]["doc_id"] == "ibu" and "Side effects" in hits[0]["text"]
    assert capr_cli("search", str(drug_index), "ibuprofen", "-a", "stages", check=False).returncode == 0
    # the Python API's Searcher accepts what the CLI accepts
    from capr import load_index
    from capr.errors import QueryError
    from capr.records import Query
    from capr.search import Searcher

    searcher = Searcher(load_index(drug_index))
    assert searcher.search(Query("q", entity="ibuprofen", aspect="side effects"), k=1).hits[0].passage.doc_id == "ibu"
    with pytest.raises(QueryError, match="unknown aspect 'dosage'"):
        searcher.parse(Query("q", entity="ibuprofen", aspect="dosage"))


def test_aspect_with_words_the_index_lacks_is_still_refused(drug_index):
    proc = capr_cli("search", str(drug_index), "ibuprofen", "-a", "dosage", check=False)
    _one_line_error(proc, "unknown aspect 'dosage'")
    assert "stage" not in proc.stderr  # difflib's 'dosage' ~ 'stage' is no help: a typo keeps its first letter
    proc = capr_cli("search", str(drug_index), "ibuprofen", "-a", "symptons", check=False)
    _one_line_error(proc, "unknown aspect 'symptons'; did you mean symptoms?")


def test_index_check_aspect_agrees_with_search(drug_index):
    from capr import load_index
    from capr.errors import QueryError
    from capr.text.aspects import check_aspect
    from capr.search.query import store_known_terms
    from capr.store.embedded import EmbeddedStore

    index = EmbeddedStore.of(load_index(drug_index))
    index.check_aspect("side effects")  # what a search accepts, the index's own check accepts
    with pytest.raises(QueryError, match=r"unknown aspect 'wund care'"):
        index.check_aspect("wund care")
    # without the index's terms (a Milvus collection has none) only the table and the corpus decide
    with pytest.raises(QueryError, match="unknown aspect 'side effects'"):
        check_aspect("side effects", index.aspect_counts(), index.analyzer)
    check_aspect("side effects", index.aspect_counts(), index.analyzer, store_known_terms(index))


def test_aspect_as_words_over_the_api(drug_index):
    from fastapi.testclient import TestClient

    from capr.service import ServiceConfig, create_app

    client = TestClient(create_app(drug_index, ServiceConfig()))
    r = client.post("/search", json={"text": "ibuprofen", "aspect": "side effects"})
    assert r.status_code == 200 and r.json()["results"][0]["doc_id"] == "ibu", r.text
    r = client.post("/search", json={"text": "ibuprofen", "aspect": "zzqqxx"})
    assert r.status_code == 400 and r.json()["field"] == "aspect"


# ------------------------------------------------------------------ 6. a query with no letters or digits
@pytest.mark.parametrize("text", ["😀🎉", "?!", "—  …"])
def test_query_without_letters_or_digits_says_so(small_index, text):
    proc = capr_cli("search", str(small_index), text, "-r", "bm25", check=False)
    assert proc.returncode == 2
    _one_line_error(proc, f"query has no searchable words: {text!r} has no letters or digits")
    assert "stopwords" not in proc.stderr


def test_stopword_query_keeps_its_reason(small_index):
    proc = capr_cli("search", str(small_index), "what is the", "-r", "bm25", check=False)
    _one_line_error(proc, "no searchable terms after stopword removal")


# ------------------------------------------------------------------ small CLI defects
def test_negative_boost_is_refused(small_index):
    proc = capr_cli("search", str(small_index), "headache", "--aspect-boost", "-3", check=False)
    _one_line_error(proc, "aspect_boost must be a number from 0 to 1000, got -3")


def test_stats_on_an_index_says_it_takes_a_corpus(small_index):
    proc = capr_cli("stats", str(small_index), check=False)
    _one_line_error(proc, "this is an index; capr stats reports on a corpus")


def test_add_says_how_many_documents_it_added_and_replaced(small_index, tmp_path):
    idx = tmp_path / "copy"
    shutil.copytree(small_index, idx)
    more = _write_jsonl(tmp_path / "more.jsonl", [{"doc_id": "d1", "text": "HISTORY:\nMigraine."},
                                                  {"doc_id": "d9", "text": "PLAN:\nRest."}])
    proc = capr_cli("add", str(idx), str(more))
    assert "added 2 document(s) (1 new, 1 replacing the same id)" in proc.stderr, proc.stderr
