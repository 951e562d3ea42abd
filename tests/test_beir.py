"""`capr eval --benchmark beir:PATH` on a BEIR folder written here: graded judgements, documents cut into several
passages and ranked by their best one; metrics checked against trec_eval (pytrec_eval) on the run it writes, and
the paired comparison with a second run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import capr_cli

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

    assert len(Index.load(tmp_path / "lexical")) > len(DOCS)  # the long document is cut into passages, as capr index cuts it
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
    (packed / "qrels" / "test.tsv").write_text("q1 d1 0.5\n")
    with pytest.raises(Exception, match=r"test\.tsv \[line 1\].*integer"):
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
