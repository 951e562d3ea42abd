"""`capr eval --benchmark beir:PATH` on a BEIR folder written here: graded judgements, documents cut into several
passages and ranked by their best one; metrics checked against trec_eval (pytrec_eval) on the run it writes, and
the paired comparison with a second run."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import capr_cli, capr_in_process

pytrec_eval = pytest.importorskip("pytrec_eval")

DOCS = {
    "d1": ("Gout", "Gout is treated with colchicine and anti-inflammatory drugs during a flare. " * 3
           + "Long-term treatment lowers uric acid with allopurinol. " * 40),
    "d2": ("", "Allopurinol lowers uric acid in the blood and prevents gout attacks."),
    "d3": ("Asthma", "Asthma is treated with inhaled corticosteroids and bronchodilators."),
    "d4": ("", "Inhaled steroids reduce airway inflammation in asthma; an inhaler is used daily."),
    "d5": ("Diabetes", "Type 2 diabetes is managed with metformin, diet and exercise."),
    "d6": ("", "Metformin lowers blood sugar; diet and exercise also help in diabetes."),
    "d7": ("", "Colchicine can cause diarrhoea. Uric acid crystals form in joints."),
}
QUERIES = {"q1": "how is gout treated", "q2": "asthma inhaler", "q3": "metformin diabetes diet", "q9": "unjudged"}
QRELS = {"q1": {"d1": 2, "d2": 1, "d7": 0}, "q2": {"d3": 1, "d4": 2}, "q3": {"d5": 2, "d6": 2, "d2": 0}}


def write_beir(root: Path) -> Path:
    root.mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": t, "text": x}) + "\n"
                                               for d, (t, x) in DOCS.items()))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items()))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{r}\n" for q, rel in QRELS.items() for d, r in rel.items()))
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "q2\td4\t1\n")
    return root


def read_trec(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    return run


def trec_eval(run: dict, qrels: dict) -> dict[str, float]:
    """nDCG@10, P@1, MRR@10 (recip_rank over the top 10), R@100 and MAP by trec_eval, as percentages."""
    per_q = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "P.1", "recall.100", "map"}).evaluate(run)
    top10 = {q: dict(sorted(d.items(), key=lambda x: -x[1])[:10]) for q, d in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    mean = lambda key, table: round(100 * sum(v[key] for v in table.values()) / len(qrels), 2)  # noqa: E731
    return {"nDCG@10": mean("ndcg_cut_10", per_q), "P@1": mean("P_1", per_q), "MRR@10": mean("recip_rank", rr),
            "R@100": mean("recall_100", per_q), "MAP": mean("map", per_q)}


def eval_json(folder: Path, cache: Path, *args: str) -> dict:
    proc = capr_cli("eval", "--benchmark", f"beir:{folder}", "--cache-dir", str(cache), "--json", *args)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_beir_folder_metrics_match_trec_eval_and_runs_compare(tmp_path):
    folder = write_beir(tmp_path / "tiny")
    bm25_run, dense_run = tmp_path / "bm25.trec", tmp_path / "dense.trec"
    bm25 = eval_json(folder, tmp_path / "lexical", "--retriever", "bm25", "--run-out", str(bm25_run))
    assert bm25["queries"] == 3  # the query without judgements is left out, as BEIR leaves it out
    assert list(bm25["metrics"]) == ["nDCG@10", "P@1", "MRR@10", "R@100", "MAP"]
    ranked = read_trec(bm25_run)
    assert all(len(set(docs)) == len(docs) and set(docs) <= set(DOCS) for docs in ranked.values())  # documents, once each
    assert bm25["metrics"] == trec_eval(ranked, QRELS)
    from capr.index import Index

    [index_dir] = [p.parent for p in (tmp_path / "lexical").rglob("CURRENT")]  # its folder under --cache-dir
    assert len(Index.load(index_dir)) > len(DOCS)  # the long document is cut into passages, as capr index cuts it
    assert 0 < bm25["metrics"]["nDCG@10"] < 100  # a ranking the graded gains can tell apart

    dense = eval_json(folder, tmp_path / "dense", "--retriever", "dense", "--run-out", str(dense_run),
                      "--compare", str(bm25_run))
    assert dense["metrics"] == trec_eval(read_trec(dense_run), QRELS)
    c = dense["compare"]
    assert c["queries"] == 3 and c["queries_missing_in_run"] == 0
    for m, v in bm25["metrics"].items():
        assert c[m]["compared"] == v and c[m]["this"] == dense["metrics"][m] and 0 < c[m]["p"] <= 1
    same = eval_json(folder, tmp_path / "lexical", "--retriever", "bm25", "--compare", str(bm25_run))["compare"]
    assert all(same[m]["p"] == 1.0 and same[m]["better"] == same[m]["worse"] == 0 for m in bm25["metrics"])

    default = eval_json(folder, tmp_path / "dense", "--pipeline", "default", "--split", "dev")
    assert default["queries"] == 1 and default["retriever"] == "default" and default["titles"]


def test_beir_folder_bad_input_is_one_line(tmp_path):
    folder = write_beir(tmp_path / "bad")
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "ok"}\n{"text": "no id"}\n')
    proc = capr_cli("eval", "--benchmark", f"beir:{folder}", "--cache-dir", str(tmp_path / "idx"), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{folder / 'corpus.jsonl'} [line 2]" in proc.stderr + proc.stdout
    proc = capr_cli("eval", "--benchmark", f"beir:{tmp_path / 'nowhere'}", check=False)
    assert proc.returncode != 0 and "not a BEIR folder" in proc.stderr + proc.stdout
    proc = capr_cli("eval", "--benchmark", f"beir:{folder}", "--split", "train", "--cache-dir", str(tmp_path / "idx2"),
                    check=False)
    assert proc.returncode != 0 and "dev, test" in proc.stderr + proc.stdout


def test_gzipped_beir_folder_with_space_separated_qrels_reads_like_the_plain_one(tmp_path):
    """BEIR folders in the wild: corpus and queries gzip'd, qrels separated by spaces with scores written 1.0 — the
    same benchmark as the plain folder (one reader serves `capr index` and `capr eval`)."""
    import gzip

    from capr.corpus import Format, detect_format, read_documents
    from capr.corpus.beir import read_beir_corpus, read_beir_qrels, read_beir_queries
    from capr.corpus.report import ReadReport

    plain = write_beir(tmp_path / "plain")
    packed = tmp_path / "packed"
    packed.mkdir()
    for stem in ("corpus", "queries"):
        (packed / f"{stem}.jsonl.gz").write_bytes(gzip.compress((plain / f"{stem}.jsonl").read_bytes()))
    (packed / "qrels").mkdir()
    (packed / "qrels" / "test.tsv").write_text("query-id corpus-id score\n" + "".join(
        f"{q} {d} {r}.0\n" for q, rel in QRELS.items() for d, r in rel.items()))
    assert read_beir_qrels(packed) == read_beir_qrels(plain)
    assert read_beir_queries(packed) == read_beir_queries(plain) and len(read_beir_queries(plain, {"q1"})) == 1
    assert list(read_beir_corpus(packed, ReadReport())) == list(read_beir_corpus(plain, ReadReport()))
    assert detect_format(packed) is Format.beir
    assert [d.doc_id for d in read_documents(packed)] == list(DOCS)
    a = eval_json(plain, tmp_path / "c1", "-r", "bm25")
    b = eval_json(packed, tmp_path / "c2", "-r", "bm25")
    assert a["queries"] == b["queries"] == 3 and a["metrics"] == b["metrics"]
    # TREC's qrels layout (query iteration document grade), as trec_eval and TREC collections write it
    (packed / "qrels" / "test.tsv").write_text("".join(f"{q} 0 {d} {r}\n" for q, rel in QRELS.items() for d, r in rel.items()))
    assert read_beir_qrels(packed) == read_beir_qrels(plain)
    (packed / "qrels" / "test.tsv").write_text("q1 d1 0.5\n")
    with pytest.raises(Exception, match=r"test\.tsv \[line 1\].*integer"):
        read_beir_qrels(packed)
    (packed / "qrels" / "test.tsv").write_text("q1 d1 1\nq1 d2\n")
    with pytest.raises(Exception, match=r"test\.tsv \[line 2\].*3 columns .* or TREC's 4"):
        read_beir_qrels(packed)


def test_a_mediqa_file_is_a_benchmark_equal_to_the_named_one(tmp_path):
    """`--benchmark mediqa:PATH` (a MEDIQA 2019 Task 3 file, plain or gzip'd: e.g. the test set with its labels) scores
    as the named `mediqa2019` does on the same file; a file without judgements or not XML is one clear line."""
    import gzip

    from conftest import need_data

    src = need_data("mediqa2019", "Task3_QA", "MEDIQA2019-Task3-QA-ValidationSet.xml.gz")
    plain = tmp_path / "val.xml"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    runs = {}
    for name, bench in (("named", "mediqa2019"), ("plain", f"mediqa:{plain}"), ("gz", f"mediqa:{src}")):
        proc = capr_cli("eval", "--benchmark", bench, "-r", "bm25", "--json", "--cache-dir", str(tmp_path / name),
                        "--data-dir", str(src.parents[2]))
        runs[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs["named"]["queries"] == runs["plain"]["queries"] == 25
    assert runs["named"]["metrics"] == runs["plain"]["metrics"] == runs["gz"]["metrics"]
    assert runs["plain"]["protocol"] == "rerank64"  # each question re-ranks its own answers
    unjudged = tmp_path / "unjudged.xml"
    unjudged.write_text(plain.read_text().replace('ReferenceScore="', 'Score="'))
    for path, why in ((unjudged, "no answer is judged relevant"), (tmp_path / "none.xml", "no such file")):
        proc = capr_cli("eval", "--benchmark", f"mediqa:{path}", "-r", "bm25", "--cache-dir", str(tmp_path / "x"),
                        check=False)
        assert proc.returncode != 0 and why in proc.stderr and "Traceback" not in proc.stderr


def test_one_cache_dir_keeps_each_folder_and_each_version_of_a_corpus_apart(tmp_path):
    """--cache-dir is a folder of indexes: a second BEIR folder evaluated with it, or the first one after its corpus
    changed, is scored on its own documents, never on the index another corpus left there."""
    first = write_beir(tmp_path / "first")
    other = tmp_path / "other"
    other.mkdir()
    (other / "corpus.jsonl").write_text('{"_id": "x1", "text": "kidney stones cause flank pain"}\n'
                                        '{"_id": "x2", "text": "migraine headache is treated with triptans"}\n')
    (other / "queries.jsonl").write_text('{"_id": "z1", "text": "kidney stones"}\n{"_id": "z2", "text": "migraine"}\n')
    (other / "qrels").mkdir()
    (other / "qrels" / "test.tsv").write_text("z1\tx1\t1\nz2\tx2\t1\n")
    shared = tmp_path / "cache"
    assert eval_json(first, shared, "-r", "bm25")["metrics"]["R@100"] == 100.0
    assert eval_json(other, shared, "-r", "bm25")["metrics"]["nDCG@10"] == 100.0
    with (first / "corpus.jsonl").open("a") as fh:  # a new document judged for q9: the old index would miss it
        fh.write(json.dumps({"_id": "d8", "title": "", "text": "An unjudged question, judged now."}) + "\n")
    with (first / "qrels" / "test.tsv").open("a") as fh:
        fh.write("q9\td8\t1\n")
    after = eval_json(first, shared, "-r", "bm25")
    assert after["queries"] == 4 and after["metrics"]["R@100"] == 100.0
    assert after["metrics"] == eval_json(first, tmp_path / "fresh", "-r", "bm25")["metrics"]


def test_beir_files_as_real_datasets_write_them(tmp_path):
    """Tab-separated qrels whose ids hold spaces; a corpus record with another "id" beside its "_id"; a query line
    repeated verbatim; a document that is only a title (TREC-COVID papers without an abstract): all read as BEIR
    means them. A qrels file with no judgement, or none above 0, and one query id with two texts are refused."""
    from capr.corpus import read_documents
    from capr.corpus.beir import read_beir_corpus, read_beir_qrels, read_beir_queries
    from capr.corpus.report import ReadReport
    from capr.errors import CaprError

    root = tmp_path / "b"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "doc 1", "id": "PMID9", "title": "", "text": "gout"}\n'
                                       '{"_id": "d2", "title": "Hydroxychloroquine for COVID-19", "text": ""}\n')
    (root / "queries.jsonl").write_text('{"_id": "q 1", "text": "gout"}\n{"_id": "q 1", "text": "gout"}\n'
                                        '{"_id": "q2", "text": "hydroxychloroquine"}\n')
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq 1\tdoc 1\t2\nq2\td2\t1\n")
    assert [(q.qid, q.pid, q.relevance) for q in read_beir_qrels(root)] == [("q 1", "doc 1", 2), ("q2", "d2", 1)]
    assert [d.doc_id for d in read_beir_corpus(root, ReadReport())] == ["doc 1", "d2"]
    assert [(q.qid, q.text) for q in read_beir_queries(root)] == [("q 1", "gout"), ("q2", "hydroxychloroquine")]
    [_, title_only] = read_documents(root)
    assert title_only.text == title_only.title == "Hydroxychloroquine for COVID-19"
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    with pytest.raises(CaprError, match=r"test\.tsv: no judgements"):
        read_beir_qrels(root)
    (root / "qrels" / "test.tsv").write_text("q2\td2\t0\n")
    with pytest.raises(CaprError, match="no judgement marks a document relevant"):
        read_beir_qrels(root)
    (root / "queries.jsonl").write_text('{"_id": "q2", "text": "hydroxychloroquine"}\n{"_id": "q2", "text": "gout"}\n')
    with pytest.raises(CaprError, match=r"queries\.jsonl \[line 2\].*'q2' has another text on line 1"):
        read_beir_queries(root)


def test_a_title_only_beir_document_is_found_by_its_title(tmp_path):
    """`capr index` of a BEIR folder keeps a record whose text is empty but whose title is not (BEIR reads title +
    text; it used to be dropped as empty), and the index reads that title once, not as title and text both."""
    from capr.index import load_index
    from capr.index.segment import passage_index_text

    folder = write_beir(tmp_path / "b")
    with (folder / "corpus.jsonl").open("a") as fh:
        fh.write(json.dumps({"_id": "t1", "title": "Hydroxychloroquine for COVID-19", "text": ""}) + "\n")
    capr_cli("index", "--lexical-only", str(folder), "--out", str(tmp_path / "idx"))
    hits = json.loads(capr_cli("search", str(tmp_path / "idx"), "hydroxychloroquine", "--json").stdout)["results"]
    assert [h["doc_id"] for h in hits] == ["t1"]
    index = load_index(tmp_path / "idx")
    read = {passage_index_text(index.passage(row), include_title=True) for row in range(index.counts["passages"])}
    assert "Hydroxychloroquine for COVID-19" in read and "Asthma\nAsthma is treated with inhaled corticosteroids and " \
        "bronchodilators." in read


def test_eval_input_errors_name_the_place_before_any_work(tmp_path):
    """A run file that cannot be written is refused before the evaluation (not after it, with a traceback); a
    header-only qrels file and a duplicate document id are one line naming the file (and the line)."""
    folder = write_beir(tmp_path / "b")
    proc = capr_cli("eval", "--benchmark", f"beir:{folder}", "-r", "bm25", "--cache-dir", str(tmp_path / "c"),
                    "--run-out", str(tmp_path / "missing" / "run.trec"), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "--run-out" in proc.stderr
    assert not (tmp_path / "c").exists()
    with (folder / "corpus.jsonl").open("a") as fh:
        fh.write(json.dumps({"_id": "d1", "title": "", "text": "again"}) + "\n")
    proc = capr_cli("eval", "--benchmark", f"beir:{folder}", "-r", "bm25", "--cache-dir", str(tmp_path / "c"), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{folder / 'corpus.jsonl'} [line {len(DOCS) + 1}]" in proc.stderr and "duplicate document id" in proc.stderr
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    proc = capr_cli("eval", "--benchmark", f"beir:{folder}", "-r", "bm25", "--cache-dir", str(tmp_path / "c"), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "test.tsv: no judgements" in proc.stderr


def test_a_query_capr_search_refuses_counts_as_returning_nothing_and_is_named(tmp_path):
    """`capr eval --pipeline default` searches as `capr search`, which refuses a question of stopwords only. One such
    query among hundreds must not cost the evaluation: it ranks nothing (0 for it, as trec_eval scores a query without
    results), the others are scored as before, and the warning names it."""
    folder = write_beir(tmp_path / "tiny")
    args = ("eval", "--benchmark", f"beir:{folder}", "--cache-dir", str(tmp_path / "cache"), "-r", "bm25",
            "--pipeline", "default", "--json")
    before = json.loads(capr_cli(*args, "--run-out", str(tmp_path / "before.trec")).stdout)
    with open(folder / "queries.jsonl", "a") as fh:
        fh.write(json.dumps({"_id": "q8", "text": "what is it?"}) + "\n")
    with open(folder / "qrels" / "test.tsv", "a") as fh:
        fh.write("q8\td3\t1\n")
    proc = capr_cli(*args, "--run-out", str(tmp_path / "after.trec"))
    assert "Traceback" not in proc.stderr and "'q8'" in proc.stderr and "returning nothing" in proc.stderr
    after = json.loads(proc.stdout)
    assert any("'q8'" in w for w in after["warnings"])
    n = before["queries"]
    assert after["queries"] == n + 1
    for m in ("nDCG@10", "MAP", "P@1"):  # the others' scores, averaged with one more query at 0
        assert after["metrics"][m] == pytest.approx(before["metrics"][m] * n / (n + 1), abs=0.01)
    run = read_trec(tmp_path / "after.trec")
    assert "q8" not in run and run == read_trec(tmp_path / "before.trec")


def test_a_damaged_queries_qrels_or_run_file_is_one_line_naming_it(tmp_path):
    """A gzip'd queries file cut short, qrels with non-UTF-8 bytes past the first block, a --compare run cut short:
    one line naming the file and where, as for the corpus (not click's bare "Aborted." or a UnicodeDecodeError
    traceback)."""
    import gzip

    from capr.corpus.beir import read_beir_qrels, read_beir_queries
    from capr.errors import BadInputError
    from capr.eval.runs import read_qrels, read_run

    folder = write_beir(tmp_path / "b")
    filler = "".join(json.dumps({"_id": f"z{i}", "text": f"filler {i}"}) + "\n" for i in range(20000))
    packed = gzip.compress((filler + (folder / "queries.jsonl").read_text()).encode())
    (folder / "queries.jsonl").unlink()
    (folder / "queries.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(BadInputError, match=r"queries\.jsonl\.gz \[line \d+\]: truncated gzip data"):
        read_beir_queries(folder)
    qrels = folder / "qrels" / "test.tsv"
    qrels.write_bytes(qrels.read_bytes() + b"".join(b"q1\tz%d\t0\n" % i for i in range(3000)) + b"q1\td\xff\t1\n")
    with pytest.raises(BadInputError, match=r"test\.tsv \[line \d+\]: not UTF-8 text"):
        read_beir_qrels(folder, "test")
    run, trec_qrels = tmp_path / "run.trec.gz", tmp_path / "qrels.txt.gz"
    for path, line in ((run, "q{i} Q0 d{j} {j} 1.5 t\n"), (trec_qrels, "q{i} 0 d{j} 1\n")):
        packed = gzip.compress("".join(line.format(i=i, j=j) for i in range(2000) for j in range(10)).encode())
        path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(BadInputError, match=r"run\.trec\.gz \[line \d+\]: truncated gzip data"):
        read_run(run)
    with pytest.raises(BadInputError, match=r"qrels\.txt\.gz \[line \d+\]: truncated gzip data"):
        read_qrels(trec_qrels)
    proc = capr_cli("eval", "--benchmark", f"beir:{write_beir(tmp_path / 'ok')}", "-r", "bm25",
                    "--cache-dir", str(tmp_path / "c"), "--compare", str(run), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "Aborted" not in proc.stderr
    assert f"{run} [line " in proc.stderr and "truncated gzip data" in proc.stderr


def test_compare_with_a_run_of_other_queries_is_refused_before_the_evaluation(tmp_path):
    """`--compare` a run of another benchmark or split (none of the judged queries): one error, not a comparison
    against zeros with p-values; a run lacking some queries is compared with a warning naming how many; a malformed
    run file is refused before the evaluation writes --run-out."""
    folder = write_beir(tmp_path / "b")
    base = ("eval", "--benchmark", f"beir:{folder}", "-r", "bm25", "--cache-dir", str(tmp_path / "c"))
    other = tmp_path / "other.trec"
    other.write_text("x1 Q0 d1 1 2.0 t\nx2 Q0 d3 1 1.0 t\n")
    proc = capr_cli(*base, "--json", "--compare", str(other), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and not proc.stdout.strip()
    assert f"{other} (--compare): none of its 2 queries is a judged query" in proc.stderr
    part = tmp_path / "part.trec"
    part.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n")
    proc = capr_cli(*base, "--json", "--compare", str(part))
    c = json.loads(proc.stdout.strip().splitlines()[-1])["compare"]
    assert c["queries"] == 3 and c["queries_missing_in_run"] == 2
    assert "2 of 3 judged queries have no results in it" in proc.stderr
    bad, run_out = tmp_path / "bad.trec", tmp_path / "out.trec"
    bad.write_text("q1 Q0 d1 first 2.0 t\n")
    proc = capr_cli(*base, "--compare", str(bad), "--run-out", str(run_out), check=False)
    assert proc.returncode != 0 and f"{bad} [line 1]" in proc.stderr and not run_out.exists()


def test_a_pair_repeated_in_qrels_or_run_is_refused_when_it_conflicts_and_said_once_when_it_does_not(tmp_path):
    """trec_eval refuses a qrels or run file naming a (query, document) pair twice ("duplicate docs"); capr read the
    last one silently. A repeat with another grade or score is refused in one line naming file, line and pair, before
    any work; a repeat with the same value changes nothing and is said in one warning that counts them."""
    import warnings

    from capr.errors import BadInputError
    from capr.eval.runs import read_qrels, read_run

    folder = write_beir(tmp_path / "b")
    qrels = folder / "qrels" / "test.tsv"
    original = qrels.read_text()
    base = ("eval", "--benchmark", f"beir:{folder}", "-r", "bm25", "--cache-dir", str(tmp_path / "c"))
    qrels.write_text(original + "q1\td1\t0\n")  # q1 d1 is judged 2 at line 2
    proc = capr_cli(*base, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1
    assert f"{qrels} [line 10]: query 'q1', document 'd1': grade 2 at line 2 and 0 here" in proc.stderr
    assert not (tmp_path / "c").exists()  # refused before the benchmark was indexed
    qrels.write_text(original + "q2\td3\t1\nq2\td3\t1\nq3\td5\t2\n")
    proc = capr_cli(*base, "--json")
    assert proc.stderr.count("warning:") == 1 and f"{qrels}: 3 line(s) repeat an earlier judgement with the same " \
        "grade (the first at line 10: query 'q2', document 'd3', as at line 5)" in proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["metrics"] == trec_eval(read_trec_run(tmp_path, base), QRELS) and len(result["warnings"]) == 1

    qrels.write_text(original)
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\nq1 Q0 d1 3 0.5 t\n")
    proc = capr_cli(*base, "--compare", str(run), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{run} [line 3]: query 'q1', document 'd1': score 2 at line 1 and 0.5 here" in proc.stderr
    run.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\nq1 Q0 d1 3 2.0 t\nq1 Q0 d1 4 2.0 t\n")
    proc = capr_cli(*base, "--compare", str(run))
    assert proc.stderr.count(f"{run}: 2 line(s) repeat a document already ranked") == 1
    with warnings.catch_warnings(record=True) as said:  # the Python API says it too
        warnings.simplefilter("always")
        assert [h.pid for h in read_run(run).results["q1"]] == ["d1", "d2"]
    assert len(said) == 1 and "2 line(s) repeat" in str(said[0].message)
    trec_qrels = tmp_path / "qrels.txt"
    trec_qrels.write_text("q1 0 d1 1\nq1 0 d1 2\n")
    with pytest.raises(BadInputError, match=r"qrels\.txt \[line 2\]: query 'q1', document 'd1': grade 1 at line 1"):
        read_qrels(trec_qrels)


def read_trec_run(tmp_path: Path, base: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """The run of ``capr BASE`` as trec_eval reads it."""
    out = tmp_path / "written.trec"
    capr_cli(*base, "--run-out", str(out))
    return read_trec(out)


def test_limit_evaluates_the_same_fixed_subset_of_any_benchmark_each_query_as_in_the_whole_evaluation(tmp_path):
    """`--limit N --seed S` was read by the multiple-choice benchmarks only: a passage benchmark evaluated every query.
    It takes the same seeded subset there; each query keeps the candidate pool (shuffled in turn over all queries)
    and so the ranking it has in the whole evaluation; the record says the limit."""
    folder = write_beir(tmp_path / "b")
    base = ("--retriever", "bm25", "--protocol", "rerank64")
    whole, part = tmp_path / "whole.trec", tmp_path / "part.trec"
    full = eval_json(folder, tmp_path / "c", *base, "--run-out", str(whole))
    sub = eval_json(folder, tmp_path / "c", *base, "--limit", "2", "--run-out", str(part))  # seed 0: q2, q3
    assert full["queries"] == 3 and "limit" not in full
    assert sub["queries"] == 2 and (sub["limit"], sub["seed"]) == (2, 0)
    ranked, ranked_part = read_trec(whole), read_trec(part)
    assert sorted(ranked_part) == ["q2", "q3"] and all(ranked_part[q] == ranked[q] for q in ranked_part)
    assert sub["metrics"] == trec_eval(ranked_part, {q: QRELS[q] for q in ranked_part})
    other = eval_json(folder, tmp_path / "c", *base, "--limit", "2", "--seed", "4")
    assert other["queries"] == 2 and other["metrics"] == trec_eval({q: ranked[q] for q in ("q1", "q2")},
                                                                   {q: QRELS[q] for q in ("q1", "q2")})
    proc = capr_cli("eval", "--benchmark", f"beir:{folder}", "--cache-dir", str(tmp_path / "c"), "--limit", "0",
                    check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "--limit must be at least 1" in proc.stderr


def test_ids_a_trec_run_cannot_carry_are_refused_before_the_evaluation_writes_one(tmp_path):
    """BEIR ids may hold spaces ("doc 3"): --run-out wrote "q1 Q0 doc 3 2 6 tag", a line of 7 columns that trec_eval,
    pytrec_eval and capr's own --compare misread or refuse. Such an id is refused in one line naming it, before the
    evaluation, and write_run refuses it before writing anything; without --run-out the folder is evaluated as before."""
    from capr.errors import CaprError
    from capr.eval.runs import write_qrels, write_run
    from capr.records import Qrel, Run, ScoredPassage

    folder = write_beir(tmp_path / "b")
    for name in ("corpus.jsonl", "qrels/test.tsv"):
        (folder / name).write_text((folder / name).read_text().replace("d3", "doc 3"))
    run = tmp_path / "run.trec"
    proc = capr_cli("eval", "--benchmark", f"beir:{folder}", "-r", "bm25", "--cache-dir", str(tmp_path / "c"),
                    "--run-out", str(run), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1
    assert f"{run}: cannot write a TREC file: document id 'doc 3' holds whitespace" in proc.stderr
    assert not run.exists() and "nDCG@10" not in proc.stdout  # refused before the evaluation, not after it
    assert eval_json(folder, tmp_path / "c", "-r", "bm25")["queries"] == 3
    for bad in (Run("my run", {"q1": [ScoredPassage("d1", 1.0, 1)]}), Run("t", {"q 1": [ScoredPassage("d1", 1.0, 1)]}),
                Run("t", {"q1": [ScoredPassage("d1", 2.0, 1), ScoredPassage("d\t2", 1.0, 2)]})):
        with pytest.raises(CaprError, match="holds whitespace"):
            write_run(run, bad)
        assert not run.exists()
    with pytest.raises(CaprError, match="document id 'doc 3' holds whitespace"):
        write_qrels(tmp_path / "qrels.txt", [Qrel("q1", "doc 3", 1)])


def test_search_queries_writes_the_run_capr_eval_ranks_from_any_questions_file(tmp_path):
    """`capr search IDX --queries FILE --run-out RUN` (Pyserini's batch search): the run of a user's own questions
    over an index they built, read from BEIR's queries.jsonl or QUERY-ID<TAB>TEXT lines; grouped by document it ranks
    exactly as `capr eval --pipeline default` on the same index, and trec_eval on it gives capr eval's metrics."""
    folder = write_beir(tmp_path / "b")
    idx = tmp_path / "idx"
    capr_cli("index", str(folder), "--out", str(idx))
    run = tmp_path / "run.trec"
    proc = capr_cli("search", str(idx), "--queries", str(folder / "queries.jsonl"), "--group-by", "doc",
                    "--run-out", str(run))
    assert "4 questions searched" in proc.stderr and "Traceback" not in proc.stderr
    evaluated = tmp_path / "eval.trec"
    result = json.loads(capr_cli("eval", "--benchmark", f"beir:{folder}", "--index", str(idx), "--pipeline", "default",
                                 "--run-out", str(evaluated), "--json").stdout.strip().splitlines()[-1])
    ranks = lambda path: [line.split()[:4] for line in path.read_text().splitlines()]  # noqa: E731
    ours = ranks(run)
    assert [r for r in ours if r[0] != "q9"] == ranks(evaluated)  # q9 has no judgements: capr eval leaves it out
    assert trec_eval(read_trec(run), QRELS) == result["metrics"]

    tsv = tmp_path / "questions.tsv"
    tsv.write_text("query-id\ttext\n" + "".join(f"{q}\t{t}\n" for q, t in QUERIES.items()))
    printed = capr_cli("search", str(idx), "--queries", str(tsv), "--group-by", "doc").stdout
    assert [line.split()[:4] for line in printed.splitlines()] == ours
    assert {line.split()[5] for line in printed.splitlines()} == {"capr-hybrid"}
    lexical = capr_cli("search", str(idx), "--queries", str(tsv), "-r", "bm25", "-k", "1").stdout
    # one line per question but q9, whose word ("unjudged") no document has: BM25 ranks nothing for it
    assert [line.split()[0] for line in lexical.splitlines()] == ["q1", "q2", "q3"]
    assert {line.split()[5] for line in lexical.splitlines()} == {"capr-bm25"}

    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"id": "s1", "query": "what is the"}) + "\n"
                   + json.dumps({"qid": 2, "entity": "gout", "aspect": "treatment"}) + "\n")
    proc = capr_cli("search", str(idx), "--queries", str(odd), "-k", "3")
    assert "question 's1' was not searched" in proc.stderr  # only stopwords: an empty ranking, said
    assert {line.split()[0] for line in proc.stdout.splitlines()} == {"2"} and len(proc.stdout.splitlines()) == 3

    for text, message in (
        (json.dumps({"_id": "a", "text": "gout"}) + "\n" + json.dumps({"_id": "a", "text": "asthma"}) + "\n",
         "odd.jsonl [line 2]: question id 'a' is given again (first at line 1)"),
        (json.dumps({"_id": "a"}) + "\n", "odd.jsonl [line 1]: question 'a' has no text"),
        (json.dumps({"_id": "a b", "text": "gout"}) + "\n", "question id 'a b' holds whitespace"),
    ):
        odd.write_text(text)
        proc = capr_cli("search", str(idx), "--queries", str(odd), check=False)
        assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = capr_cli("search", str(idx), "--run-out", str(run), check=False)
    assert proc.returncode != 0 and "--run-out writes the run of --queries" in proc.stderr


