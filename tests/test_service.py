"""The HTTP service: search with evidence, auth, validation, documents, cases, limits, logs, concurrency."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from capr.errors import CaprError
from capr.index import Index
from capr.service import ServiceConfig, create_app, load_tokens
from capr.service.config import TokenSet
from capr.search import search
from conftest import capr_cli
from service_support import AUTH, TOKEN, LiveServer, build_demo_index, copy_index

SECRET = "Zorblatt Quintessa has a purple rash since 1997"  # stands in for patient text


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory, demo_dir) -> Path:
    return build_demo_index(demo_dir, tmp_path_factory.mktemp("svc") / "demo")


@pytest.fixture
def index_dir(demo_index, tmp_path) -> Path:
    return copy_index(demo_index, tmp_path / "idx")


def make_client(index_dir: Path, **config) -> TestClient:
    config.setdefault("tokens", (TOKEN,))
    return TestClient(create_app(index_dir, ServiceConfig(**config)))


@pytest.fixture
def client(index_dir) -> TestClient:
    return make_client(index_dir)


@pytest.fixture(scope="module")
def read_client(demo_index) -> TestClient:
    """For tests that never write: one app over the shared demo index."""
    return make_client(demo_index)


def passage_slice(result: dict, a: int, b: int) -> str:
    return result["text"][a - result["start"] : b - result["start"]]


# ------------------------------------------------------------------------------------------ search
def test_structured_search_returns_highlights_and_evidence(read_client):
    r = read_client.post("/search", json={"entity": "IgA nephropathy", "aspect": "symptoms", "k": 5})
    assert r.status_code == 200, r.text
    data = r.json()
    assert len(data["results"]) == 5
    top = data["results"][0]
    assert top["doc_id"] == "article_01_iga_nephropathy" and top["aspect"] == "symptoms"
    assert top["document_url"] == "/documents/article_01_iga_nephropathy"
    assert data["evidence_method"] == "lexical"
    # highlight spans are document offsets of query words
    words = {passage_slice(top, a, b).lower() for a, b in top["highlights"]}
    assert words and words <= {"symptoms", "symptom", "signs", "sign", "iga", "nephropathy", "presentation", "clinical", "features"}
    sents = top["sentences"]
    assert len(sents) > 3
    for s in sents:
        assert passage_slice(top, s["start"], s["end"]) == s["text"]
    best = max(s["score"] for s in sents)
    evidence = [s for s in sents if s["evidence"]]
    assert 1 <= len(evidence) <= 3 and all(s["score"] >= 0.5 * best for s in evidence)
    assert sents[0]["text"] == "## Symptoms" and sents[0]["score"] == 0.0  # a heading line is never evidence
    # sentences without any query term score 0 and are never evidence
    assert all(s["score"] == 0 and not s["evidence"] for s in sents if "hematuria" in s["text"])


def test_free_text_search_with_filter_and_tfidf(read_client):
    body = {"text": "how is atrial fibrillation treated", "k": 3, "filters": {"aspect": "treatment"}}
    for retriever in ("bm25", "tfidf"):
        data = read_client.post("/search", json={**body, "retriever": retriever}).json()
        assert data["retriever"] == retriever and data["fusion"] is None  # only a hybrid first stage fuses
        assert 1 <= len(data["results"]) <= 3
        assert all(r["aspect"] == "treatment" for r in data["results"])
        assert "fibrillation" in data["results"][0]["title"].lower()
    off = read_client.post("/search", json={**body, "evidence": False}).json()
    assert off["evidence_method"] is None and all(r["sentences"] is None for r in off["results"])


def test_search_responses_hold_to_the_published_schema(read_client):
    """/search writes its JSON without building the response models: each response must still be exactly what
    the SearchResponse model gives (no field missing, extra or of another type), with evidence on and off."""
    from capr.service import schemas as S

    bodies = [{"entity": "IgA nephropathy", "aspect": "symptoms", "k": 5},
              {"text": "how is atrial fibrillation treated", "k": 10, "group_by": "doc"},
              {"text": "cough wheeze asthma", "k": 3, "evidence": False, "retriever": "tfidf"}]
    for body in bodies:
        r = read_client.post("/search", json=body)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
        data = r.json()
        assert data["results"]
        assert S.SearchResponse.model_validate(data).model_dump(mode="json") == data
        for hit in data["results"]:
            assert set(hit) == set(S.SearchResult.model_fields)


@pytest.mark.parametrize("body, loc", [
    ({"text": "x", "k": 0}, ["body", "k"]),
    ({"text": "x", "k": 101}, ["body", "k"]),
    ({"text": "x", "retriever": "magic"}, ["body", "retriever"]),
    ({"text": "x", "entitty": "typo"}, ["body", "entitty"]),
    ({"text": "x", "filters": {"aspect": {"nested": 1}}}, ["body", "filters"]),
    ({"text": "x", "aspect_boost": -1}, ["body", "aspect_boost"]),
    ({"entity": "e" * 201}, ["body", "entity"]),
    ({"k": 3}, ["body"]),
    ({"text": "   "}, ["body"]),
])
def test_validation_errors_are_422_naming_the_field(read_client, body, loc):
    r = read_client.post("/search", json=body)
    assert r.status_code == 422, r.text
    data = r.json()
    assert data["detail"][0]["loc"][: len(loc)] == loc
    assert data["message"].startswith(".".join(loc))
    assert "input" not in data["detail"][0]  # the request text is not echoed back


def test_malformed_bodies_are_4xx(read_client):
    assert read_client.post("/search", content=b"{not json", headers={"content-type": "application/json"}).status_code == 422
    r = read_client.post("/search", content=b'{"text": "\\ud800 lone surrogate"}', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "text"]
    assert read_client.get("/vocabulary", params={"field": "colour"}).status_code == 422


@pytest.mark.parametrize("body, field, words", [
    ({"text": "x", "aspect": "sympt0ms"}, "aspect", "did you mean symptoms"),
    ({"text": "x", "filters": {"specialty": "cardiology"}}, "filters", "unknown filter field 'specialty'"),
    ({"text": "x", "filters": {"aspect": "astrology"}}, "filters", "no passage has aspect='astrology'"),
    ({"text": "x", "retriever": "dense"}, "retriever", "needs an index built with vectors"),
    ({"text": "x", "reranker": "cross:/etc"}, "reranker", "not enabled on this server"),
])
def test_query_errors_are_400_naming_the_field(read_client, body, field, words):
    r = read_client.post("/search", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field and words in r.json()["detail"]


def test_reranker_unavailable_and_enabled(index_dir, monkeypatch):
    from capr.models.encoder import resolve_model

    spec = f"bi:{resolve_model('minilm')}"  # a real model folder: the bundled MiniLM as a bi-encoder re-ranker
    c = make_client(index_dir, rerankers=(spec, "cross:/no/such/model"))
    r = c.post("/search", json={"text": "asthma inhaler", "reranker": "cross:/no/such/model"})
    assert r.status_code == 400 and r.json()["field"] == "reranker" and "no such model folder" in r.json()["detail"]

    plain = c.post("/search", json={"text": "asthma inhaler", "k": 5}).json()["results"]
    rr = c.post("/search", json={"text": "asthma inhaler", "k": 5, "reranker": spec}).json()
    assert rr["reranker"] == spec
    assert [r["rank"] for r in rr["results"]] == [1, 2, 3, 4, 5]
    # scores are now MiniLM cosines, in decreasing order, over the first stage's top candidates
    scores = [r["score"] for r in rr["results"]]
    assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0 for s in scores)
    assert scores != [r["score"] for r in plain]
    # the re-ranker's share: 0 keeps the first stage's order; outside 0..1 is refused, naming the field
    kept = c.post("/search", json={"text": "asthma inhaler", "k": 5, "reranker": spec, "rerank_share": 0}).json()
    assert [r["pid"] for r in kept["results"]] == [r["pid"] for r in plain]
    bad = c.post("/search", json={"text": "asthma inhaler", "reranker": spec, "rerank_share": 1.5})
    assert bad.status_code == 422 and "rerank_share" in bad.text


# -------------------------------------------------------------------------------------------- auth
def test_writes_need_a_valid_token(client):
    doc = {"doc_id": "auth_1", "title": "T", "text": "SYMPTOMS: a test document about auth."}
    r = client.post("/documents", json=doc)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert client.post("/documents", json=doc, headers={"Authorization": "Basic dXNlcjpwdw=="}).status_code == 401
    assert client.post("/documents", json=doc, headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 403
    assert client.delete("/documents/article_04_asthma").status_code == 401
    assert client.delete("/documents/article_04_asthma", headers={"Authorization": "Bearer nope"}).status_code == 403
    assert client.get("/documents/article_04_asthma").status_code == 200  # still there
    assert client.post("/documents", json=doc, headers=AUTH).status_code == 201
    assert client.post("/search", json={"text": "auth"}).status_code == 200  # reads open by default


def test_auth_reads(index_dir):
    c = make_client(index_dir, auth_reads=True)
    for method, path, body in [("POST", "/search", {"text": "asthma"}), ("POST", "/cases", {"description": "wheeze", "hypotheses": ["asthma"]}),
                               ("GET", "/documents/article_04_asthma", None), ("GET", "/stats", None), ("GET", "/vocabulary", None)]:
        assert c.request(method, path, json=body).status_code == 401, path
        assert c.request(method, path, json=body, headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 403, path
        assert c.request(method, path, json=body, headers=AUTH).status_code == 200, path
    health = c.get("/health")  # probes need no token and get no content
    assert health.status_code == 200 and health.json()["auth_reads"] is True


def test_no_tokens_means_writes_disabled(index_dir):
    c = make_client(index_dir, tokens=())
    r = c.post("/documents", json={"doc_id": "x1", "text": "hello world"}, headers=AUTH)
    assert r.status_code == 403 and "writes are disabled" in r.json()["detail"]
    with pytest.raises(CaprError, match="no tokens"):
        ServiceConfig(auth_reads=True)


def test_tokens_from_env_and_file(tmp_path):
    f = tmp_path / "tokens"
    f.write_text("# ops team\nfile-token-0123456789abcdef\n\n")
    f.chmod(0o600)
    tokens = load_tokens(f, environ={"CAPR_API_TOKENS": "env-token-0123456789abcdef, env-token-2-0123456789"})
    assert tokens == ("env-token-0123456789abcdef", "env-token-2-0123456789", "file-token-0123456789abcdef")
    with pytest.raises(CaprError, match="shorter than 16") as e:
        load_tokens(None, environ={"CAPR_API_TOKENS": "short"})
    assert "short" not in str(e.value).replace("shorter", "")  # the bad token itself is not echoed
    ts = TokenSet(tokens)
    assert ts.matches("file-token-0123456789abcdef") and not ts.matches("file-token-0123456789abcdeF")
    assert TOKEN not in repr(ServiceConfig(tokens=(TOKEN,))) and "0123" not in repr(ts)


# --------------------------------------------------------------------------------------- documents
def test_add_search_replace_delete_search(client, index_dir):
    doc = {"doc_id": "note_zeb_1", "title": "Zebra fever clinic note",
           "text": "HISTORY OF PRESENT ILLNESS: Fever with striped erythema after a safari.\n\n"
                   "TREATMENT: Quoxilamide 20 mg daily for zebra fever.",
           "metadata": {"specialty": "Tropical medicine", "year": 2026}}
    gen0 = client.get("/health").json()["generation"]
    r = client.post("/documents", json=doc, headers=AUTH)
    assert r.status_code == 201, r.text
    added = r.json()
    assert added["passages"] == 2 and added["replaced"] is False and added["generation"] != gen0
    # committed to disk before the response: a fresh reader of the directory sees it
    fresh = Index.load(index_dir)
    assert fresh.has_document("note_zeb_1")
    fresh.close()

    hits = client.post("/search", json={"text": "quoxilamide zebra fever", "k": 3}).json()
    assert hits["generation"] == added["generation"]
    assert hits["results"][0]["doc_id"] == "note_zeb_1" and hits["results"][0]["aspect"] == "treatment"
    by_filter = client.post("/search", json={"text": "fever", "filters": {"specialty": "Tropical medicine", "year": 2026}}).json()
    assert {r["doc_id"] for r in by_filter["results"]} == {"note_zeb_1"}
    # values compare exactly (issue 52): another spelling is a value no passage has, said with the one there is
    r = client.post("/search", json={"text": "fever", "filters": {"specialty": "tropical medicine"}})
    assert r.status_code == 400 and "close: Tropical medicine" in r.text
    got = client.get("/documents/note_zeb_1").json()
    assert got["text"] == doc["text"] and got["metadata"]["specialty"] == "Tropical medicine"
    assert "Zebra fever clinic note" in client.get("/vocabulary", params={"field": "entity", "prefix": "zeb"}).json()["values"]

    doc2 = {**doc, "text": "TREATMENT: Plorvatinib for zebra fever."}
    r = client.post("/documents", json=doc2, headers=AUTH)
    assert r.status_code == 201 and r.json()["replaced"] is True and r.json()["passages"] == 1
    assert client.post("/search", json={"text": "quoxilamide"}).json()["results"] == []
    assert client.post("/search", json={"text": "plorvatinib"}).json()["results"][0]["doc_id"] == "note_zeb_1"

    r = client.delete("/documents/note_zeb_1", headers=AUTH)
    assert r.status_code == 200 and r.json()["deleted"] is True
    assert client.post("/search", json={"text": "plorvatinib zebra"}).json()["results"] == []
    assert client.get("/documents/note_zeb_1").status_code == 404
    assert client.delete("/documents/note_zeb_1", headers=AUTH).status_code == 404
    assert client.get("/health").json()["documents"] == 36


def test_document_validation(client):
    for bad, loc in [({"doc_id": "../etc/passwd", "text": "x"}, "doc_id"), ({"doc_id": "a", "text": ""}, "text"),
                     ({"doc_id": "a", "text": "ok", "metadata": {"k": [1, 2]}}, "metadata"),
                     ({"doc_id": "a", "text": "ok", "sections": []}, "sections")]:
        r = client.post("/documents", json=bad, headers=AUTH)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][1] == loc, (bad, r.text)
    r = client.post("/documents", json={"doc_id": "a", "text": "... !!!"}, headers=AUTH)
    assert r.status_code == 422 and r.json()["message"] == "body.text: Value error, text has no words"
    assert client.get("/health").json()["generation"] == "gen-000001"  # nothing was committed


def test_request_size_limit(index_dir):
    c = make_client(index_dir, max_body_bytes=2_000)
    big = {"doc_id": "big", "text": "word " * 1_000}
    r = c.post("/documents", json=big, headers=AUTH)
    assert r.status_code == 413 and r.json()["field"] == "body"

    def chunks():  # no Content-Length: the limit is enforced while reading
        for _ in range(10):
            yield b" " * 500

    r = c.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert c.get("/health").json()["documents"] == 36


def test_deleting_everything_leaves_a_working_empty_index(tmp_path):
    from capr.index import build_index
    from capr.records import Document

    build_index([Document("only", "Only", "SYMPTOMS: cough and fever.")], tmp_path / "one").close()
    c = make_client(tmp_path / "one")
    assert c.delete("/documents/only", headers=AUTH).status_code == 200
    assert c.post("/search", json={"text": "cough"}).json()["results"] == []
    assert c.post("/cases", json={"description": "cough", "hypotheses": ["flu"]}).json()["hypotheses"][0]["score"] == 0
    assert c.post("/documents", json={"doc_id": "again", "text": "SYMPTOMS: cough."}, headers=AUTH).status_code == 201
    assert c.post("/search", json={"text": "cough"}).json()["results"][0]["doc_id"] == "again"


# ------------------------------------------------------------------------------------------- cases
def test_cases_ranks_supported_hypotheses(read_client, demo_index):
    body = {"description": "23-year-old with wheeze, chest tightness and cough after a cold; albuterol inhaler gives brief relief",
            "hypotheses": ["gout", "Asthma", "xyzzy disease"]}
    data = read_client.post("/cases", json=body).json()
    # what `capr cases` answers on this (lexical) index: the BM25 scorer, unmentioned options on related passages
    assert data["method"] == "similar-case-bm25"
    ranked = [h["hypothesis"] for h in data["hypotheses"]]
    assert ranked[0] == "Asthma"
    asthma = data["hypotheses"][0]
    assert asthma["rank"] == 1 and len(asthma["passages"]) == 3 and asthma["notice"] is None
    assert all("asthma" in p["text"].lower() for p in asthma["passages"])
    assert asthma["score"] == pytest.approx(asthma["passages"][0]["score"], abs=1e-3)  # its best supporting case
    assert [p["score"] for p in asthma["passages"]] == sorted((p["score"] for p in asthma["passages"]), reverse=True)
    xyzzy = next(h for h in data["hypotheses"] if h["hypothesis"] == "xyzzy disease")
    assert "no passage mentions it" in xyzzy["notice"] and xyzzy["candidates"] == 0
    assert not any("xyzzy" in p["text"].lower() for p in xyzzy["passages"])
    cli = json.loads(capr_cli("cases", "--index", str(demo_index), "-d", body["description"],
                              "--options", *body["hypotheses"], "--json").stdout)
    assert [h["hypothesis"] for h in cli["hypotheses"]] == ranked
    assert read_client.post("/cases", json={**body, "hypotheses": []}).status_code == 422
    assert read_client.post("/cases", json={**body, "hypotheses": ["h"] * 21}).status_code == 422


def test_cases_refuses_a_description_without_a_searchable_word(read_client):
    # as capr cases on this lexical index: nothing to score it by, so not a ranking of the options as given
    r = read_client.post("/cases", json={"description": "Is it this or that?", "hypotheses": ["asthma", "gout"]})
    assert r.status_code == 400 and r.json()["field"] == "description" and "no searchable words" in r.json()["detail"]


def test_case_baseline_phrase_match():
    from capr.cases.baseline import mention_pattern, score_support

    p = mention_pattern("heart  failure")
    assert p.search("acute Heart\nFailure admission") and not p.search("heart failures") and not p.search("heartfailure")
    assert not mention_pattern("asthma").search("asthmatic bronchitis")
    assert score_support([6.0]) == 2.0 and score_support([3.0, 3.0, 3.0, 9.0]) == 5.0


# ---------------------------------------------------------------------------------------- evidence
def test_sentence_scores_function(demo_index):
    from capr.records import Query
    from capr.search.evidence import sentence_scores

    index = Index.load(demo_index)
    q = Query("q", text="blood thinner to prevent stroke")
    hit = search(index, q, k=1, filters={"aspect": "treatment"})[0]
    scores = sentence_scores(index, q, hit.passage)
    assert [s.text for s in scores] == hit.passage.sentence_texts()
    by_text = {s.text.split()[0]: s for s in scores}
    assert by_text["Most"].evidence and "blood thinner" in by_text["Most"].text  # "… treated with a blood thinner …"
    assert by_text["Left"].score == 0 and not by_text["Left"].evidence  # no query term
    assert by_text["##"].score == 0  # the heading line
    # a rarer query word weighs more than a common one: idf comes from the whole collection
    from capr.records import Passage

    text = "Stroke risk drives the choice of a blood thinner."
    p = Passage("x#0", "x", text, "treatment", 100, 100 + len(text), sentences=[(100, 100 + len(text))])
    rare = sentence_scores(index, Query("a", text="thinner"), p)[0]
    common = sentence_scores(index, Query("b", text="stroke"), p)[0]
    assert rare.score > common.score > 0 and (rare.start, rare.end) == (100, 100 + len(text))
    with pytest.raises(ValueError, match="unknown evidence method"):
        sentence_scores(index, q, hit.passage, method="magic")
    index.close()


def test_dense_index_search_uses_dense_evidence_and_keeps_the_encoder(tmp_path):
    from capr.index import build_index
    from capr.models import EncoderConfig
    from capr.records import Document

    docs = [Document("af", "Atrial fibrillation", "TREATMENT: Anticoagulants lower the risk of stroke. Beta-blockers slow the heart."),
            Document("gout", "Gout", "TREATMENT: Colchicine and NSAIDs treat a flare. Allopurinol lowers uric acid."),
            Document("asthma", "Asthma", "TREATMENT: Inhaled corticosteroids control airway inflammation.")]
    build_index(docs, tmp_path / "dense", dense=EncoderConfig()).close()
    c = make_client(tmp_path / "dense")
    assert c.get("/stats").json()["retrievers"] == ["bm25", "tfidf", "dense", "hybrid"]
    r = c.post("/search", json={"text": "medicine that prevents blood clots", "retriever": "dense", "k": 2}).json()
    assert r["evidence_method"] == "dense" and r["results"][0]["doc_id"] == "af"
    sents = r["results"][0]["sentences"]
    assert all(-1.0 <= s["score"] <= 1.0 for s in sents)
    assert [s["evidence"] for s in sents] == [True, False]  # anticoagulants, not beta-blockers
    holder = c.app.state.holder
    encoder = holder.index._encoder
    assert c.post("/documents", json={"doc_id": "pe", "title": "Pulmonary embolism",
                                      "text": "TREATMENT: Heparin then apixaban for three months."}, headers=AUTH).status_code == 201
    r = c.post("/search", json={"text": "blood clot in the lung", "retriever": "hybrid", "k": 1}).json()
    assert r["results"][0]["doc_id"] == "pe"
    assert holder.index._encoder is encoder  # the new snapshot reuses the loaded model


# ---------------------------------------------------------------------------------- misc endpoints
def test_vocabulary_stats_health_openapi(read_client):
    v = read_client.get("/vocabulary", params={"field": "entity", "prefix": "iga"}).json()
    assert v["values"][0] == "IgA nephropathy" and "Nephrology consult – IgA nephropathy" in v["values"]  # prefix, then substring
    a = read_client.get("/vocabulary", params={"field": "aspect", "prefix": "FAM"}).json()
    assert a["values"] == ["family history"]
    assert len(read_client.get("/vocabulary", params={"field": "aspect", "limit": 3}).json()["values"]) == 3
    s = read_client.get("/stats").json()
    assert s["documents"] == 36 and s["retrievers"] == ["bm25", "tfidf"] and "aspect" in s["fields"]
    spec = read_client.get("/openapi.json").json()
    assert {"/search", "/documents", "/documents/{doc_id}", "/cases", "/health", "/stats", "/vocabulary"} <= set(spec["paths"])
    assert spec["paths"]["/documents"]["post"].get("security") and not spec["paths"]["/search"]["post"].get("security")
    page = read_client.get("/")
    assert page.status_code == 200 and "search-form" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert read_client.get("/static/app.js").status_code == 200


# -------------------------------------------------------------------------------- logs and privacy
def test_logs_hold_no_patient_text_and_no_token(client, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    client.post("/search", json={"text": SECRET})
    client.post("/search", json={"text": SECRET, "k": 0})  # 422
    client.post("/search", json={"text": SECRET, "aspect": SECRET})  # 400
    client.post("/cases", json={"description": SECRET, "hypotheses": ["rash"]})
    assert client.post("/documents", json={"doc_id": "secret_1", "title": SECRET, "text": SECRET}, headers=AUTH).status_code == 201
    client.get("/documents/secret_1")
    client.get("/vocabulary", params={"prefix": SECRET[:20]})


    def explode(*a, **k):
        raise RuntimeError(f"failed on {SECRET}")

    import capr.search.evidence as evidence_module

    monkeypatch.setattr(evidence_module, "lexical_sentence_scores", explode)
    r = client.post("/search", json={"text": "purple rash"})
    assert r.status_code == 500
    assert SECRET not in r.text and "Traceback" not in r.text and "error id" in r.json()["detail"]

    # everything the server side logged (the test's own HTTP client logs its URLs: not the server's)
    records = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in records)
    assert "POST /search 200" in logged and "POST /search 500" in logged and "GET /documents/{doc_id:path} 200" in logged
    assert "RuntimeError" in logged  # the failure is logged, with frames but without the message
    for secret in (SECRET, "Zorblatt", "purple rash", "secret_1", TOKEN):
        assert secret not in logged


# ---------------------------------------------------------------------------------- concurrency
def test_searches_see_consistent_snapshots_while_writing(index_dir):
    """Readers hammer /search while a writer adds and deletes a document: no errors, and every
    response agrees with the generation it reports (the document is there exactly when it should be)."""
    app = create_app(index_dir, ServiceConfig(tokens=(TOKEN,)))
    doc = {"doc_id": "flip_1", "title": "Flip", "text": "PLAN: glorptazine for the flip syndrome."}
    present: dict[str, bool] = {app.state.holder.generation: False}
    seen: list[tuple[str, bool]] = []
    errors: list[str] = []
    stop = threading.Event()

    with LiveServer(app) as server:
        def reader():
            with httpx.Client(base_url=server.url, timeout=30) as c:
                while not stop.is_set():
                    r = c.post("/search", json={"text": "glorptazine flip syndrome", "k": 3})
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text[:200]}")
                        continue
                    d = r.json()
                    seen.append((d["generation"], any(x["doc_id"] == "flip_1" for x in d["results"])))

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for t in threads:
            t.start()
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as w:
            for _ in range(4):
                r = w.post("/documents", json=doc)
                assert r.status_code == 201, r.text
                present[r.json()["generation"]] = True
                time.sleep(0.05)
                r = w.delete("/documents/flip_1")
                assert r.status_code == 200, r.text
                present[r.json()["generation"]] = False
                time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors
    assert len(seen) > 20
    assert all(present[gen] == found for gen, found in seen), "a search saw a half-applied write"
    assert {found for _, found in seen} == {True, False}  # readers really ran across the writes


def test_failed_write_keeps_serving_the_committed_index(client, index_dir, monkeypatch):
    assert client.post("/documents", json={"doc_id": "kept_1", "text": "PLAN: vexorin therapy."}, headers=AUTH).status_code == 201
    import capr.index.directory as directory

    def crash(*a, **k):
        raise OSError("disk full")  # the writer dies between writing its generation and publishing it

    with monkeypatch.context() as m:
        m.setattr(directory, "commit_generation", crash)
        r = client.post("/documents", json={"doc_id": "lost_1", "text": "PLAN: quenzapril therapy."}, headers=AUTH)
        assert r.status_code == 500 and "disk full" not in r.text
    assert client.post("/search", json={"text": "vexorin"}).json()["results"][0]["doc_id"] == "kept_1"
    assert client.post("/search", json={"text": "quenzapril"}).json()["results"] == []
    assert client.post("/documents", json={"doc_id": "after_1", "text": "PLAN: zintrofen."}, headers=AUTH).status_code == 201
    idx = Index.load(index_dir)
    assert idx.has_document("kept_1") and idx.has_document("after_1") and not idx.has_document("lost_1")
    idx.close()


def test_picks_up_generations_committed_by_another_process(client, index_dir):
    """`capr add` (or another worker) commits while the service runs: the next request serves it."""
    from capr.index import IndexWriter
    from capr.records import Document

    assert client.post("/search", json={"text": "trombulex"}).json()["results"] == []
    with IndexWriter(index_dir, mode="update") as w:
        w.add(Document("cli_1", "From the CLI", "PLAN: trombulex for the cli syndrome."))
    hits = client.post("/search", json={"text": "trombulex"}).json()
    assert hits["results"][0]["doc_id"] == "cli_1" and hits["generation"] == "gen-000002"
    # and the service's own next write builds on it rather than on its older snapshot
    assert client.post("/documents", json={"doc_id": "svc_1", "text": "PLAN: more trombulex."}, headers=AUTH).status_code == 201
    assert {r["doc_id"] for r in client.post("/search", json={"text": "trombulex"}).json()["results"]} == {"cli_1", "svc_1"}


def test_worker_factory_reads_settings_and_tokens_from_the_environment(index_dir, monkeypatch, tmp_path):
    from capr.service.app import app_from_env
    from capr.service.config import CONFIG_ENV, config_to_env

    token_file = tmp_path / "tokens"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    env = config_to_env(index_dir, ServiceConfig(tokens=(TOKEN,), auth_reads=True, max_body_bytes=5_000), token_file)
    assert TOKEN not in env  # tokens never travel in the settings variable
    monkeypatch.setenv(CONFIG_ENV, env)
    monkeypatch.delenv("CAPR_API_TOKENS", raising=False)
    c = TestClient(app_from_env())
    assert c.post("/search", json={"text": "asthma"}).status_code == 401
    assert c.post("/search", json={"text": "asthma"}, headers=AUTH).status_code == 200
    assert c.app.state.config.max_body_bytes == 5_000


def test_serve_cli_killed_after_a_write_loses_nothing(index_dir):
    """`capr serve` in a real process: add a document, SIGKILL the server, start it again: the document is there."""
    env = {**os.environ, "CAPR_API_TOKENS": TOKEN}

    def start(port: int) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "capr", "serve", "--index", str(index_dir), "--port", str(port)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return proc
            except httpx.HTTPError:
                time.sleep(0.1)
            if proc.poll() is not None:
                break
        proc.kill()
        raise AssertionError(f"capr serve did not start:\n{proc.communicate()[0]}")

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import threading

    proc = start(port)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        url = f"http://127.0.0.1:{port}"
        r = httpx.post(f"{url}/documents", json={"doc_id": "durable_1", "text": f"PLAN: {SECRET}."}, headers=AUTH)
        assert r.status_code == 201
        # the access line is written after the response is sent: kill only once it is out (else the test races it)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("POST /documents 201" in line for line in lines):
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        reader.join(timeout=10)
    out = "".join(lines)
    assert "POST /documents 201" in out and SECRET not in out and TOKEN not in out
    proc = start(port)
    try:
        hits = httpx.post(f"http://127.0.0.1:{port}/search", json={"text": "Zorblatt Quintessa"}).json()["results"]
        assert hits and hits[0]["doc_id"] == "durable_1"
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


# ---------------------------------------------------------------------------------- schemathesis
@pytest.fixture(scope="module")
def api_schema(demo_index, tmp_path_factory):
    import schemathesis

    app = create_app(copy_index(demo_index, tmp_path_factory.mktemp("st") / "idx"), ServiceConfig(tokens=(TOKEN,)))
    # /health is a documented 503 while the models load: fuzz the service once it says it is ready
    client, deadline = TestClient(app), time.monotonic() + 300
    while client.get("/health").json()["status"] == "starting":
        assert time.monotonic() < deadline, "the service did not get ready in 300 s"
        time.sleep(0.05)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def test_openapi_fuzz_no_server_errors(api_schema):
    """Generated requests for every operation (with a valid token): never a 5xx, and every response
    has a documented status, content type and body shape. (Driven through hypothesis directly:
    schemathesis' pytest plugin does not run under this pytest version.)"""
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance, response_schema_conformance, status_code_conformance,
    )

    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    operations = [r.ok() for r in api_schema.get_all_operations()]
    assert len(operations) == 9
    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=15, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
        def fuzz(case):
            case.call_and_validate(headers=AUTH, checks=checks)

        fuzz()


