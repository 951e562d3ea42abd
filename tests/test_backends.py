"""One contract for every index backend: the embedded index, a Milvus 2.3.5 standalone server and a
Milvus Lite 2.5.1 server, both real and on loopback. Exact search (FLAT) must give the same passages, in
the same order, with the same scores, for the same queries; lexical and hybrid where the server has BM25."""

from __future__ import annotations

import json

import pytest

from capr.corpus import Format, read_documents
from capr.errors import CaprError, QueryError
from capr.models.encoder import EncoderConfig
from capr.records import Document, Query
from capr.store import create_store, open_store
from capr.search import search as _search


def search(store, query, k=10, **options):
    """The Searcher with entity scope `passage`: a top-list backend (Milvus) has no document tier (DESIGN, "Entity
    first"), so the embedded reference is compared on the scope both implement."""
    return _search(store, query, k=k, **{"entity_scope": "passage", **options})

from conftest import capr_cli
from milvus_support import start_or_skip

BACKENDS = ["embedded", "milvus-standalone", "milvus-lite"]
QUERIES = [
    Query("q1", entity="IgA nephropathy", aspect="symptoms"),
    Query("q2", text="how is atrial fibrillation treated"),
    Query("q3", entity="cardiomyopathy", aspect="family history"),
    Query("q4", text="insulin dose adjustment for high blood sugar"),
]


def _docs(demo_dir) -> list[Document]:
    docs = list(read_documents(demo_dir, Format.text))
    for d in docs:  # a metadata field to filter on
        d.metadata = {"kind": "note" if d.doc_id.startswith("note_") else "article"}
    return docs


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("milvus")
    started = {}
    try:
        started["milvus-standalone"] = start_or_skip("standalone", base / "standalone")
        started["milvus-lite"] = start_or_skip("lite", base / "lite")
        yield {k: s.uri for k, s in started.items()}
    finally:
        for s in started.values():
            s.stop()


@pytest.fixture(scope="module")
def stores(servers, demo_dir, tmp_path_factory):
    docs = _docs(demo_dir)
    enc = EncoderConfig()
    out = {"embedded": create_store(tmp_path_factory.mktemp("emb") / "idx", dense=enc)}
    for name, uri in servers.items():
        out[name] = create_store("contract", "milvus", uri=uri, dense=enc)
    for s in out.values():
        assert s.add(docs) == 296
    yield out
    for s in out.values():
        s.close()


def _same(a, b, tol=1e-4):
    """Same scores at every rank, and the same passages in the same order except among equal scores: a
    tie may be ordered, or cut at k, differently by another engine (and float rounding differs)."""
    assert len(a) == len(b)
    assert [x.score for x in a] == pytest.approx([y.score for y in b], abs=tol)
    for x, y in zip(a, b):
        if x.pid != y.pid:
            tied = [z.pid for z in a + b if abs(z.score - x.score) <= tol]
            assert y.pid in tied and (x.pid in tied), (x.pid, x.score, y.pid, y.score)
    cut = a[-1].score + tol
    assert {x.pid for x in a if x.score > cut} == {y.pid for y in b if y.score > cut}


