"""Issue 16: what `capr index` + `capr search` give without flags is the best measured pipeline — BM25 + dense
vectors, hybrid search with the dev-chosen fusion, entity-first ⟨entity, aspect⟩ ranking — and `capr eval
--pipeline default` measures exactly that."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import capr_cli, index_of_documents, need_data


@pytest.fixture(scope="module")
def default_index(tmp_path_factory, demo_dir):
    out = tmp_path_factory.mktemp("default") / "idx"
    proc = capr_cli("index", str(demo_dir), "--out", str(out))
    assert "36 documents" in proc.stderr
    return out


def test_capr_index_writes_vectors_and_search_fuses_by_default(default_index, tmp_path, demo_dir):
    from capr.index import Index
    from capr.records import Retriever
    from capr.search import Searcher

    index = Index.load(default_index)
    assert index.has_dense and index.manifest["dense"]["encoder"]["model"] == "minilm"
    assert Searcher(index).default_retriever() is Retriever.hybrid
    res = json.loads(capr_cli("search", str(default_index), "blood thinner for an irregular heartbeat", "-k", "3", "--json").stdout)
    assert res["retriever"] == "hybrid"
    assert "atrial fibrillation" in (res["results"][0]["title"] + res["results"][0]["text"]).lower()
    # the default shares, said in the output; every question gets them unless --fusion-by-question is given
    assert res["fusion"] == {"method": "rrf", "weights": {"bm25": 0.2, "dense": 0.8}}
    rare = json.loads(capr_cli("search", str(default_index), "irregular heartbeat", "-k", "3", "--json").stdout)
    assert rare["fusion"] == res["fusion"]
    # asked for, words rare even in absolute terms (each in a passage or two of ~300) weigh BM25 as dense, and a
    # small index keeps the default shares for a paraphrase (capr.search.query_weights)
    rare = json.loads(capr_cli("search", str(default_index), "irregular heartbeat", "-k", "3", "--json",
                               "--fusion-by-question").stdout)
    assert rare["fusion"] == {"method": "rrf", "weights": {"bm25": 0.5, "dense": 0.5}}
    paraphrase = json.loads(capr_cli("search", str(default_index), "blood thinner for an irregular heartbeat", "-k",
                                     "3", "--json", "--fusion-by-question").stdout)
    assert paraphrase["fusion"] == res["fusion"]
    lexical = tmp_path / "lex"
    capr_cli("index", "--lexical-only", str(demo_dir), "--out", str(lexical))
    assert not Index.load(lexical).has_dense
    res = json.loads(capr_cli("search", str(lexical), "atrial fibrillation treatment", "--json").stdout)
    assert res["retriever"] == "bm25" and res["fusion"] is None


def test_hybrid_default_equals_the_explicit_dev_chosen_setting(default_index):
    """The default is not a separate code path: it is --retriever hybrid with SearchOptions' fusion."""
    from capr.index import Index
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(Index.load(default_index))
    q = Query("q", entity="IgA nephropathy", aspect="symptoms")
    default = searcher.search(q, SearchOptions(k=5))
    explicit = searcher.search(q, SearchOptions(k=5, retriever="hybrid"))
    assert default.retriever == "hybrid"
    assert [(h.pid, round(h.score, 6)) for h in default.hits] == [(h.pid, round(h.score, 6)) for h in explicit.hits]


def test_group_by_doc_returns_one_passage_per_document(default_index):
    from capr.index import Index
    from capr.search import Searcher

    plain = Searcher(Index.load(default_index)).search("kidney disease", k=8).to_dict()["results"]  # what the CLI prints
    grouped = json.loads(capr_cli("search", str(default_index), "kidney disease", "-k", "8", "--group-by", "doc",
                                  "--json").stdout)["results"]
    docs = [r["doc_id"] for r in grouped]
    assert len(docs) == len(set(docs)) == 8
    assert len({r["doc_id"] for r in plain}) < len(plain)  # the passage ranking repeats documents: grouping matters
    assert grouped[0]["pid"] == plain[0]["pid"]  # a document scores as its best passage
    # documents come in the order of their best passage in the passage ranking
    first_seen = list(dict.fromkeys(r["doc_id"] for r in plain))
    assert docs[: len(first_seen)] == first_seen[: len(docs)]