# ------------------------------------------------------------------------ hosts and exposure (issue 37)
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_only_loopback_host_names_are_answered_unless_allowed(demo_index):
    """DNS rebinding: a page of attacker.example re-pointed at 127.0.0.1 sends `Host: attacker.example`."""
    note = "/documents/article_04_asthma"
    with LiveServer(create_app(demo_index, ServiceConfig())) as s:
        for host in ("attacker.example", "attacker.example:%d" % s.port, "localhost.attacker.example", "127.0.0.1.nip.io"):
            r = httpx.get(s.url + note, headers={"Host": host})
            assert r.status_code == 421, (host, r.status_code)
            body = r.json()
            assert body["field"] == "host" and "--allowed-hosts" in body["detail"] and "wheez" not in r.text.lower()
            assert r.headers["cache-control"] == "no-store"  # the guard's headers are on the refusal too
        assert httpx.get(s.url + "/health", headers={"Host": "attacker.example"}).status_code == 421
        for host in ("localhost", f"localhost:{s.port}", "LOCALHOST.", f"127.0.0.1:{s.port}", "127.3.4.5", "[::1]",
                     f"[::1]:{s.port}"):
            r = httpx.get(s.url + note, headers={"Host": host})
            assert r.status_code == 200 and r.json()["doc_id"] == "article_04_asthma", host
    with LiveServer(create_app(demo_index, ServiceConfig(allowed_hosts=("capr.example.org",)))) as s:
        assert httpx.get(s.url + note, headers={"Host": f"capr.example.org:{s.port}"}).status_code == 200
        assert httpx.get(s.url + note, headers={"Host": "localhost"}).status_code == 200
        assert httpx.get(s.url + note, headers={"Host": "attacker.example"}).status_code == 421
    with LiveServer(create_app(demo_index, ServiceConfig(allowed_hosts=("*",)))) as s:
        assert httpx.get(s.url + note, headers={"Host": "anything.example"}).status_code == 200