def _has_bm25(store) -> bool:
    return getattr(store, "has_lexical", True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dense_exact_search_matches_embedded(stores, backend):
    ref, st = stores["embedded"], stores[backend]
    for q in QUERIES:
        for boost in (0.0, 0.5):
            # the question's focus is read with BM25 (capr.search.question_focus), which a dense-only server lacks
            hits = search(st, q, k=8, retriever="dense", aspect_boost=boost, question_focus=_has_bm25(st))
            assert [h.rank for h in hits] == list(range(1, 9))
            assert all(h.passage is not None and h.passage.pid == h.pid and h.passage.text for h in hits)
            _same(hits, search(ref, q, k=8, retriever="dense", aspect_boost=boost, question_focus=_has_bm25(st)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("retriever", ["bm25", "hybrid"])
def test_lexical_and_hybrid_match_embedded_where_the_server_has_bm25(stores, backend, retriever):
    st = stores[backend]
    if not _has_bm25(st):
        # Milvus 2.3 has no BM25 function: refused with the reason, never silently something else
        with pytest.raises(QueryError, match="no BM25"):
            search(st, QUERIES[0], k=5, retriever=retriever)
        return
    ref = stores["embedded"]
    for q in QUERIES:
        for expand, boost in ((False, 0.0), (True, 0.5)):
            _same(search(st, q, k=8, retriever=retriever, expand=expand, aspect_boost=boost),
                  search(ref, q, k=8, retriever=retriever, expand=expand, aspect_boost=boost))


@pytest.mark.parametrize("backend", BACKENDS)
def test_filters(stores, backend):
    st, ref = stores[backend], stores["embedded"]
    retriever = "bm25" if _has_bm25(st) else "dense"
    q = Query("f", text="shortness of breath and wheezing")
    for filters in ({"aspect": "treatment"}, {"kind": "note"}, {"aspect": "treatment", "kind": "article"}):
        hits = search(st, q, k=6, filters=filters, retriever=retriever, aspect_boost=0)
        assert hits, filters
        for h in hits:
            for field, value in filters.items():
                got = h.passage.aspect if field == "aspect" else h.passage.metadata[field]
                assert got == value, (field, got)
        _same(hits, search(ref, q, k=6, filters=filters, retriever=retriever, aspect_boost=0))
    with pytest.raises(QueryError, match="unknown filter field 'specialty'"):
        search(st, q, k=3, filters={"specialty": "x"}, retriever=retriever)
    with pytest.raises(QueryError, match="no passage has kind='letter'"):
        search(st, q, k=3, filters={"kind": "letter"}, retriever=retriever)
    with pytest.raises(QueryError, match="unknown aspect"):
        search(st, Query("x", entity="asthma", aspect="zzyzx qq"), k=3, retriever=retriever)


@pytest.mark.parametrize("backend", BACKENDS)
def test_filter_membership_and_passage_lookup_agree_with_embedded(stores, backend):
    """What CDV's first stage reads through the protocol: which passages pass a filter (``passing``) and whether a
    passage exists (``has_passage``), the same on every backend, by passage id."""
    import numpy as np

    st, ref = stores[backend], stores["embedded"]
    pids = [p.pid for p in ref.passages(np.arange(296))]
    for filters in ({"kind": "note"}, {"aspect": "treatment", "kind": "article"}, None):
        want = ref.passing(ref.compile_filter(filters), ref.keys_of(pids))
        got = st.passing(st.compile_filter(filters), st.keys_of(pids))
        assert got.tolist() == want.tolist(), filters
        assert 0 < want.sum() < len(pids) or filters is None
    assert st.has_passage(pids[3]) and not st.has_passage("no-such-doc#s0")


@pytest.mark.parametrize("backend", BACKENDS)
def test_add_replace_delete(servers, demo_dir, tmp_path, backend):
    """Writes through the interface: replace by doc_id, delete, unknown ids; results follow the data."""
    docs = _docs(demo_dir)[:6]
    enc = EncoderConfig()
    if backend == "embedded":
        st = create_store(tmp_path / "crud", dense=enc)
    else:
        st = create_store("crud", "milvus", uri=servers[backend], dense=enc)
    st.add(docs)
    assert st.counts()["documents"] == 6 and st.has_document(docs[0].doc_id)
    new = Document(doc_id=docs[0].doc_id, title="Zebra fever", text="SYMPTOMS:\nZebra fever causes striped rashes.")
    st.add([new])
    assert st.counts()["documents"] == 6
    hits = search(st, Query("z", text="striped rash zebra fever"), k=3, retriever="dense")
    assert hits[0].passage.doc_id == new.doc_id and "striped" in hits[0].passage.text
    assert all("striped" in p.text for p in [h.passage for h in hits if h.passage.doc_id == new.doc_id])
    st.delete([new.doc_id, docs[1].doc_id])
    assert not st.has_document(new.doc_id) and st.counts()["documents"] == 4
    assert all(h.passage.doc_id not in (new.doc_id, docs[1].doc_id)
               for h in search(st, Query("z", text="striped rash zebra fever"), k=50, retriever="dense"))
    with pytest.raises(QueryError, match="no document with id 'nope'"):
        st.delete(["nope"])
    if backend != "embedded":  # reopened by name: settings and counts come back from the server
        again = open_store("crud", "milvus", uri=servers[backend])
        assert again.counts() == st.counts() and again.has_dense
        with pytest.raises(CaprError, match="no capr collection 'missing'"):
            open_store("missing", "milvus", uri=servers[backend])
    st.close()


def test_bad_uri_and_unreachable_server():
    with pytest.raises(CaprError, match="bad Milvus URI 'localhost:19530'"):
        open_store("x", "milvus", uri="localhost:19530")
    with pytest.raises(CaprError, match="needs --uri"):
        open_store("x", "milvus")
    from capr.store.local_servers import free_port

    with pytest.raises(CaprError, match="cannot connect to Milvus at http://127.0.0.1:"):
        open_store("x", "milvus", uri=f"http://127.0.0.1:{free_port()}", timeout=3)
    with pytest.raises(CaprError, match="bad Milvus collection name"):
        create_store("no-dashes", "milvus", uri="http://127.0.0.1:1")


def test_cli_index_search_add_delete_on_milvus(servers, demo_dir, tmp_path):
    """`capr index/search/add/delete --backend milvus --uri URI` give what the embedded index gives."""
    uri = servers["milvus-lite"]
    capr_cli("index", "--lexical-only", str(demo_dir), "--out", str(tmp_path / "emb"))
    proc = capr_cli("index", "--lexical-only", str(demo_dir), "--out", "cli_demo", "--backend", "milvus", "--uri", uri)
    assert "296 passages" in proc.stderr and "36" in proc.stderr

    def pids(*where):
        res = json.loads(capr_cli("search", *where, "-e", "IgA nephropathy", "-a", "symptoms", "-k", "5", "--json",
                                  "--entity-scope", "passage").stdout)
        return [(r["pid"], r["score"]) for r in res["results"]]

    assert pids("cli_demo", "--backend", "milvus", "--uri", uri) == pids(str(tmp_path / "emb"))
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"doc_id": "n99", "title": "Zebra fever", "text": "Zebra fever causes striped rashes."}) + "\n")
    capr_cli("add", "cli_demo", str(extra), "--backend", "milvus", "--uri", uri)
    res = json.loads(capr_cli("search", "cli_demo", "striped rashes", "--json", "--backend", "milvus", "--uri", uri).stdout)
    assert res["results"][0]["doc_id"] == "n99"
    capr_cli("delete", "cli_demo", "--doc-id", "n99", "--backend", "milvus", "--uri", uri)
    res = json.loads(capr_cli("search", "cli_demo", "striped rashes", "--json", "--backend", "milvus", "--uri", uri).stdout)
    assert all(r["doc_id"] != "n99" for r in res["results"])
    bad = capr_cli("search", "cli_demo", "x", "--backend", "milvus", "--uri", "ftp://nowhere", check=False)
    assert bad.returncode == 2 and "bad Milvus URI" in bad.stderr and "Traceback" not in bad.stderr
    bad = capr_cli("search", "nope", "x", "--backend", "cassandra", check=False)
    assert bad.returncode == 2 and "unknown --backend 'cassandra'" in bad.stderr