# TREC topic files, as clinical IR collections ship their questions: classic SGML (tags left open, labels after
# them, upper-case tags), Clinical Decision Support 2014-2016, Precision Medicine 2017-2020, Clinical Trials 2021-2023
CLASSIC_TOPICS = """<top>
<num> Number: 301
<title> gout colchicine

<desc> Description:
Which inhaler treats
asthma?

<narr> Narrative:
A relevant document names an asthma treatment.
</top>

<TOP>
<NUM> 302
<TITLE> metformin diabetes
<DESC> Does allopurinol lower uric acid?
</TOP>
"""
CDS_TOPICS = """<?xml version="1.0" encoding="UTF-8"?>
<topics>
  <topic number="1" type="treatment">
    <note>pt w/ gout flare, on colchicine</note>
    <description>A 60-year-old man with an asthma attack uses his inhaler daily.</description>
    <summary>60-year-old man: gout &amp; uric acid.</summary>
  </topic>
  <topic number="2" type="diagnosis">
    <description>A woman with type 2 diabetes.</description>
    <summary>Metformin, diet and exercise for diabetes.</summary>
  </topic>
</topics>
"""
PM_TOPICS = """<topics task="2017 TREC Precision Medicine">
  <topic number="1">
    <disease>Asthma</disease>
    <gene>inhaler</gene>
    <demographic>38-year-old male</demographic>
    <other>None</other>
  </topic>
  <topic number="2">
    <disease>gout</disease>
    <gene>uric acid</gene>
    <demographic>52-year-old male</demographic>
    <other>allopurinol</other>
  </topic>
</topics>
"""
CT_TOPICS = """<topics task="2021 TREC Clinical Trials">
  <topic number="1">
Patient is a 45-year-old man with type 2 diabetes,
treated with metformin.
  </topic>
  <topic number="2">A 32 yo woman with asthma who uses an inhaler.</topic>
</topics>
"""
CT2023_TOPICS = """<topics task="2023 TREC Clinical Trials">
<topic number="1" template="gout">
<field name="condition">gout</field>
<field name=" Treatment  given ">colchicine</field>
<field name="smoker"></field>
</topic>
</topics>
"""