def _raw_get(port: int, head: bytes) -> tuple[int, bytes]:
    """One request written byte for byte (an HTTP client would fix up or refuse what these tests send)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + b"\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    return int(status_line.split()[1]), rest


def test_a_request_without_a_well_formed_host_name_is_refused(demo_index):
    """HTTP/1.0 allows a request without a Host header, and a Host header can carry more than a name and a port:
    neither names a host this server answers to (issue 52)."""
    note = b"GET /documents/article_04_asthma "
    with LiveServer(create_app(demo_index, ServiceConfig())) as s:
        for head in (note + b"HTTP/1.0\r\n",
                     note + b"HTTP/1.0\r\nHost: localhost:80@evil\r\n",
                     note + b"HTTP/1.1\r\nHost: localhost:80@evil\r\nConnection: close\r\n",
                     note + b"HTTP/1.1\r\nHost: [::1]evil\r\nConnection: close\r\n",
                     note + b"HTTP/1.1\r\nHost: [::1]:80@evil\r\nConnection: close\r\n",
                     note + b"HTTP/1.1\r\nHost: localhost:8x\r\nConnection: close\r\n",
                     note + b"HTTP/1.1\r\nHost: localhost/evil\r\nConnection: close\r\n",
                     b"GET /health HTTP/1.0\r\n"):
            status, rest = _raw_get(s.port, head)
            assert status == 421, (head, status)
            body = json.loads(rest.partition(b"\r\n\r\n")[2])
            assert body["field"] == "host" and "Host" in body["detail"] and b"wheez" not in rest.lower(), body
        for head in (note + b"HTTP/1.0\r\nHost: localhost\r\n",
                     note + b"HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n" % s.port,
                     note + b"HTTP/1.1\r\nHost: localhost:\r\nConnection: close\r\n",  # an empty port is allowed
                     note + b"HTTP/1.1\r\nHost: [::1]:%d\r\nConnection: close\r\n" % s.port):
            assert _raw_get(s.port, head)[0] == 200, head
    with LiveServer(create_app(demo_index, ServiceConfig(allowed_hosts=("*",)))) as s:
        # any name, but a name: "*" does not answer a request that names none
        assert _raw_get(s.port, note + b"HTTP/1.0\r\nHost: anything.example\r\n")[0] == 200
        assert _raw_get(s.port, note + b"HTTP/1.0\r\n")[0] == 421
    with pytest.raises(CaprError, match="capr.example.org:80@evil.*not a host name"):
        ServiceConfig(allowed_hosts=("capr.example.org:80@evil",))


def test_serve_refuses_a_non_loopback_host_without_allowed_host_names(demo_index):
    """It would start and answer every request from another machine 421: refused at start, in one line (issue 52)."""
    env = {**os.environ, "CAPR_API_TOKENS": TOKEN}
    base = [sys.executable, "-m", "capr", "serve", "--index", str(demo_index), "--host", "0.0.0.0"]
    for reads in ("--auth-reads", "--public-reads"):
        try:
            proc = subprocess.run([*base, reads, "--port", str(_free_port())], env=env, capture_output=True, text=True,
                                  timeout=60, check=False)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"capr serve --host 0.0.0.0 {reads} started without --allowed-hosts") from None
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and "--allowed-hosts" in lines[0] and "0.0.0.0" in lines[0], proc.stderr


def test_serve_refuses_open_reads_on_a_non_loopback_host(demo_index):
    env = {**os.environ, "CAPR_API_TOKENS": TOKEN}
    base = [sys.executable, "-m", "capr", "serve", "--index", str(demo_index)]
    try:
        proc = subprocess.run([*base, "--host", "0.0.0.0", "--port", str(_free_port())], env=env, capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("capr serve --host 0.0.0.0 served open reads instead of refusing") from None
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "--auth-reads" in lines[0] and "--public-reads" in lines[0] and "0.0.0.0" in lines[0], proc.stderr
    with pytest.raises(CaprError, match="contradict"):
        ServiceConfig(tokens=(TOKEN,), auth_reads=True, public_reads=True)
    # said in so many words: it serves, and still only to the host names it is told
    port = _free_port()
    server = subprocess.Popen([*base, "--host", "0.0.0.0", "--port", str(port), "--public-reads", "--allowed-hosts",
                               "capr.example.org"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/documents/article_04_asthma"
        assert httpx.get(url, headers={"Host": "capr.example.org"}).status_code == 200
        assert httpx.get(url, headers={"Host": "10.1.2.3"}).status_code == 421
    finally:
        server.terminate()
        server.communicate(timeout=10)


# ------------------------------------------------------------------------------ token back-off (issue 37)
class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_block_holds_whatever_the_token_and_retry_after_tells_the_real_wait(index_dir):
    app = create_app(index_dir, ServiceConfig(tokens=(TOKEN,)))
    clock = app.state.auth_throttle.clock = _Clock()
    c = TestClient(app)
    bad = {"Authorization": "Bearer wrong-token-0123456789"}
    for _ in range(4):
        assert c.delete("/documents/x", headers=bad).status_code == 403
    r = c.delete("/documents/x", headers=bad)
    assert r.status_code == 403 and r.headers["retry-after"] == "1"  # this failure starts the block: it says so
    # a client hammering through its block waits longer with each try, and is told the whole wait
    waits = []
    for _ in range(10):
        r = c.delete("/documents/x", headers=bad)
        assert r.status_code == 429
        waits.append(int(r.headers["retry-after"]))
    assert waits == [2, 4, 8, 16, 32, 64, 128, 256, 300, 300], waits
    clock.t += 100.4
    r = c.delete("/documents/x", headers={"Authorization": "Basic d3Jvbmc="})  # not even a bearer token
    assert r.status_code == 429 and r.headers["retry-after"] == "300"
    # a valid token is refused like any other while blocked: the answer says nothing of the token (a guess that
    # happens to be right must not stand out), and the wait grows
    r = c.post("/documents", json={"doc_id": "n1", "text": "PLAN: rest."}, headers=AUTH)
    assert r.status_code == 429 and r.headers["retry-after"] == "300"
    clock.t += 300.5  # the block is over: a valid token is served and clears the record
    assert c.post("/documents", json={"doc_id": "n1", "text": "PLAN: rest."}, headers=AUTH).status_code == 201
    assert c.delete("/documents/x", headers=bad).status_code == 403  # no longer blocked: a fresh count
    assert c.delete("/documents/n1", headers=AUTH).status_code == 200


# ---------------------------------------------------------------------------------- readiness (issue 35)
@pytest.fixture(scope="module")
def second_stage_index(tmp_path_factory, demo_dir) -> Path:
    from service_support import build_dense_demo_index

    return build_dense_demo_index(demo_dir, tmp_path_factory.mktemp("svc-dense") / "idx", second_stage="bi:minilm")


def test_health_says_starting_until_the_models_are_loaded(second_stage_index, monkeypatch):
    """/health is 503 `starting` while the warm-up loads the encoder, the recorded second stage and the synonym
    table; searches wait for it; once it says ok, nothing is left to load."""
    from capr.labels import synonyms

    release = threading.Event()
    real = synonyms.entity_synonyms

    def held(*a, **kw):  # the real table, loaded when the test lets it
        release.wait(60)
        return real(*a, **kw)

    monkeypatch.setattr(synonyms, "entity_synonyms", held)
    app = create_app(second_stage_index, ServiceConfig())
    with LiveServer(app, ready=False) as s:
        r = httpx.get(s.url + "/health")
        assert r.status_code == 503 and r.json()["status"] == "starting" and r.json()["ready"] is False
        answered: list[dict] = []
        early = threading.Thread(target=lambda: answered.append(httpx.post(s.url + "/search", json={"text": "wheezing"},
                                                                           timeout=60).json()))
        early.start()
        time.sleep(0.5)
        assert early.is_alive() and not answered  # waits for the warm-up rather than loading the models itself
        release.set()
        deadline = time.monotonic() + 60
        while (r := httpx.get(s.url + "/health")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.json()["status"] == "ok" and r.json()["ready"] is True
        early.join(60)
        assert answered[0]["retriever"] == "hybrid" and answered[0]["reranker"] == "bi:minilm"
        assert set(answered[0]["fusion"]["weights"]) == {"bm25", "dense"}
        # everything the default search needs is loaded
        assert app.state.holder.index._encoder is not None
        from capr.search.config import _LOADED as loaded_rerankers

        assert "bi:minilm" in loaded_rerankers
        assert synonyms._LOADED
        stats = httpx.get(s.url + "/stats").json()
        assert (stats["default_retriever"], stats["default_reranker"]) == ("hybrid", "bi:minilm")



def test_health_reports_a_second_stage_that_cannot_load(tmp_path, demo_dir):
    from service_support import build_dense_demo_index

    idx = build_dense_demo_index(demo_dir, tmp_path / "idx", second_stage=f"bi:{tmp_path / 'deleted-model'}", documents=1)
    with LiveServer(create_app(idx, ServiceConfig())) as s:
        r = httpx.get(s.url + "/health")
        assert r.status_code == 503 and r.json()["status"] == "failed" and "deleted-model" in r.json()["error"]
        # the search names the same reason rather than hanging or answering without its second stage
        r = httpx.post(s.url + "/search", json={"text": "kidney"})
        assert r.status_code == 400 and "deleted-model" in r.json()["detail"]


def test_errors_name_the_index_not_the_servers_path_to_it(tmp_path):
    """The server's path to its index can name a ward, a patient or a user's home: a client's error names the
    index's folder only."""
    import capr
    from fastapi.testclient import TestClient

    from capr.records import Document
    from capr.service import ServiceConfig, create_app

    root = tmp_path / "ward-7-smith" / "notes-idx"
    capr.build_index([Document("n1", "Note", "HPI: cough and fever.")], root)
    client = TestClient(create_app(root, ServiceConfig(warm_up=False)))
    r = client.post("/search", json={"text": "cough", "retriever": "dense"})
    assert r.status_code == 400 and "notes-idx" in r.json()["detail"], r.text
    assert "ward-7-smith" not in r.text and str(tmp_path) not in r.text


def test_a_request_can_ask_for_bm25s_share_by_question():
    from capr.service import ServiceConfig
    from capr.service import schemas as S
    from capr.service.routers.search import search_options

    assert search_options(S.SearchRequest(text="valium"), ServiceConfig()).fusion_by_question is False  # the default
    assert search_options(S.SearchRequest(text="valium", fusion_by_question=True), ServiceConfig()).fusion_by_question
