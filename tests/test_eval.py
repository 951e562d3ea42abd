"""Metrics cross-checked against pytrec_eval; the medquad-cdv protocols and BM25 numbers."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from capr.eval.benchmarks import POOL_DEPTH, Protocol, QueryField, lexical_scorer, load_medquad_cdv, rerank64_pools, run_benchmark
from capr.eval.metrics import evaluate
from capr.index import Retriever
from capr.records import qrels_as_dict

from conftest import capr_cli, need_data

pytrec_eval = pytest.importorskip("pytrec_eval")


def _reference(run: dict, qrels: dict) -> dict[str, float]:
    """The same metrics computed by trec_eval (pytrec_eval). MRR@10 = recip_rank over the top 10."""
    full = pytrec_eval.RelevanceEvaluator(qrels, {"map", "recall.1,5,10,100", "ndcg_cut.10", "P.1"}).evaluate(run)
    top10 = {q: dict(sorted(d.items(), key=lambda x: -x[1])[:10]) for q, d in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    n = len(qrels)
    mean = lambda key, res=full: 100 * sum(res.get(q, {}).get(key, 0.0) for q in qrels) / n  # noqa: E731
    return {
        "R@1": mean("recall_1"), "R@5": mean("recall_5"), "R@10": mean("recall_10"), "R@100": mean("recall_100"),
        "P@1": mean("P_1"), "MAP": mean("map"), "MRR@10": mean("recip_rank", rr), "nDCG@10": mean("ndcg_cut_10"),
    }


def test_metrics_match_trec_eval_on_random_graded_runs():
    rng = random.Random(7)
    qrels, run = {}, {}
    for q in range(60):
        docs = [f"d{i}" for i in range(40)]
        qrels[f"q{q}"] = {d: rng.choice([1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 6))}
        scores = rng.sample(range(1000), len(docs))
        run[f"q{q}"] = {d: float(s) for d, s in zip(docs, scores)}
    run["q3"] = {}  # a query with nothing retrieved counts as zero
    ours = evaluate(run, qrels)
    ref = _reference(run, qrels)
    assert set(ref) == set(ours)
    for k, v in ref.items():
        assert ours[k] == pytest.approx(v, abs=0.01), k


def test_the_gate_and_capr_eval_measure_a_run_alike():
    """`capr adapt`'s gate scores candidates (arrays of scores and grades), `capr eval` scores runs (ids → score): on
    the same run, graded and with ties, every metric they share is the same number, and trec_eval's."""
    from capr.eval.metrics import candidate_metrics

    rng = random.Random(11)
    scores, grades, run, qrels = [], [], {}, {}
    for q in range(50):
        n = rng.randint(2, 30)
        s = [float(rng.choice(range(8))) for _ in range(n)]  # few values: many ties
        g = [rng.choice([0, 0, 0, 1, 2, 3]) for _ in range(n)]
        g[rng.randrange(n)] = rng.choice([1, 2, 3])
        scores.append(np.asarray(s))
        grades.append(g)
        ids = [f"{i:09d}" for i in range(n)]
        run[f"q{q}"] = dict(zip(ids, s))
        qrels[f"q{q}"] = {d: r for d, r in zip(ids, g) if r > 0}
    gate = {m: round(float(v.mean()), 2) for m, v in candidate_metrics(scores, grades, ("P@1", "MAP", "nDCG@10")).items()}
    ours = evaluate(run, qrels)
    ref = _reference(run, qrels)
    for m in ("P@1", "MAP", "nDCG@10"):
        assert gate[m] == ours[m] == pytest.approx(ref[m], abs=0.01), m


@pytest.fixture(scope="module")
def cdv(tmp_path_factory):
    need_data("medquad_cdv_test")
    from conftest import DATA_DIR

    return load_medquad_cdv(DATA_DIR, tmp_path_factory.mktemp("cdv") / "index")


def test_rerank64_pools_follow_the_protocol(cdv):
    pools = rerank64_pools(cdv, QueryField.tuple)
    rels = qrels_as_dict(cdv.qrels)
    rows = cdv.index.pid_rows()
    assert len(pools) == 3293
    for qid, pool in pools.items():
        assert len(pool) == POOL_DEPTH == len(set(pool.tolist()))
        assert {rows[p] for p in rels[qid]} <= set(pool.tolist())  # gold always in the pool
    again = rerank64_pools(cdv, QueryField.tuple)
    assert all(np.array_equal(pools[q], again[q]) for q in pools)  # fixed seed