def test_service_on_milvus(servers, stores):
    """`capr serve --backend milvus`: the same /search answers as the embedded index; writes go to Milvus."""
    from fastapi.testclient import TestClient

    from capr.service.app import create_app
    from capr.service.config import ServiceConfig
    from service_support import AUTH, TOKEN

    st = open_store("contract", "milvus", uri=servers["milvus-lite"])
    milvus = TestClient(create_app("contract", ServiceConfig(tokens=(TOKEN,)), store=st))
    embedded = TestClient(create_app(stores["embedded"].root, ServiceConfig(tokens=(TOKEN,))))
    body = {"entity": "IgA nephropathy", "aspect": "symptoms", "k": 4, "evidence": True, "entity_scope": "passage"}
    for retriever in ("bm25", "dense", "hybrid"):
        a = milvus.post("/search", json={**body, "retriever": retriever})
        b = embedded.post("/search", json={**body, "retriever": retriever})
        assert a.status_code == 200, a.text
        assert [(r["pid"], r["score"]) for r in a.json()["results"]] == [(r["pid"], r["score"]) for r in b.json()["results"]]
        assert any(s["evidence"] for s in a.json()["results"][0]["sentences"])
    stats = milvus.get("/stats").json()
    assert stats["retrievers"] == ["bm25", "dense", "hybrid"] and "kind" in stats["fields"]
    assert milvus.post("/search", json={**body, "filters": {"specialty": "x"}}).status_code == 400
    doc = {"doc_id": "svc_1", "title": "Zebra fever", "text": "SYMPTOMS:\nZebra fever causes striped rashes."}
    assert milvus.post("/documents", json=doc).status_code == 401
    r = milvus.post("/documents", json=doc, headers=AUTH)
    assert r.status_code == 201 and r.json()["passages"] == 1
    got = milvus.get("/documents/svc_1").json()
    assert got["title"] == "Zebra fever" and "striped rashes" in got["text"]
    hits = milvus.post("/search", json={"text": "striped rashes", "k": 1}).json()["results"]
    assert hits[0]["doc_id"] == "svc_1" and hits[0]["highlights"]
    assert milvus.delete("/documents/svc_1", headers=AUTH).status_code == 200
    assert milvus.get("/documents/svc_1").status_code == 404
    cases = milvus.post("/cases", json={"description": "wheeze and cough", "hypotheses": ["asthma"]})
    assert cases.status_code == 400 and "'postings' capability" in cases.json()["detail"] and "milvus" in cases.json()["detail"]