@pytest.fixture(scope="module")
def topics_index(tmp_path_factory) -> Path:
    """A lexical index of the BEIR documents: what a topic's question finds there is plain to see."""
    folder = write_beir(tmp_path_factory.mktemp("topics") / "b")
    idx = folder.parent / "idx"
    capr_cli("index", "--lexical-only", str(folder), "--out", str(idx))
    return idx


def top_docs(idx: Path, topics: Path, *args: str) -> dict[str, str]:
    """Each question's best document, from the run `capr search --queries` prints (in process: the real command is
    run by the Clinical Trials and fallback tests)."""
    lines = capr_in_process(CliRunner(), "search", str(idx), "--queries", str(topics), "-r", "bm25", "--group-by", "doc",
                            "-k", "1", *args).stdout.splitlines()
    return {line.split()[0]: line.split()[2] for line in lines}


def refused(*args: str) -> str:
    proc = capr_in_process(CliRunner(), *args, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    return proc.stderr


def test_search_queries_reads_classic_trec_topics_searching_a_chosen_field(tmp_path, topics_index):
    topics = tmp_path / "topics.301-302.txt"  # a .txt name, but <top> content: topics, not QUERY-ID<TAB>TEXT lines
    topics.write_text(CLASSIC_TOPICS)
    assert top_docs(topics_index, topics) == {"301": "d1", "302": "d5"}  # the titles
    assert top_docs(topics_index, topics, "--topic-field", "desc") == {"301": "d3", "302": "d1"}
    # topic 302 has no narrative: searched by its title, and said once
    proc = capr_cli("search", str(topics_index), "--queries", str(topics), "-r", "bm25", "--group-by", "doc", "-k", "1",
                    "--topic-field", "narr")
    assert {line.split()[0]: line.split()[2] for line in proc.stdout.splitlines()} == {"301": "d3", "302": "d5"}
    assert proc.stderr.count("note:") == 1 and f"{topics}: topic '302' (1 of 2) has no field 'narr': searched by " \
        "its default question" in " ".join(proc.stderr.split()), proc.stderr
    message = refused("search", str(topics_index), "--queries", str(topics), "--topic-field", "note")
    assert f"{topics}: no topic has the field 'note' (its topics have: title, desc, narr)" in message


def test_search_queries_reads_clinical_decision_support_topics(tmp_path, topics_index):
    topics = tmp_path / "topics2016"  # no extension: the content says XML
    topics.write_text(CDS_TOPICS)
    assert top_docs(topics_index, topics) == {"1": "d1", "2": "d5"}  # the summaries
    assert top_docs(topics_index, topics, "--topic-field", "description") == {"1": "d4", "2": "d5"}
    topics.write_text(CDS_TOPICS.replace("</summary>\n  </topic>\n  <topic", "</summary>\n  <topic", 1))
    message = refused("search", str(topics_index), "--queries", str(topics))
    assert f"{topics} [line 11, column 2]: not well-formed XML: mismatched tag" in message


def test_search_queries_reads_precision_medicine_topics_as_their_fields_joined(tmp_path, topics_index):
    topics = tmp_path / "topics2017.xml"
    topics.write_text(PM_TOPICS)
    assert top_docs(topics_index, topics) == {"1": "d3", "2": "d1"}
    assert top_docs(topics_index, topics, "--topic-field", "disease") == {"1": "d3", "2": "d2"}
    topics.write_text(PM_TOPICS.replace('<topic number="2">', '<topic number="1">'))
    message = refused("search", str(topics_index), "--queries", str(topics))
    assert f"{topics} [line 8]: question id '1' is given again (first at line 2)" in message


def test_search_queries_reads_clinical_trials_topics_as_their_text(tmp_path, topics_index):
    topics = tmp_path / "topics2021.xml"
    topics.write_text(CT_TOPICS)
    run = tmp_path / "run.trec"
    proc = capr_cli("search", str(topics_index), "--queries", str(topics), "-r", "bm25", "--group-by", "doc",
                    "--run-out", str(run))
    assert "2 questions searched" in proc.stderr
    best = {line.split()[0]: line.split()[2] for line in run.read_text().splitlines() if line.split()[3] == "1"}
    assert best == {"1": "d5", "2": "d4"}
    message = refused("search", str(topics_index), "--queries", str(topics), "--topic-field", "summary")
    assert f"{topics}: no topic has the field 'summary' (its topics have: text)" in message
    assert "--topic-field chooses" in refused("search", str(topics_index), "--topic-field", "desc")


def test_read_queries_takes_each_topic_format_by_its_content_and_a_chosen_field(tmp_path):
    from capr.corpus.queries import read_queries

    def read(name: str, content: str | bytes, field: str | None = None) -> dict[str, str]:
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return {q.qid: q.text for q in read_queries(path, field)}

    assert read("topics.txt", CLASSIC_TOPICS) == {"301": "gout colchicine", "302": "metformin diabetes"}
    assert read("topics.txt", CLASSIC_TOPICS, "DESC") == {"301": "Which inhaler treats asthma?",
                                                          "302": "Does allopurinol lower uric acid?"}
    assert read("topics.txt", CLASSIC_TOPICS, "title, desc")["302"] == ("metformin diabetes Does allopurinol lower "
                                                                       "uric acid?")
    assert read("topics.gz", gzip.compress(b"\xef\xbb\xbf" + CLASSIC_TOPICS.upper().encode()), "desc") == {
        "301": "WHICH INHALER TREATS ASTHMA?", "302": "DOES ALLOPURINOL LOWER URIC ACID?"}
    # closed tags (as TREC Medical Records 2011 writes them) after an XML declaration, but several roots: classic
    assert read("topics2011.xml", '<?xml version="1.0"?>\n<top>\n<num>101</num>\n<title>Patients with hearing loss'
                "</title>\n</top>\n<top>\n<num>102</num>\n<title>Patients with GERD</title>\n</top>\n") == {
        "101": "Patients with hearing loss", "102": "Patients with GERD"}
    assert read("cds", CDS_TOPICS) == {"1": "60-year-old man: gout & uric acid.",
                                       "2": "Metformin, diet and exercise for diabetes."}
    assert read("cds", CDS_TOPICS, "description,summary")["2"] == ("A woman with type 2 diabetes. Metformin, diet and "
                                                                   "exercise for diabetes.")
    assert read("cds", CDS_TOPICS.replace("<note>", "<!-- 2016 --><note>").replace(
        "<description>A woman", "<note>pt w/ DM2</note><description>A woman"), "note") == {
        "1": "pt w/ gout flare, on colchicine", "2": "pt w/ DM2"}
    assert read("pm.xml", PM_TOPICS) == {"1": "Asthma inhaler 38-year-old male",  # <other>None</other>: nothing
                                         "2": "gout uric acid 52-year-old male allopurinol"}
    assert read("ct.xml", b"\xef\xbb\xbf" + CT_TOPICS.encode()) == {
        "1": "Patient is a 45-year-old man with type 2 diabetes, treated with metformin.",
        "2": "A 32 yo woman with asthma who uses an inhaler."}
    # each answer says what it answers; an empty one is left out
    assert read("ct2023.xml", CT2023_TOPICS) == {"1": "condition: gout. Treatment given: colchicine."}
    assert read("ct2023.xml", CT2023_TOPICS, "treatment given") == {"1": "colchicine"}
    covid = '<topics><topic number="1"><query>coronavirus origin</query><question>Where did it come from?</question>' \
            '<narrative>seeking the origin</narrative></topic></topics>'
    assert read("covid.xml", covid) == {"1": "coronavirus origin"}


def test_classic_topics_are_searched_with_their_entities_unescaped(tmp_path):
    from capr.corpus.queries import read_queries

    topics = tmp_path / "topics.txt"
    topics.write_text("<top>\n<num> Number: 1\n<title> Crohn&apos;s disease &amp; fistula &lt;1 cm&gt;\n"
                      "<desc> Caf&eacute; au lait spots &#8211; &#x3b2;-blocker&#59; AT&T &notes\n</top>\n")
    # "&notes" (no ";") is no entity, though HTML reads its legacy "&not" without one
    assert [(q.qid, q.text) for q in read_queries(topics)] == [("1", "Crohn's disease & fistula <1 cm>")]
    assert read_queries(topics, "desc")[0].text == "Café au lait spots – β-blocker; AT&T &notes"


def test_a_topic_field_some_topics_lack_searches_those_by_what_they_have_said_once(tmp_path):
    from capr.corpus.queries import read_queries

    topics = tmp_path / "topics2016.xml"
    topics.write_text(CDS_TOPICS)
    notes: list[str] = []
    assert {q.qid: q.text for q in read_queries(topics, "note", notes)} == {
        "1": "pt w/ gout flare, on colchicine", "2": "Metformin, diet and exercise for diabetes."}
    assert notes == [f"{topics}: topic '2' (1 of 2) has no field 'note': searched by its default question (the "
                     "first of title, summary and query, else all fields)"]
    many = CLASSIC_TOPICS + "".join(f"<top><num>{n}<title>gout {n}</top>\n" for n in range(303, 310))
    topics.write_text(many)
    notes.clear()
    asked = read_queries(topics, "desc,narr", notes)
    assert asked[-1].text == "gout 309"
    assert notes == [f"{topics}: topics '303', '304', '305', '306', '307', … (7 of 9) have no field 'desc' or "
                     "'narr': searched by their default question (the first of title, summary and query, else all "
                     "fields)",
                     f"{topics}: topic '302' (1 of 9) has only some of the fields 'desc', 'narr': searched by those it "
                     "has"]
    assert asked[1].text == "Does allopurinol lower uric acid?"  # its desc: the chosen field it has


MALFORMED_TOPICS = [  # file name, content, topic field, what the error says
    ("nonum.txt", "<top>\n<num> Number: 1\n<title> gout\n</top>\n<top>\n<title> asthma\n</top>\n", None,
     "[line 5]: a topic without a number"),
    ("nonum.xml", '<topics><topic number="1">gout</topic>\n<topic>asthma</topic></topics>', None,
     "[line 2]: a topic without a number"),
    ("dup.txt", "<top><num>7<title>gout</top>\n<top><num>7<title>asthma</top>\n", None,
     "[line 2]: question id '7' is given again (first at line 1)"),
    ("empty.txt", "<top>\n<num> 1\n<title>\n<desc> gout\n</top>\n", None,
     "[line 1]: topic '1' has no text in field 'title'"),
    ("empty.xml", '<topics>\n<topic number="4">  </topic>\n</topics>', None, "[line 2]: topic '4' has no text"),
    ("none.xml", PM_TOPICS, "other", "[line 2]: topic '1' has no text in field 'other'"),
    ("missing.txt", CLASSIC_TOPICS, "title,note", ": no topic has the field 'note' (its topics have: title, desc, narr)"),
    ("missing.xml", CDS_TOPICS, "gene,note,type",
     ": no topic has the fields 'gene', 'type' (its topics have: note, description, summary)"),
    ("fallback.txt", CLASSIC_TOPICS.replace("<TITLE> metformin diabetes", "<TITLE>"), "narr",
     "[line 13]: topic '302' has no text in field 'title'"),
    ("cut.xml", CDS_TOPICS[:200], None, "[line 5, column 65]: not well-formed XML: the file ends inside <description>"),
    ("notxml.xml", "gout\tasthma\n", None, "[line 1, column 0]: not well-formed XML: syntax error"),
    ("other.xml", "<questions><q id='1'>gout</q></questions>", None,
     ": no TREC topics: expected <topic number=\"…\"> elements (the root element is <questions>)"),
    ("q.jsonl", json.dumps({"_id": "q1", "text": "gout"}) + "\n", "desc",
     ": a topic field (desc) chooses the text of TREC topics"),
    ("field.txt", CLASSIC_TOPICS, "title,", "topic field 'title,': name a field"),
]


@pytest.mark.parametrize("name, content, field, message", MALFORMED_TOPICS, ids=[t[0] for t in MALFORMED_TOPICS])
def test_read_queries_refuses_malformed_topics_naming_the_file_the_topic_and_the_reason(tmp_path, name, content, field,
                                                                                       message):
    from capr.corpus.queries import read_queries
    from capr.errors import CaprError

    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(CaprError) as e:
        read_queries(path, field)
    assert message in str(e.value) and "\n" not in str(e.value)
    if not message.startswith("topic field"):
        assert str(e.value).startswith(str(path))


EVAL_NUMBERS_OUT_OF_RANGE = [
    (("--rerank-depth", "0", "--reranker", "bi:minilm"), "--rerank-depth must be at least 1, got 0"),  # the default depth
    (("--rerank-depth", "-1", "--reranker", "bi:minilm"), "--rerank-depth must be at least 1, got -1"),  # re-ranked nothing
    (("--limit", "2", "--seed", "-1"), "--seed must be between 0 and 4294967295, got -1"),  # the subset of --seed 1
    (("--theta-open", "nan"), "--theta-open must be between 0 and 1, got nan"),
    (("--theta-open", "0.1", "--theta-close", "0.9"), "--theta-close (0.9) must not exceed --theta-open (0.1)"),
    (("--rerank-share", "inf"), "--rerank-share must be between 0 and 1, got inf"),
    (("--dense-k", "0"), "--dense-k must be at least 1, got 0"),
]


def _in_process(runner, *args: str) -> tuple[int, str]:
    """`capr ARGS` through the same Typer app in this process (a subprocess per case costs seconds); each test
    below also runs one case as the real command."""
    from capr.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def _refused(runner, command: tuple[str, ...], real: bool) -> tuple[int, str]:
    """(exit code, what was said) of `capr COMMAND`: as the real command when ``real`` (no traceback), else in process."""
    if not real:
        return _in_process(runner, *command)
    proc = capr_cli(*command, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr


def test_eval_numbers_out_of_range_are_refused_in_one_line_before_any_work(tmp_path, runner):
    """Every number of `capr eval` out of its range is one line naming the option, before the benchmark is read or
    indexed; such values ran and reported numbers that were not what was asked for. The Python API refuses them too."""
    from capr.errors import CaprError
    from capr.eval.runner import EvalConfig

    folder = write_beir(tmp_path / "b")
    for n, (args, message) in enumerate(EVAL_NUMBERS_OUT_OF_RANGE):
        command = ("eval", "--benchmark", f"beir:{folder}", "--cache-dir", str(tmp_path / "c"), *args)
        code, said = _refused(runner, command, real=n == 0)
        assert code == 2 and message in said and said.count("\n") == 1, (args, said)
    assert not (tmp_path / "c").exists()
    with pytest.raises(CaprError, match="--rerank-depth must be at least 1, got 0"):
        EvalConfig(benchmark=f"beir:{folder}", rerank_depth=0)


def test_a_run_out_onto_an_input_of_the_evaluation_is_refused_and_the_input_kept(tmp_path, runner):
    """--run-out naming the benchmark's queries (or judgements, or the --compare run, or an mcqa: question file) wrote
    the run over it once the evaluation was over; it is refused before any work, the file left as it was. --compare
    with a similar-case benchmark was passed over in silence: it is refused too."""
    folder = write_beir(tmp_path / "b")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 other\n")
    mcqa = tmp_path / "questions.jsonl"
    mcqa.write_text(json.dumps({"question": "Which drug treats gout?", "options": {"A": "colchicine", "B": "insulin"},
                                "answer_idx": "A"}) + "\n")
    cases = [(f"beir:{folder}", folder / "queries.jsonl", "it is a file of beir:"),
             (f"beir:{folder}", folder / "qrels" / "test.tsv", "it is a file of beir:"),
             (f"beir:{folder}", run, "it is the run given to --compare"),
             (f"mcqa:{mcqa}", mcqa, f"it is the file of mcqa:{mcqa}")]
    for n, (benchmark, target, message) in enumerate(cases):
        before = target.read_bytes()
        command = ("eval", "--benchmark", benchmark, "--cache-dir", str(tmp_path / "c"), "--index",
                   str(tmp_path / "idx"), "--compare", str(run), "--run-out", str(target))
        code, said = _refused(runner, command, real=n == 0)
        assert code == 2 and said.count("\n") == 1, said
        assert f"{target}: cannot write the run file (--run-out): {message}" in said.replace("\n", ""), said
        assert target.read_bytes() == before
    assert not (tmp_path / "c").exists()
    code, said = _in_process(runner, "eval", "--benchmark", "medqa-dev", "--index", str(tmp_path / "idx"), "--compare",
                             str(run))
    assert code == 2
    assert "--compare compares TREC runs of passage benchmarks; medqa-dev is a similar-case benchmark" in said


def test_a_prefix_benchmark_whose_path_is_missing_empty_or_of_the_wrong_kind_says_which(tmp_path, runner):
    """`beir:` and `mediqa:` with no path named "." (the working directory) as the benchmark; a folder given to
    mediqa: or mcqa: was "no such file", and a file or a missing path given to beir: "not a BEIR folder (missing
    corpus.jsonl, queries.jsonl, qrels/)". Each is now one line saying what is wrong with the path."""
    folder = write_beir(tmp_path / "b")
    cases = [("beir:", "--benchmark 'beir:' names no path: write beir:PATH (a BEIR folder)"),
             ("mediqa:", "--benchmark 'mediqa:' names no path: write mediqa:PATH"),
             ("mcqa:", "--benchmark 'mcqa:' names no path: write mcqa:PATH"),
             (f"beir:{tmp_path / 'nope'}", f"{tmp_path / 'nope'}: not a BEIR folder: no such folder"),
             (f"beir:{folder / 'corpus.jsonl'}", f"{folder / 'corpus.jsonl'}: not a BEIR folder: it is a file"),
             (f"mediqa:{folder}", f"{folder}: is a folder; mediqa:PATH names a MEDIQA 2019 Task 3 file"),
             (f"mcqa:{folder}", f"{folder}: is a folder (mcqa:PATH names a MedQA-, MedMCQA- or HEAD-QA-style file)")]
    for n, (benchmark, message) in enumerate(cases):
        command = ("eval", "--benchmark", benchmark, "--index", str(tmp_path / "idx"), "--cache-dir", str(tmp_path / "c"))
        code, said = _refused(runner, command, real=n == 0)
        assert code == 2 and said.count("\n") == 1, said
        assert said.startswith(f"error: {message}"), (benchmark, said)


def test_a_users_own_run_scored_against_their_judgements(tmp_path):
    """Outside any benchmark: `capr index` a corpus, `capr search --queries --group-by doc --run-out` its questions,
    then `capr eval --run RUN --qrels QRELS` scores the run as trec_eval does, over every judged query, and
    --compare tests a second run against it."""
    folder = write_beir(tmp_path / "own")
    index = tmp_path / "idx"
    capr_cli("index", str(folder), "--out", str(index), "--lexical-only")
    runs = {}
    for retriever in ("bm25", "tfidf"):
        runs[retriever] = tmp_path / f"{retriever}.trec"
        capr_cli("search", str(index), "--queries", str(folder / "queries.jsonl"), "--group-by", "doc", "-k", "100",
                 "-r", retriever, "--run-out", str(runs[retriever]))
    qrels = folder / "qrels" / "test.tsv"
    proc = capr_cli("eval", "--run", str(runs["bm25"]), "--qrels", str(qrels), "--compare", str(runs["tfidf"]),
                    "--json")
    result = json.loads(proc.stdout)
    assert result["queries"] == 3  # the judged queries; q9 is ranked but unjudged
    expected = trec_eval(read_trec(runs["bm25"]), QRELS)
    assert {m: result["metrics"][m] for m in expected} == expected
    from capr.eval.judge import judge_run_files

    assert judge_run_files(runs["bm25"], qrels, runs["tfidf"]) == result  # the library, as the command calls it
    other = trec_eval(read_trec(runs["tfidf"]), QRELS)
    assert {m: result["compare"][m]["compared"] for m in other} == other
    assert all(0 <= result["compare"][m]["p"] <= 1 for m in other)
    # the same judgements in TREC's layout give the same numbers
    trec_qrels = tmp_path / "qrels.txt"
    trec_qrels.write_text("".join(f"{q} 0 {d} {r}\n" for q, rel in QRELS.items() for d, r in rel.items()))
    again = json.loads(capr_cli("eval", "--run", str(runs["bm25"]), "--qrels", str(trec_qrels), "--json").stdout)
    assert again["metrics"] == result["metrics"]
    # a run of passages judged by document: every metric 0, and the user is told why
    passages = tmp_path / "passages.trec"
    capr_cli("search", str(index), "--queries", str(folder / "queries.jsonl"), "-r", "bm25", "--run-out", str(passages))
    if any("#" in line.split()[2] for line in passages.read_text().splitlines()):
        proc = capr_cli("eval", "--run", str(passages), "--qrels", str(qrels))
        assert "--group-by doc" in proc.stderr and "ranks none of the ids" in proc.stderr


def test_scoring_a_run_file_refuses_what_does_not_apply(tmp_path):
    folder = write_beir(tmp_path / "own")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\n")
    qrels = folder / "qrels" / "test.tsv"
    runner = CliRunner()
    from conftest import one_line_error

    one_line_error(capr_in_process(runner, "eval", "--run", str(run), "--qrels", str(qrels), "-r", "dense",
                                   check=False), "--retriever runs a benchmark")
    one_line_error(capr_in_process(runner, "eval", "--qrels", str(qrels), check=False), "--run and --qrels go together")
    one_line_error(capr_in_process(runner, "eval", "--run", str(tmp_path / "none.trec"), "--qrels", str(qrels),
                                   check=False), "none.trec: no such file (--run)")
    other = tmp_path / "other.trec"
    other.write_text("x1 Q0 d1 1 2.0 t\n")
    one_line_error(capr_in_process(runner, "eval", "--run", str(other), "--qrels", str(qrels), check=False),
                   "none of its 1 queries is a judged query")


def test_eval_compare_table_labels_its_rows_and_keeps_every_header(tmp_path, runner):
    """`capr eval --run A --qrels Q --compare B` in a pipe (80 columns to rich): each row says whose numbers it holds
    (the run, the compared run, the paired test's p) and no header is cut."""
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"{q} 0 {d} {r}\n" for q, rel in QRELS.items() for d, r in rel.items()))
    first, second = tmp_path / "first-run-with-a-long-name.trec", tmp_path / "second.trec"
    first.write_text("q1 Q0 d1 1 3.5 a\nq1 Q0 d2 2 2.0 a\nq2 Q0 d4 1 1.5 a\nq3 Q0 d5 1 4.0 a\n")
    second.write_text("q1 Q0 d7 1 3.5 b\nq1 Q0 d1 2 2.0 b\nq2 Q0 d3 1 1.5 b\nq3 Q0 d2 1 4.0 b\n")
    proc = capr_in_process(runner, "eval", "--run", str(first), "--qrels", str(qrels), "--compare", str(second))
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == [str(first), str(second), "p (paired)"], proc.stdout
    header = next(line for line in proc.stdout.splitlines() if "R@1" in line)
    assert "nDCG@10" in header and "…" not in proc.stdout, proc.stdout