def test_bm25_on_medquad_cdv_matches_published_range_and_trec_eval(cdv):
    metrics, run = run_benchmark(cdv, lexical_scorer(cdv.index, Retriever.bm25), Protocol.rerank64, QueryField.tuple)
    assert 27 <= metrics["R@1"] <= 34 and metrics["R@5"] >= 75
    ref = _reference(run.as_scores(), qrels_as_dict(cdv.qrels))
    for k, v in ref.items():
        assert metrics[k] == pytest.approx(v, abs=0.01), k
    tfidf, _ = run_benchmark(cdv, lexical_scorer(cdv.index, Retriever.tfidf), Protocol.rerank64, QueryField.tuple)
    assert tfidf["R@1"] < metrics["R@1"]


def test_capr_eval_cli_json(tmp_path):
    data = need_data()
    proc = capr_cli("eval", "--benchmark", "medquad-cdv", "--data-dir", str(data), "--retriever", "bm25",
                    "--protocol", "rerank64", "--query-field", "question", "--run-out", str(tmp_path / "run.trec"),
                    "--cache-dir", str(tmp_path / "cache"), "--json")
    result = json.loads(proc.stdout)
    assert set(result) == {"benchmark", "protocol", "retriever", "query_field", "queries", "metrics", "seconds"}
    assert result["queries"] == 3293 and set(result["metrics"]) == {"R@1", "R@5", "R@10", "R@100", "P@1", "MAP", "MRR@10", "nDCG@10"}
    assert 27 <= result["metrics"]["R@1"] <= 40
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert len(lines) == 3293 * 64 and lines[0].split()[1] == "Q0"


def test_titled_benchmark_index_reads_titles_and_keeps_the_protocols_pools(cdv, tmp_path):
    """`capr eval --pipeline default` indexes the benchmark as `capr index` would (title in front of each passage's
    lexical text); the rerank64 candidates still come from BM25 over passage text, so they are the protocol's."""
    from conftest import DATA_DIR
    from capr.eval.runner import EvalConfig

    titled = load_medquad_cdv(DATA_DIR, tmp_path / "titled", titled=True)
    assert titled.index.manifest["segmenter"]["include_title"] and not cdv.index.manifest["segmenter"]["include_title"]
    # a word of a title that its document's passages do not all repeat: every passage of the document has it now
    rows = titled.index.pid_rows()
    doc = "NINDS_0000212"  # "Neurofibromatosis": two of its four passages never say the word
    pids = [p for p in rows if p.startswith(doc + "-")]
    with_title = lexical_scorer(titled.index, Retriever.bm25)
    without = lexical_scorer(cdv.index, Retriever.bm25)
    from capr.records import Query

    q = Query("t", text="neurofibromatosis")
    assert (with_title(q, np.asarray([rows[p] for p in pids])) > 0).all()
    assert not (without(q, np.asarray([cdv.index.pid_rows()[p] for p in pids])) > 0).all()
    untitled_pools = rerank64_pools(cdv, QueryField.question)
    titled_pools = rerank64_pools(titled, QueryField.question)
    pid_cdv = {r: p for p, r in cdv.index.pid_rows().items()}
    pid_titled = {r: p for p, r in rows.items()}
    for qid in list(untitled_pools)[:300]:
        assert [pid_cdv[int(r)] for r in untitled_pools[qid]] == [pid_titled[int(r)] for r in titled_pools[qid]], qid
    # the default pipeline's settings pick the titled index; the papers' protocol keeps passage text
    assert EvalConfig(pipeline="default").titled and not EvalConfig().titled
    assert not EvalConfig(pipeline="default", titles=False).titled
    assert EvalConfig(pipeline="default").index_dir() != EvalConfig(pipeline="default", titles=False).index_dir()


def test_eval_warns_where_an_ensemble_second_stage_is_measured_outside_the_pipeline_it_was_chosen_for():
    """`capr adapt` gates its ensemble inside capr search's default pipeline; measured under the papers' protocol it
    reads passages otherwise and replaces the first stage's order, so capr eval says so (and records it)."""
    from capr.eval.runner import EvalConfig

    protocol = EvalConfig(benchmark="medquad-cdv", retriever="dense", reranker="bi:minilm,bi:minilm")
    assert protocol.warnings() and "--pipeline default" in protocol.warnings()[0]
    assert EvalConfig(benchmark="medquad-cdv", retriever="dense", reranker="bi:minilm").warnings() == []
    assert EvalConfig(benchmark="medquad-cdv", pipeline="default", reranker="bi:minilm,bi:minilm").warnings() == []
    proc = capr_cli("eval", "--benchmark", "medquad-cdv", "--data-dir", "/nonexistent", "--retriever", "dense",
                    "--reranker", "bi:minilm,bi:minilm", check=False)
    assert "warning:" in proc.stderr and "ensemble" in proc.stderr