def test_group_by_doc_in_the_api(default_index):
    from fastapi.testclient import TestClient

    from capr.service import create_app
    from capr.service.config import ServiceConfig

    client = TestClient(create_app(default_index, ServiceConfig()))
    r = client.post("/search", json={"text": "kidney disease", "k": 6, "group_by": "doc", "evidence": False})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["retriever"] == "hybrid"
    docs = [x["doc_id"] for x in body["results"]]
    assert len(docs) == len(set(docs)) == 6
    assert client.post("/search", json={"text": "kidney", "group_by": "section"}).status_code in (400, 422)


def test_query_vectors_are_cached_and_equal_fresh_encoding(default_index):
    from capr.index import Index

    enc = Index.load(default_index).encoder()
    texts = ["IgA nephropathy symptoms", "gout treatment"]
    first = enc.encode_queries(texts)
    assert set(texts) <= set(enc._query_cache)
    again = enc.encode_queries(list(reversed(texts)))
    np.testing.assert_allclose(again, first[::-1], atol=1e-6)
    fresh = enc.query_side.encode(texts, enc.config.query_prefix)
    np.testing.assert_allclose(first, fresh, atol=1e-5)
    enc.forget_queries()  # what a latency benchmark calls between settings: the next encoding is paid again
    assert not set(texts) & set(enc._query_cache)


def test_demo_shows_the_default_pipeline_and_entity_aware_scoring(tmp_path):
    proc = capr_cli("demo", "--cache-dir", str(tmp_path))
    assert "indexed 36 documents" in proc.stdout and (tmp_path / "demo-index" / "CURRENT").exists()
    for label in ("IgA nephropathy, symptoms", "cardiomyopathy, family history", "how is atrial fibrillation treated"):
        assert label in proc.stdout
    assert "BM25 + dense" in proc.stdout and "hybrid, the default" in proc.stdout
    tail = proc.stdout.partition("entity-aware: ⟨pneumonia, complications⟩")[2]
    first = tail.partition("first with entity-aware scoring:")[2].splitlines()[0]
    assert "Pneumonia" in first and "outlook" in first  # the right answer (its complications) first
    assert "without it (--no-entity-first), first would be" in tail  # ...which plain scoring misses


def test_eval_default_pipeline_is_capr_search_defaults(tmp_path):
    data = need_data("mediqa2019").parent
    res = json.loads(capr_cli("eval", "--benchmark", "mediqa2019", "--data-dir", str(data), "--query-field", "question",
                              "--pipeline", "default", "--cache-dir", str(tmp_path / "c"), "--json").stdout)
    assert res["retriever"] == "default" and res["queries"] == 25
    from capr.index import Index

    [built] = [f.parent for f in (tmp_path / "c").rglob("CURRENT")]  # --cache-dir holds the benchmark's index folder
    assert Index.load(built).has_dense  # the benchmark index is what `capr index` builds: with vectors
    bm25 = json.loads(capr_cli("eval", "--benchmark", "mediqa2019", "--data-dir", str(data), "--query-field", "question",
                               "--retriever", "bm25", "--cache-dir", str(tmp_path / "c"), "--json").stdout)
    assert res["metrics"]["MAP"] >= bm25["metrics"]["MAP"]


def _run_lists(path) -> dict[str, list[str]]:
    runs: dict[str, list[tuple[int, str]]] = {}
    for line in path.read_text().splitlines():
        qid, _, pid, rank, *_ = line.split()
        runs.setdefault(qid, []).append((int(rank), pid))
    return {q: [pid for _, pid in sorted(v)] for q, v in runs.items()}