def test_eval_run_out_writes_the_pipelines_own_scores(tmp_path):
    """`capr eval --benchmark beir:DIR --run-out` writes each document's score (its best passage's BM25), not its
    rank counted down (5, 4, 3, ...); a tie is split by a step in the last digit written, so trec_eval, which sorts by
    score, reads capr's ranking and gives capr's numbers."""
    from capr.index import Index
    from capr.records import Query
    from capr.search.searcher import Searcher

    folder = write_beir(tmp_path / "scores")
    run = tmp_path / "bm25.trec"
    result = eval_json(folder, tmp_path / "c", "--retriever", "bm25", "--run-out", str(run))
    [index_dir] = [p.parent for p in (tmp_path / "c").rglob("CURRENT")]
    index = Index.load(index_dir)
    searcher = Searcher(index)
    written = read_trec(run)
    for qid in QRELS:
        scores = searcher.lexical_scores(searcher.parse(Query(qid, text=QUERIES[qid]), expand=False, validate=False), None)
        best: dict[str, float] = {}
        for row, score in enumerate(scores):
            doc = index.passage(row).doc_id
            best[doc] = max(best.get(doc, float("-inf")), float(score))
        positive = {d: s for d, s in written[qid].items() if best[d] > 0}
        assert positive and all(s == pytest.approx(best[d], rel=1e-6) for d, s in positive.items()), (qid, written[qid])
        assert any(s != int(s) for s in positive.values())  # real scores, not ranks
    assert result["metrics"] == trec_eval(written, QRELS)
