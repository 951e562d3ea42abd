"""Issue 19: bad input and edge cases give one clear line (or a clear empty answer), never a traceback,
and never lose what is already indexed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capr import load_index
from capr.index import IndexWriter
from capr.search import search
from capr.search.present import EMPTY_INDEX_MESSAGE

from conftest import (capr_cli, capr_in_process, capr_real_or_in_process, one_line_error as _one_line_error,
                      write_jsonl as _write_jsonl)


# ------------------------------------------------------------------ 1. an index whose documents were all deleted
@pytest.fixture
def emptied_index(tmp_path, runner) -> Path:
    src = _write_jsonl(tmp_path / "one.jsonl", [{"doc_id": "only", "text": "HISTORY:\nThe patient has a cough and fever."}])
    out = tmp_path / "idx"
    capr_in_process(runner, "index", "--lexical-only", str(src), "--out", str(out))
    capr_in_process(runner, "delete", str(out), "--doc-id", "only")
    return out


def test_search_of_emptied_index_python_api(emptied_index):
    index = load_index(emptied_index)
    assert index.is_empty and index.counts["documents"] == 0
    for retriever in ("bm25", "tfidf"):
        assert search(index, "cough", retriever=retriever) == []
    assert search(index, "cough", filters={"aspect": "history"}) == []  # nothing to filter: no error either


@pytest.mark.parametrize("extra", [[], ["-r", "tfidf"]])
def test_search_of_emptied_index_cli(emptied_index, runner, extra):
    proc = capr_real_or_in_process(runner, not extra, "search", str(emptied_index), "cough", *extra, check=False)
    assert proc.returncode == 0, proc.stderr  # "no results" exits 0, as "no matching passages" does
    assert "Traceback" not in proc.stderr
    assert EMPTY_INDEX_MESSAGE in proc.stdout


def test_search_of_emptied_index_cli_json(emptied_index):
    proc = capr_cli("search", str(emptied_index), "cough", "--json", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["results"] == [] and payload["message"] == EMPTY_INDEX_MESSAGE
    assert EMPTY_INDEX_MESSAGE in proc.stderr


def test_emptied_index_can_be_filled_again(emptied_index, tmp_path):
    with IndexWriter(emptied_index, mode="update") as w:
        from capr.records import Document

        w.add(Document("again", "", "PLAN: cough syrup at night."))
    assert [h.passage.doc_id for h in search(load_index(emptied_index), "cough")] == ["again"]


# ------------------------------------------------------------------ 2. damaged gzip streams, cut CSV files
def _records(n: int) -> list[dict]:
    return [{"doc_id": f"d{i}", "text": f"HISTORY:\nPatient {i} reports cough and fever. " * 30} for i in range(n)]


def _gz_variants(tmp_path: Path) -> dict[str, bytes]:
    import gzip

    raw = "".join(json.dumps(r) + "\n" for r in _records(400)).encode()
    gz = gzip.compress(raw)
    bad_crc = bytearray(gz)
    bad_crc[-8] ^= 0xFF  # the CRC-32 in the gzip trailer
    return {"badcrc": bytes(bad_crc), "truncated": gz[: len(gz) // 2]}


@pytest.fixture
def base_index(tmp_path, runner) -> Path:
    src = _write_jsonl(tmp_path / "base.jsonl", [{"doc_id": "kept", "text": "PLAN: zorbifen for the wheeze."}])
    out = tmp_path / "idx"
    capr_in_process(runner, "index", "--lexical-only", str(src), "--out", str(out))  # the setting, not what is checked
    return out


def _generation(index_dir: Path) -> str:
    return (index_dir / "CURRENT").read_text().strip()


@pytest.mark.parametrize("variant,reason", [("badcrc", "corrupt gzip data (bad CRC)"),
                                            ("truncated", "truncated gzip data")])
@pytest.mark.parametrize("skip_bad", [False, True])
def test_damaged_gzip_is_one_line_and_loses_nothing(tmp_path, base_index, runner, variant, reason, skip_bad):
    bad = tmp_path / f"{variant}.jsonl.gz"
    bad.write_bytes(_gz_variants(tmp_path)[variant])
    before = _generation(base_index)
    real = variant == "badcrc" and not skip_bad  # the real commands once, the other cases in process
    proc = capr_real_or_in_process(runner, real, "add", str(base_index), str(bad), *(["--skip-bad"] if skip_bad else []),
                                   check=False)
    _one_line_error(proc, f"{bad.name} [line ", reason)
    assert proc.stderr.count("error:") == 1 and "Aborted" not in proc.stderr
    assert _generation(base_index) == before  # the add was not committed, not even in part
    assert [h.passage.doc_id for h in search(load_index(base_index), "zorbifen")] == ["kept"]
    assert load_index(base_index).counts["documents"] == 1
    # `capr index --out` over an existing index is atomic too
    proc = capr_real_or_in_process(runner, real, "index", "--lexical-only", str(bad), "--out", str(base_index), "--replace",
                                   check=False)
    _one_line_error(proc, reason)
    assert _generation(base_index) == before


def test_damaged_gzip_python_api(tmp_path):
    from capr import read_documents
    from capr.errors import BadInputError

    bad = tmp_path / "x.jsonl.gz"
    bad.write_bytes(_gz_variants(tmp_path)["badcrc"])
    with pytest.raises(BadInputError, match=r"x\.jsonl\.gz \[line \d+\]: corrupt gzip data \(bad CRC\)"):
        list(read_documents(bad))


def _mtsamples_csv(n: int = 40) -> str:
    import csv
    import io

    s = io.StringIO()
    w = csv.writer(s)
    w.writerow(["", "description", "medical_specialty", "sample_name", "transcription", "keywords"])
    for i in range(n):
        w.writerow([i, "desc", "Cardiology", f"Sample {i}", f"HISTORY:, patient {i} with chest pain and dyspnea. " * 20, "kw"])
    return s.getvalue()


def test_truncated_mtsamples_csv_gz(tmp_path, base_index):
    import gzip

    bad = tmp_path / "mtsamples.csv.gz"
    bad.write_bytes(gzip.compress(_mtsamples_csv().encode())[:-300])
    before = _generation(base_index)
    proc = capr_cli("add", str(base_index), str(bad), check=False)
    _one_line_error(proc, "mtsamples.csv.gz [line ", "truncated gzip data")
    assert "Aborted" not in proc.stderr and _generation(base_index) == before


def test_truncated_mtsamples_csv(tmp_path, base_index):
    text = _mtsamples_csv()
    bad = tmp_path / "mtsamples.csv"
    bad.write_text(text[: len(text) // 2 + 7], encoding="utf-8")  # cut inside a row
    before = _generation(base_index)
    proc = capr_cli("add", str(base_index), str(bad), check=False)
    _one_line_error(proc, "mtsamples.csv [line ", "columns (truncated file?)")
    assert _generation(base_index) == before
    # with --skip-bad the cut row is reported and the complete rows are added
    proc = capr_cli("add", str(base_index), str(bad), "--skip-bad", check=False)
    assert proc.returncode == 0 and "1 bad record(s) skipped" in proc.stderr, proc.stderr


# ------------------------------------------------------------------ 3. queries with no searchable terms
STOPWORD_ONLY = ["the and of", "the and of what is was", "What is it?", "how does it"]


@pytest.fixture(scope="module")
def demo_idx(tmp_path_factory, demo_dir) -> Path:
    from service_support import build_demo_index

    return build_demo_index(demo_dir, tmp_path_factory.mktemp("defects") / "demo")


@pytest.mark.parametrize("text", STOPWORD_ONLY)
@pytest.mark.parametrize("retriever", ["bm25", "tfidf"])
def test_stopword_only_query_is_refused_with_reason(demo_idx, text, retriever):
    from capr.errors import QueryError

    with pytest.raises(QueryError, match="query has no searchable terms after stopword removal"):
        search(load_index(demo_idx), text, retriever=retriever)


def test_question_words_still_count_next_to_a_content_word(demo_idx):
    index = load_index(demo_idx)
    assert search(index, "what is gout", k=1)[0].passage.doc_id == search(index, "gout what", k=1)[0].passage.doc_id
    assert search(index, "what is gout", k=1)[0].score > 0


def test_stopword_only_query_rules_by_retriever():
    from capr.errors import QueryError
    from capr.text.analyzer import Analyzer, AnalyzerConfig
    from capr.search.query import check_searchable
    from capr.records import Query

    a = Analyzer()
    check_searchable(a, "the and of what is was", "dense")  # the encoder reads the whole text: allowed
    for r in ("bm25", "tfidf", "hybrid"):
        with pytest.raises(QueryError, match="no searchable terms"):
            check_searchable(a, "the and of what is was", r)
    check_searchable(a, Query("q", text="what is", aspect="symptoms"), "bm25")  # the aspect's terms are searchable
    # an analyser that keeps stopwords searches for them: its user asked for that
    check_searchable(Analyzer(AnalyzerConfig(stopwords=False)), "the and of", "bm25")


def test_stopword_only_query_cli_exit_2(demo_idx):
    proc = capr_cli("search", str(demo_idx), "the and of what is was", check=False)
    assert proc.returncode == 2
    _one_line_error(proc, "query has no searchable terms after stopword removal: 'the and of what is was'")
    assert "no matching passages" not in proc.stdout


def test_stopword_only_query_api_400(demo_idx):
    from fastapi.testclient import TestClient

    from capr.service import ServiceConfig, create_app

    client = TestClient(create_app(demo_idx, ServiceConfig()))
    r = client.post("/search", json={"text": "the and of what is was"})
    assert r.status_code == 400, r.text
    assert "no searchable terms after stopword removal" in r.json()["detail"]
    assert client.post("/search", json={"text": "what is gout"}).status_code == 200


# ------------------------------------------------------------------ 4. unknown-aspect suggestions
@pytest.fixture(scope="module")
def junk_heading_index(tmp_path_factory) -> Path:
    from capr import build_index
    from capr.records import Document

    docs = [Document(f"n{i}", f"Note {i}", f"WOUND CARE:\nKeep the dressing dry, note {i}.\n\nPLAN:\nReview in a week.")
            for i in range(12)]
    # one-off fragments that the heading detector takes for headings in real notes
    docs.append(Document("odd", "Odd note", "A 21-DAY-OLD WITH:\nfever.\n\nA-1 WOMAC SCORE:\n12.\n\nA:\nnothing.\n\nABD:\nsoft."))
    out = tmp_path_factory.mktemp("aspects") / "idx"
    build_index(docs, out).close()
    return out


def test_unknown_aspect_suggests_canonical_and_frequent_headings_only(junk_heading_index):
    from capr.errors import QueryError
    from capr.records import Query

    from capr.store.embedded import EmbeddedStore

    index = EmbeddedStore.of(load_index(junk_heading_index))  # the store front owns the aspect check
    assert {"a 21-day-old with", "a-1 womac score", "wound care"} <= set(index.aspects())  # the corpus has the junk
    with pytest.raises(QueryError) as e:
        index.check_aspect("zzqqxx")
    msg = str(e.value)
    assert "known aspects include: plan" in msg and "wound care" in msg
    for junk in ("a 21-day-old with", "a-1 womac score", "abd", ": a,"):
        assert junk not in msg, msg
    with pytest.raises(QueryError, match=r"did you mean wound care\?"):
        index.check_aspect("wund care")
    with pytest.raises(QueryError, match=r"did you mean symptoms"):  # canonical aspects come first
        index.check_aspect("symptons")
    index.check_aspect("a-1 womac score")  # a corpus aspect is still accepted, just never suggested
    counted = []
    real = index.aspect_counts
    index.aspect_counts = lambda: counted.append(1) or real()  # type: ignore[method-assign]
    try:
        index.check_aspect("symptoms")  # the synonym table knows it: the corpus' aspects are not counted
        assert counted == []
        index.check_aspect("a-1 womac score")
        assert counted == [1]
    finally:
        del index.aspect_counts
    # the search pipeline (what the CLI and the API call) gives the same message as the index's own check
    with pytest.raises(QueryError) as via_search:
        search(index, Query("q", entity="x", aspect="zzqqxx"))
    assert str(via_search.value) == msg


def test_unknown_aspect_cli_line(junk_heading_index):
    proc = capr_cli("search", str(junk_heading_index), "--entity", "x", "--aspect", "zzqqxx", check=False)
    _one_line_error(proc, "unknown aspect 'zzqqxx'; known aspects include:")
    assert "21-day-old" not in proc.stderr and proc.returncode == 2


# ------------------------------------------------------------------ 5. one rule for document ids
def test_jsonl_non_string_doc_id_is_a_bad_record(tmp_path):
    from capr import read_documents
    from capr.corpus import ReadReport
    from capr.errors import BadInputError

    src = _write_jsonl(tmp_path / "x.jsonl", [{"doc_id": "ok", "text": "cough"}, {"doc_id": ["x"], "text": "fever"},
                                              {"id": 7, "text": "rash"}, {"doc_id": {"a": 1}, "text": "x"}])
    with pytest.raises(BadInputError, match=r"x\.jsonl \[line 2\]: field 'doc_id': document id must be a string "
                                            r"\(or an integer\), got list"):
        list(read_documents(src))
    report = ReadReport(skip_bad=True)
    assert [d.doc_id for d in read_documents(src, report=report)] == ["ok", "7"]  # never "['x']"
    assert [e.record for e in report.skipped] == ["line 2", "line 4"]


def test_jsonl_non_string_doc_id_cli(tmp_path, base_index):
    src = _write_jsonl(tmp_path / "x.jsonl", [{"doc_id": ["x"], "text": "fever"}])
    before = _generation(base_index)
    proc = capr_cli("add", str(base_index), str(src), check=False)
    _one_line_error(proc, "x.jsonl [line 1]: field 'doc_id': document id must be a string")
    assert _generation(base_index) == before
    proc = capr_cli("delete", str(base_index), "--doc-id", "../kept", check=False)
    assert proc.returncode == 2
    _one_line_error(proc, "document id '../kept' must not start with '/' or contain empty, '.' or '..' path segments")


IDS = ["note_1", "sub/note 2", "ünïcode-id", "mtsamples-12", " padded", "../etc/passwd", "a/./b", "/abs", "a\x00b",
       "x" * 300, ""]


@pytest.mark.parametrize("doc_id", IDS)
def test_doc_id_rule_is_the_same_for_readers_cli_and_service(tmp_path, demo_idx, doc_id):
    """An id is accepted by the JSONL reader exactly when the API accepts it, and `capr delete` refuses
    exactly the ids neither can store."""
    import shutil

    from fastapi.testclient import TestClient

    from capr import read_documents
    from capr.corpus import ReadReport
    from capr.records import check_doc_id
    from capr.service import ServiceConfig, create_app
    from service_support import AUTH, TOKEN

    try:
        check_doc_id(doc_id)
        valid = True
    except ValueError:
        valid = False
    report = ReadReport(skip_bad=True)
    src = _write_jsonl(tmp_path / "ids.jsonl", [{"doc_id": doc_id, "text": "SYMPTOMS: cough."}])
    read = [d.doc_id for d in read_documents(src, report=report)]
    # the reader treats an empty id as missing; every other invalid id is a bad record
    assert read == ([doc_id] if valid else []), report.skipped
    idx = shutil.copytree(demo_idx, tmp_path / "idx")
    client = TestClient(create_app(idx, ServiceConfig(tokens=(TOKEN,))))
    r = client.post("/documents", json={"doc_id": doc_id, "text": "SYMPTOMS: cough."}, headers=AUTH)
    assert r.status_code == (201 if valid else 422), r.text
    if valid:
        from urllib.parse import quote

        assert client.get("/documents/" + quote(doc_id, safe="")).json()["doc_id"] == doc_id
    elif doc_id:
        from capr.errors import QueryError

        with pytest.raises(QueryError, match="document id"):
            with IndexWriter(idx, mode="update") as w:
                w.delete(doc_id)


# ------------------------------------------------------------------ 6. no live progress when stderr is not a terminal
def test_no_spinner_frames_when_stderr_is_not_a_terminal(tmp_path):
    src = _write_jsonl(tmp_path / "docs.jsonl", _records(30))
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"))  # stderr is a pipe here
    spinner = set("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏━")
    assert not spinner & set(proc.stderr), proc.stderr
    assert "\r" not in proc.stderr and "\x1b[" not in proc.stderr
    assert proc.stderr.startswith("indexed 30 documents"), proc.stderr  # the summary is all there is


# ------------------------------------------------------------------ 7. back-off for repeated bad tokens
class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _throttled_client(index_dir: Path, **config):
    from fastapi.testclient import TestClient

    from capr.service import ServiceConfig, create_app
    from service_support import TOKEN

    app = create_app(index_dir, ServiceConfig(tokens=(TOKEN,), **config))
    clock = _Clock()
    app.state.auth_throttle.clock = clock
    return app, clock


def test_repeated_bad_tokens_get_429_with_exponential_backoff(demo_idx, tmp_path):
    import shutil

    from fastapi.testclient import TestClient

    from service_support import AUTH

    idx = shutil.copytree(demo_idx, tmp_path / "idx")
    app, clock = _throttled_client(idx)
    c = TestClient(app)
    bad = {"Authorization": "Bearer wrong-token-0123456789"}
    path = "/documents/article_04_asthma"
    for _ in range(4):
        assert c.delete(path, headers=bad).status_code == 403
    assert c.delete(path, headers=bad).status_code == 403  # the 5th failure starts the back-off
    r = c.delete(path, headers=bad)  # a try during the block doubles it (tests/test_service.py: the whole sequence)
    assert r.status_code == 429 and r.headers["retry-after"] == "2", r.text
    assert "too many failed authentication attempts" in r.json()["detail"] and r.json()["field"] == "authorization"
    # another client is not affected
    other = TestClient(app, client=("10.0.0.9", 4000))
    assert other.post("/documents", json={"doc_id": "o1", "text": "PLAN: rest."}, headers=AUTH).status_code == 201
    # each further failure after a block doubles the wait, capped; so does each try during one
    waits, wait = [], 2
    for _ in range(4):
        clock.t += wait  # wait out the current block, then fail twice more
        assert c.delete(path, headers=bad).status_code == 403
        r = c.delete(path, headers=bad)
        assert r.status_code == 429
        wait = int(r.headers["retry-after"])
        waits.append(wait)
    assert waits == [8, 32, 128, 300], waits
    # a valid token clears the record
    clock.t += wait
    assert c.delete(path, headers=AUTH).status_code == 200
    for _ in range(4):
        assert c.delete("/documents/nope", headers=bad).status_code == 403
    assert c.delete("/documents/nope", headers=AUTH).status_code == 404


def test_backoff_is_configurable_and_can_be_turned_off(demo_idx):
    from fastapi.testclient import TestClient

    from capr.errors import CaprError
    from capr.service import ServiceConfig

    app, _ = _throttled_client(demo_idx, auth_fail_limit=0)
    c = TestClient(app)
    bad = {"Authorization": "Bearer wrong-token-0123456789"}
    assert all(c.delete("/documents/x", headers=bad).status_code == 403 for _ in range(20))
    app, _ = _throttled_client(demo_idx, auth_fail_limit=2, auth_backoff_s=30)
    c = TestClient(app)
    answers = [c.delete("/documents/x", headers=bad) for _ in range(3)]
    assert [r.status_code for r in answers] == [403, 403, 429]
    assert [r.headers.get("retry-after") for r in answers] == [None, "30", "60"]
    with pytest.raises(CaprError, match="auth back-off"):
        ServiceConfig(auth_backoff_s=0)


# ------------------------------------------------------------------ B. bounded memory of updates
def test_update_reads_no_merged_structures_of_the_base(tmp_path, demo_dir):
    """`capr add` / `capr delete` / the service's writes open the generation they update only to look up
    document ids: no term matrix, no merged column, so their memory follows the batch, not the index."""
    from capr import build_index, read_documents
    from capr.index.index import _UNLOADED
    from capr.records import Document

    docs = list(read_documents(demo_dir))
    root = tmp_path / "idx"
    build_index(docs[:20], root).close()
    with IndexWriter(root, mode="update") as w:  # a second segment
        for d in docs[20:]:
            w.add(d)
    w = IndexWriter(root, mode="update")
    base = w.base
    w.add(Document("new_1", "New", "PLAN: flurbazine twice daily."))
    w.add(docs[3])  # replaces an indexed document
    w.delete(docs[25].doc_id)
    new = w.commit()
    assert base._matrix is _UNLOADED and base.columns._merged == {}
    assert all("matrix" not in s.__dict__ and "postings" not in s.__dict__ and "columns" not in s.__dict__
               for s in base.segments)
    # and the result is what a rebuild gives
    fresh = build_index([d for d in docs if d.doc_id not in (docs[25].doc_id,)] + [Document("new_1", "New", "PLAN: flurbazine twice daily.")],
                        tmp_path / "fresh")
    assert new.counts == fresh.counts
    assert [h.pid for h in search(new, "flurbazine")] == [h.pid for h in search(fresh, "flurbazine")]


def test_counts_without_merging_equal_merged_counts(tmp_path, demo_dir):
    from capr import build_index, read_documents

    docs = list(read_documents(demo_dir))
    root = tmp_path / "idx"
    build_index(docs[:18], root).close()
    with IndexWriter(root, mode="update") as w:
        for d in docs[18:]:
            w.add(d)
        w.delete(docs[0].doc_id)
    from capr.index.index import _UNLOADED

    lazy = load_index(root)
    c = lazy.counts  # computed per segment
    assert lazy._matrix is _UNLOADED and len(lazy.segments) == 2
    eager = load_index(root)
    assert eager.matrix is not None and eager.counts == c


# ------------------------------------------------------------------ B. per-document size limit
def test_oversized_document_is_refused_with_the_limit(tmp_path, base_index):
    from capr.records import DEFAULT_MAX_DOC_CHARS

    big = "PLAN: " + "word " * (DEFAULT_MAX_DOC_CHARS // 5 + 10)  # just over the default 10 M characters
    src = _write_jsonl(tmp_path / "big.jsonl", [{"doc_id": "small", "text": "PLAN: quorbital drops."},
                                                {"doc_id": "huge", "text": big}])
    before = _generation(base_index)
    proc = capr_cli("add", str(base_index), str(src), check=False)
    # named by file and document id, refused as it is read
    _one_line_error(proc, f"{src} [huge]: document text has", f"more than the limit of {DEFAULT_MAX_DOC_CHARS:,} (--max-doc-chars)")
    assert _generation(base_index) == before
    proc = capr_cli("add", str(base_index), str(src), "--skip-bad", check=False)
    assert proc.returncode == 0 and "1 bad record(s) skipped" in proc.stderr and "--max-doc-chars" in proc.stderr
    index = load_index(base_index)
    assert index.has_document("small") and not index.has_document("huge")


def test_max_doc_chars_option(tmp_path):
    src = _write_jsonl(tmp_path / "d.jsonl", [{"doc_id": "a", "text": "PLAN: " + "x " * 600}])
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"), "--max-doc-chars", "1000", check=False)
    _one_line_error(proc, f"{src} [a]:", "more than the limit of 1,000 (--max-doc-chars)")
    assert not (tmp_path / "idx" / "CURRENT").exists()
    capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"), "--max-doc-chars", "5000")


# ------------------------------------------------------------------ B. writes that fail part-way
def _segments_in_progress(index_dir: Path) -> list[str]:
    return [p.name for p in list(index_dir.iterdir()) + list((index_dir / "segments").iterdir()) if ".tmp-" in p.name]


def test_disk_full_mid_write_keeps_previous_generation(tmp_path, base_index):
    """A file-size limit (ulimit -f) makes the segment being written fail part-way, as a full disk would."""
    import resource
    import subprocess
    import sys

    import random

    rng = random.Random(0)  # words that do not compress: the segment's files grow past the limit
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10))) for _ in range(5000)]
    records = [{"doc_id": f"d{i}", "text": "HISTORY:\n" + " ".join(rng.choice(words) for _ in range(300)) + "."}
               for i in range(300)]
    batch = _write_jsonl(tmp_path / "batch.jsonl", records)
    before = _generation(base_index)
    limit = 256 * 1024

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "capr", "add", str(base_index), str(batch)], capture_output=True,
                          text=True, preexec_fn=small_files)
    _one_line_error(proc, f"{base_index}: cannot write the index: File too large",
                    f"nothing was changed, generation {before} stays current")
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert _generation(base_index) == before and not _segments_in_progress(base_index)
    index = load_index(base_index)
    assert index.counts["documents"] == 1 and search(index, "zorbifen")[0].passage.doc_id == "kept"
    capr_cli("add", str(base_index), str(batch))  # and the index takes the same write once there is room
    assert load_index(base_index).counts["documents"] == 301


@pytest.mark.parametrize("where", ["segment", "manifest", "commit"])
def test_io_error_mid_write_keeps_previous_generation(tmp_path, base_index, monkeypatch, where):
    import errno

    from capr.errors import WriteError
    from capr.index import blocks, directory, meta
    from capr.records import Document

    def fail(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    target = {"segment": (blocks.BlockWriter, "write"), "manifest": (meta, "write_json"),
              "commit": (directory, "commit_generation")}[where]
    monkeypatch.setattr(*target, fail)
    before = _generation(base_index)
    with pytest.raises(WriteError, match=rf"cannot write the index: Input/output error; nothing was changed, "
                                         rf"generation {before} stays current"):
        with IndexWriter(base_index, mode="update") as w:
            w.add(Document("new", "", "PLAN: quenzaline."))
    monkeypatch.undo()
    assert _generation(base_index) == before and not _segments_in_progress(base_index)
    assert search(load_index(base_index), "zorbifen")[0].passage.doc_id == "kept"
    with IndexWriter(base_index, mode="update") as w:  # the lock was released
        w.add(Document("new", "", "PLAN: quenzaline."))
    assert search(load_index(base_index), "quenzaline")[0].passage.doc_id == "new"


def test_io_error_cli_is_one_line(tmp_path, base_index, monkeypatch):
    import errno

    from typer.testing import CliRunner

    from capr.cli import app
    from capr.index import meta

    def fail(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(meta, "write_json", fail)
    src = _write_jsonl(tmp_path / "b.jsonl", _records(3))
    res = CliRunner().invoke(app, ["add", str(base_index), str(src)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "cannot write the index: No space left on device; nothing was changed" in res.output


def test_index_into_an_unwritable_place_is_one_line(tmp_path):
    src = _write_jsonl(tmp_path / "d.jsonl", _records(2))
    proc = capr_cli("index", "--lexical-only", str(src), "--out", "/proc/capr-no-such/idx", check=False)
    _one_line_error(proc, "/proc/capr-no-such/idx: cannot write the index:", "no generation was committed")


def test_a_short_numpy_write_says_why(tmp_path):
    """A file-size limit reached inside an array's write: numpy says only "N requested and M written" (no errno); the
    writer reports the system's reason, as for every other file of the index."""
    import subprocess
    import sys

    code = ("import resource, signal, numpy as np\n"
            "from pathlib import Path\n"
            "from capr.index.atomic import write_npy\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (2032, 2032))\n"
            "try:\n"
            f"    write_npy(Path({str(tmp_path / 'a.npy')!r}), np.arange(1000, dtype=np.int64), atomic=False)\n"
            "except OSError as e:\n"
            "    print(e.errno, e.strerror)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "27 File too large", proc.stdout + proc.stderr