def test_eval_default_pipeline_with_a_reranker_reorders_its_top_k(tmp_path, monkeypatch):
    """`capr eval --pipeline default --reranker` runs the Searcher with the second stage: the re-ranker reorders
    the default pipeline's top --rerank-depth and leaves the rest as it was (MEDIQA's pools hold 3–11 answers, so
    the depth is 5 here). The re-ranker is a residual cross-encoder that has not moved from MiniLM (lr 0), so it
    ranks by MiniLM's cosine alone."""
    from capr.train import TrainArgs, train
    from test_train import tiny_labels

    data = need_data("mediqa2019").parent
    monkeypatch.setenv("CAPR_CACHE", str(tmp_path / "vectors"))
    model = tmp_path / "rcross"
    train(tiny_labels(), model, TrainArgs.for_kind("cross", first_stage="minilm", max_steps=1, lr=0.0, batch_size=4,
                                                   max_length=48, query_max_length=16, dev_fraction=0.0,
                                                   hard_negatives=1, question_prob=0.0, synonym_prob=0.0), progress=False)
    common = ["eval", "--benchmark", "mediqa2019", "--data-dir", str(data), "--query-field", "question",
              "--pipeline", "default", "--cache-dir", str(tmp_path / "c"), "--json"]
    plain = json.loads(capr_cli(*common, "--run-out", str(tmp_path / "plain.trec")).stdout)
    reranked = json.loads(capr_cli(*common, "--reranker", f"cross:{model}", "--rerank-depth", "5", "--rerank-share", "1",
                                   "--run-out", str(tmp_path / "reranked.trec")).stdout)
    assert reranked["reranker"] == {"spec": f"cross:{model}", "depth": 5, "share": 1.0}
    assert reranked["queries"] == plain["queries"] == 25
    before, after = _run_lists(tmp_path / "plain.trec"), _run_lists(tmp_path / "reranked.trec")
    assert before.keys() == after.keys()
    moved = 0
    for qid in before:
        assert set(after[qid][:5]) == set(before[qid][:5]), qid  # the same candidates...
        assert after[qid][5:] == before[qid][5:], qid  # ...and the tail untouched
        moved += after[qid][:5] != before[qid][:5]
    assert moved >= 3  # ...in MiniLM's order (share 1: the re-ranker's order alone), not the fused one


PLANTED = [
    # the entity's own note: its symptoms section never repeats the disease's name (as real notes do not)
    {"doc_id": "iga", "title": "Nephrology consult", "text": "ASSESSMENT:\nIgA nephropathy confirmed on biopsy.\n\n"
     "SYMPTOMS:\nThe patient reports episodes of visible blood in the urine after colds, with flank discomfort and "
     "foamy urine.\n"},
    # the asked aspect of *other* conditions, in the words of the query's aspect
    {"doc_id": "flu", "title": "Clinic note", "text": "SYMPTOMS:\nSymptoms of influenza: fever, cough, symptoms of "
     "fatigue and body aches; kidney symptoms absent.\n"},
    {"doc_id": "migraine", "title": "Neurology note", "text": "SYMPTOMS:\nHeadache symptoms with aura, nausea and "
     "light sensitivity; symptoms worse in the morning.\n"},
    {"doc_id": "gout", "title": "Rheumatology note", "text": "SYMPTOMS:\nGout flare symptoms: a hot swollen big toe joint.\n\n"
     "PLAN:\nColchicine.\n"},
]


@pytest.fixture(scope="module")
def planted_index(tmp_path_factory):
    from capr.models.encoder import EncoderConfig

    return index_of_documents(tmp_path_factory, "planted", PLANTED, dense=EncoderConfig())


@pytest.mark.parametrize("retriever", ["bm25", "dense", "hybrid"])
def test_the_entity_counts_for_every_retriever(planted_index, retriever):
    """⟨IgA nephropathy, symptoms⟩: no passage about the asked aspect of *another* condition outranks a passage of
    the entity's note; without entity-aware scoring (the plain retriever with the aspect prior) one does. With
    vectors (dense, hybrid: the default) the entity's symptoms section itself comes first, although it never names
    the disease."""
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(planted_index)
    q = Query("q", entity="IgA nephropathy", aspect="symptoms")
    hits = searcher.search(q, SearchOptions(k=4, retriever=retriever)).hits
    docs = [h.passage.doc_id for h in hits]
    assert docs[0] == "iga" and docs[: docs.count("iga")] == ["iga"] * docs.count("iga")
    if retriever != "bm25":
        assert hits[0].passage.aspect == "symptoms"
    plain = searcher.search(q, SearchOptions(k=3, retriever=retriever, entity_first=False)).hits
    if retriever == "bm25":  # (MiniLM alone knows IgA nephropathy brings blood in the urine)
        assert plain[0].passage.doc_id != "iga"