def test_backend_option_names():
    """--backend is the index backend; encoder names given to it (the spelling before issue 7) still
    reach the encoder; --encoder-backend is the new spelling; nonsense is refused naming both lists."""
    from capr.cli import split_backend

    assert split_backend("embedded", None) == ("embedded", "torch")
    assert split_backend("milvus", "onnx-int8") == ("milvus", "onnx-int8")
    assert split_backend("static", None) == ("embedded", "static")
    with pytest.raises(CaprError, match="conflicts"):
        split_backend("static", "onnx")
    with pytest.raises(CaprError, match="index backends are embedded, milvus.*--encoder-backend"):
        split_backend("faiss", None)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad, reason", [
    (Document(doc_id="../etc", title="t", text="SYMPTOMS:\nFever."), "field 'doc_id': document id"),
    (Document(doc_id="big", title="t", text="x" * 2_000), "more than the limit of 1,000 (--max-doc-chars)"),
    (Document(doc_id="first", title="again", text="SYMPTOMS:\nCough."), "duplicate document id 'first'"),
])
def test_every_backend_admits_documents_by_one_rule(servers, tmp_path, backend, bad, reason):
    """One admission rule (capr.corpus.report.admit_document) on every writer: the same bad document is the same
    error, naming the record and the reason (before, Milvus raised other errors than the embedded writer)."""
    from capr.errors import BadInputError

    first = Document(doc_id="first", title="Flu", text="SYMPTOMS:\nFever and cough.")
    if backend == "embedded":
        st = create_store(tmp_path / "admit")
    else:
        st = create_store(f"admit_{abs(hash((bad.doc_id, backend))) % 10**6}", "milvus", uri=servers[backend])
    with pytest.raises(BadInputError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        st.add([first, bad], max_doc_chars=1_000)
    st.close()