def test_no_mention_of_the_entity_is_said(planted_index):
    from capr.records import Query
    from capr.search import Searcher

    result = Searcher(planted_index).search(Query("q", entity="sarcoidosis", aspect="symptoms"), k=2)
    assert result.notices == ["no passage mentions 'sarcoidosis'; showing the closest matches"]
    assert len(result.hits) == 2
    named = Searcher(planted_index).search(Query("q", entity="gout", aspect="symptoms"), k=2)
    assert named.notices == [] and named.hits[0].passage.doc_id == "gout"


class _WordCountReranker:
    """A second stage that prefers passages saying "symptoms" most often: it would put the symptoms of *another*
    condition first (any object with ``score(query, passages)`` plugs into the Searcher as a re-ranker)."""

    name = "word-count"

    def __init__(self):
        self.read: list[str] = []

    def score(self, query, passages):
        self.read += passages
        return np.asarray([p.lower().count("symptoms") for p in passages], dtype=np.float32)


def test_a_reranker_orders_within_the_entity_tiers_and_the_aspect_prior(planted_index):
    """The second stage re-orders the first stage's hits inside the pipeline's structure: the entity's own
    passages stay first (its symptoms section, favoured by the prior, on top) and the re-ranker's preference orders
    the rest; without an entity, its order (with the aspect prior) is the result."""
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(planted_index, reranker=_WordCountReranker())
    q = Query("q", entity="IgA nephropathy", aspect="symptoms")
    for share in (1.0, 0.3):  # the re-ranker's order alone, and fused with the first stage's (the default)
        hits = searcher.search(q, SearchOptions(k=5, rerank_share=share)).hits
        docs = [h.passage.doc_id for h in hits]
        assert docs[: docs.count("iga")] == ["iga"] * docs.count("iga") and hits[0].passage.aspect == "symptoms"
    hits = searcher.search(q, SearchOptions(k=5, rerank_share=1.0)).hits
    others = [h.passage.doc_id for h in hits if h.passage.doc_id != "iga"]
    assert others[:3] == ["flu", "migraine", "gout"]  # the re-ranker's order below the entity's tier
    first_stage = [h.pid for h in Searcher(planted_index).search(q, SearchOptions(k=5)).hits]
    assert [h.pid for h in searcher.search(q, SearchOptions(k=5, rerank_share=0.0)).hits] == first_stage
    free = searcher.search("what are the symptoms", SearchOptions(k=3, rerank_share=1.0)).hits
    assert free[0].passage.doc_id == "flu"  # no entity: the re-ranker (three "symptoms") decides
    # a re-ranker without document context reads what the index's encoder read: the title in front of the text
    assert planted_index.includes_titles()
    assert any(t.startswith("Nephrology consult\n") for t in searcher.reranker.read)


class _FixedReranker:
    """A member with fixed preferences by document, reading passages with ``context``."""

    def __init__(self, name, prefs, context):
        from capr.models.context import PassageContext

        self.name, self.prefs, self.context, self.read = name, prefs, PassageContext(context), []

    def score(self, query, passages):
        self.read += passages
        return np.asarray([next((v for word, v in self.prefs.items() if word in p), 0.0) for p in passages])


def test_an_ensemble_sums_its_members_standardised_scores_each_reading_its_own_way(planted_index):
    """Two re-rankers that each put a different passage first agree on a third they both rank second: their
    z-scored sum puts it first. Each member reads the passage as it was trained to (title context vs the index
    text). An ensemble's default share is its own (ENSEMBLE_RERANK_SHARE), not a single re-ranker's."""
    from capr.search.second_stage import DEFAULT_RERANK_SHARE, ENSEMBLE_RERANK_SHARE, EnsembleReranker, rerank_share
    from capr.search import SearchOptions, Searcher

    # by document: one member loves flu and likes gout, the other loves migraine and likes gout
    a = _FixedReranker("a", {"influenza": 10.0, "Gout flare": 9.0}, "off")
    b = _FixedReranker("b", {"Headache": 10.0, "Gout flare": 9.0}, "title")
    ensemble = EnsembleReranker([a, b])
    assert rerank_share(ensemble, None) == ENSEMBLE_RERANK_SHARE != DEFAULT_RERANK_SHARE
    assert rerank_share(ensemble, 0.2) == 0.2
    searcher = Searcher(planted_index, reranker=ensemble)
    q = "what are the symptoms"
    hits = searcher.search(q, SearchOptions(k=3, rerank_share=1.0)).hits
    assert hits[0].passage.doc_id == "gout"
    by_default = searcher.search(q, SearchOptions(k=3)).hits
    assert [h.pid for h in by_default] == [h.pid for h in searcher.search(q, SearchOptions(k=3, rerank_share=ENSEMBLE_RERANK_SHARE)).hits]
    alone = [h.passage.doc_id for h in Searcher(planted_index, reranker=a).search(q, SearchOptions(k=3, rerank_share=1.0)).hits]
    assert alone[0] == "flu"
    # a reads the index text (title, newline, text), b its own title context ("title: text")
    titles = {d["title"] for d in PLANTED}
    assert a.read and all(t.split("\n")[0] in titles for t in a.read)
    assert b.read and all(t.split(": ")[0] in titles and t.split("\n")[0] not in titles for t in b.read)


def test_an_ensemble_of_a_model_with_itself_ranks_as_the_model(planted_index):
    """Real MiniLM twice: standardising and summing changes no order (bi:minilm names the bundled model)."""
    from capr.search.second_stage import load_reranker
    from capr.search import SearchOptions, Searcher

    single, double = load_reranker("bi:minilm"), load_reranker("bi:minilm,bi:minilm")
    for q in ("what are the symptoms", "blood in the urine", "joint pain at night"):
        one = Searcher(planted_index, reranker=single).search(q, SearchOptions(k=5, rerank_share=1.0)).hits
        two = Searcher(planted_index, reranker=double).search(q, SearchOptions(k=5)).hits
        assert [h.pid for h in one] == [h.pid for h in two]


def test_passage_windows_cover_a_long_text_with_overlap():
    from capr.models.encoder import passage_windows

    assert passage_windows("short text") == ["short text"]
    words = [f"w{i}" for i in range(400)]
    windows = passage_windows(" ".join(words), words=150, stride=75)
    assert [w.split()[0] for w in windows] == ["w0", "w75", "w150", "w225", "w300"]
    assert all(len(w.split()) <= 150 for w in windows) and windows[-1].split()[-1] == "w399"
    assert set(" ".join(windows).split()) == set(words)


def test_a_bi_encoder_second_stage_reads_a_long_passage_to_its_end():
    """MiniLM reads 256 word pieces: a long passage whose answer is in its last lines loses to a short passage on
    the subject that does not answer, when scored by its beginning; scored by its best window (MaxP) it wins. Each
    window is read as the whole passage is (the index text's title in front)."""
    from capr.records import Passage
    from capr.search.second_stage import BiReranker, Windows, score_passages

    filler = " ".join(f"Week {i} of the clinic schedule lists routine visits, forms and staff meetings." for i in range(30))
    answer = "A gout flare is treated with colchicine or an NSAID, and allopurinol prevents the next flare."
    long = Passage("long", "d1", f"{filler} {answer}", "treatment", 0, 0, [], "Clinic letter", "")
    short = Passage("short", "d2", "Gout is a kind of arthritis in which the big toe swells.", "overview", 0, 0, [],
                    "Clinic letter", "")
    passages = [long, short]
    index_texts = [f"{p.title}\n{p.text}" for p in passages]
    query = "which medicines treat a gout flare"
    reranker = BiReranker("minilm")
    windows = reranker.read_windows(long, index_texts[0])
    assert len(windows) > 2 and all(w.startswith("Clinic letter\n") for w in windows)
    assert answer in windows[-1]
    assert reranker.read_windows(short, index_texts[1]) == [index_texts[1]]
    best_window = score_passages(reranker, query, passages, index_texts)
    reranker.windows = Windows.off
    beginning = score_passages(reranker, query, passages, index_texts)
    assert beginning[0] < beginning[1] and best_window[0] > best_window[1]


def test_bad_ensemble_specs_are_one_clear_line(tmp_path, planted_index):
    from capr.errors import QueryError
    from capr.search.second_stage import load_reranker

    with pytest.raises(QueryError, match="empty member"):
        load_reranker("bi:minilm,")
    with pytest.raises(QueryError, match="no such model folder"):
        load_reranker(f"bi:minilm,bi:{tmp_path / 'missing'}")
    r = capr_cli("search", str(planted_index.root), "fever", "--reranker", "bi:minilm,", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "empty member" in r.stderr


NOTES_WITH_MEDICATIONS = [
    {"doc_id": "note01", "title": "Cardiology clinic note", "text": "HISTORY OF PRESENT ILLNESS:\nPalpitations for two "
     "weeks; ECG shows atrial fibrillation with a rapid ventricular rate.\n\nMEDICATIONS:\nApixaban 5 mg twice daily. "
     "Metoprolol 25 mg daily.\n"},
    {"doc_id": "note02", "title": "Primary care note", "text": "HISTORY OF PRESENT ILLNESS:\nHypertension, poorly "
     "controlled.\n\nMEDICATIONS:\nLisinopril 10 mg daily. Aspirin 81 mg daily.\n"},
    {"doc_id": "note03", "title": "Endocrine note", "text": "HISTORY OF PRESENT ILLNESS:\nType 2 diabetes with "
     "neuropathy.\n\nMEDICATIONS:\nMetformin 1000 mg twice daily. Gabapentin 300 mg at night.\n"},
]


@pytest.fixture(scope="module")
def medication_notes(tmp_path_factory):
    return index_of_documents(tmp_path_factory, "medication-notes", NOTES_WITH_MEDICATIONS)


def test_a_filter_narrows_the_entitys_answers_it_does_not_change_the_patient(medication_notes):
    """⟨atrial fibrillation, medications⟩ with aspect=medications: the entity is named only in note01's history, so
    whether a passage belongs to the entity's documents must be decided before the filter — else every medications
    list "mentions nothing" and other patients' lists come back under a false notice."""
    from capr.records import Query
    from capr.search import SearchOptions, Searcher, search

    searcher = Searcher(medication_notes)
    q = Query("q", entity="atrial fibrillation", aspect="medications")
    plain = searcher.search(q, SearchOptions(k=3))
    filtered = searcher.search(q, SearchOptions(k=3, filters={"aspect": "medications"}))
    assert plain.notices == [] and plain.hits[0].passage.doc_id == "note01"
    assert filtered.notices == []
    assert [(h.passage.doc_id, h.passage.aspect) for h in filtered.hits][0] == ("note01", "medications")
    assert all(h.passage.aspect == "medications" for h in filtered.hits)
    assert search(medication_notes, q, k=1, filters={"aspect": "medications"})[0].passage.doc_id == "note01"


def test_a_filter_that_keeps_none_of_the_entitys_documents_says_so_truly(medication_notes):
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(medication_notes)
    result = searcher.search(Query("q", entity="atrial fibrillation", aspect="medications"),
                             SearchOptions(k=2, filters={"doc_id": "note02"}))
    assert result.notices == ["no passage that passes the filter mentions 'atrial fibrillation'; showing the closest "
                              "matches that pass it"]
    assert {h.passage.doc_id for h in result.hits} == {"note02"}
    # the same words whether or not notes the filter drops name the entity: a one-patient view learns nothing of others
    nowhere = searcher.search(Query("q", entity="brucellosis", aspect="medications"),
                              SearchOptions(k=2, filters={"doc_id": "note02"}))
    assert nowhere.notices == [result.notices[0].replace("'atrial fibrillation'", "'brucellosis'")]


def test_the_cli_filter_keeps_the_entitys_patient(medication_notes):
    proc = capr_cli("search", str(medication_notes.root), "-e", "atrial fibrillation", "-a", "medications",
                    "--filter", "aspect=medications", "--json")
    out = json.loads(proc.stdout)
    assert out["notices"] == [] and out["results"][0]["doc_id"] == "note01"


def test_a_second_stage_reorders_the_top_rerank_depth_and_the_rest_keep_the_first_stages_order(planted_index):
    """k beyond --rerank-depth: the re-ranker re-orders the first stage's top `rerank_depth`, and the rest of the k
    follow in the first stage's order (what `--rerank-depth` says, and what `capr eval` measures)."""
    from capr.search import SearchOptions, Searcher

    q = "what are the symptoms"
    first = [h.pid for h in Searcher(planted_index).search(q, SearchOptions(k=5)).hits]
    searcher = Searcher(planted_index, reranker=_WordCountReranker())
    head = [h.pid for h in searcher.search(q, SearchOptions(k=2, rerank_depth=2, rerank_share=1.0)).hits]
    result = searcher.search(q, SearchOptions(k=5, rerank_depth=2, rerank_share=1.0))
    assert [h.pid for h in result.hits[:2]] == head and set(head) == set(first[:2])
    assert [h.pid for h in result.hits[2:]] == [p for p in first if p not in head][:3]
    assert [h.rank for h in result.hits] == [1, 2, 3, 4, 5]
    assert len(searcher.reranker.read) == 2 + 2  # the head's two passages, read once per search


def test_the_profile_says_what_searches_and_where_it_came_from(tmp_path, demo_dir):
    """Searcher.open resolves every default from the index's profile: capr's defaults, or what `capr adapt`
    recorded (record_profile), with the caller's second stage over it."""
    from capr.corpus import read_documents
    from capr.index import IndexWriter, load_index
    from capr.models.encoder import EncoderConfig
    from capr.search.config import DEFAULT_FUSION, Origin, record_profile
    from capr.search import SearchOptions, Searcher

    docs = list(read_documents(demo_dir))[:4]
    plain, adapted = tmp_path / "plain", tmp_path / "adapted"
    for root, recorded in ((plain, False), (adapted, True)):
        w = IndexWriter(root, dense=EncoderConfig())
        if recorded:
            record_profile(w, fusion={"method": "rrf", "weights": [0.1, 0.9]}, reranker="bi:minilm", rerank_depth=7)
        with w:
            for d in docs:
                w.add(d)
    default = Searcher.open(load_index(plain))
    assert default.reranker is None and default.profile.fusion == DEFAULT_FUSION
    assert set(default.profile.origins.values()) == {Origin.default}
    searcher = Searcher.open(load_index(adapted))
    profile = searcher.profile
    assert (profile.reranker, profile.rerank_depth, profile.fusion.weights) == ("bi:minilm", 7, (0.1, 0.9))
    assert profile.origins["reranker"] is Origin.adapted and profile.origins["fusion"] is Origin.adapted
    assert searcher.reranker is not None and searcher.resolve(SearchOptions()).rerank_depth == 7
    result = searcher.search("gout attack", SearchOptions(k=3))
    assert result.reranker == "bi:minilm" and result.to_dict()["reranker"] == "bi:minilm"
    assert Searcher.open(load_index(adapted)).reranker is searcher.reranker  # loaded once per process
    asked = Searcher.open(load_index(adapted), reranker="none")
    assert asked.reranker is None and asked.profile.origins["reranker"] is Origin.user


def test_the_index_probe_chooses_the_fusion_of_a_question(runner, default_index):
    """--fusion-probe (issue 53): the demo index measures itself once (capr.search.strength), and a free-text question is
    fused as the probe's switch says — the same hits through the library and `capr search`."""
    from capr.cli import app
    from capr.index import load_index
    from capr.search import SearchOptions, Searcher
    from capr.search.strength import MIN_PROBES, measure_strength, probe_fusion

    searcher = Searcher(load_index(default_index))
    strength = measure_strength(searcher.store)
    assert strength is not None and strength.questions >= MIN_PROBES
    assert strength == measure_strength(searcher.store)  # the same draw, the same answers
    fused = probe_fusion(strength)
    question = "blood thinner for an irregular heartbeat"
    expected = searcher.search(question, SearchOptions(k=5, fusion=fused))
    probed = searcher.search(question, SearchOptions(k=5, fusion_probe=True))
    assert [(h.pid, h.score) for h in probed.hits] == [(h.pid, h.score) for h in expected.hits]
    res = runner.invoke(app, ["search", str(default_index), question, "-k", "5", "--json", "--fusion-probe"])
    assert res.exit_code == 0, res.output
    assert [r["pid"] for r in json.loads(res.stdout)["results"]] == [h.pid for h in expected.hits]
