"""What the dev sweeps and run analyses share: where the shared data is, per-question metrics of rankings (for the
paired tests), TREC run files, and the consumer dev sets set up as `capr search` runs them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from capr.eval.metrics import query_metrics

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
METRICS = ("P@1", "MAP", "nDCG@10")


def ranked_per_query(ranked: Mapping[str, list[str]], qrels: Mapping[str, Mapping[str, int]],
                     metrics: tuple[str, ...] = METRICS) -> dict[str, np.ndarray]:
    """Each metric (in %) per question of ``qrels``, in sorted qid order, for ranked document ids per question (a
    question missing from ``ranked`` scores 0): the paired samples of capr.eval.significance."""
    rows: dict[str, list[float]] = {m: [] for m in metrics}
    for qid in sorted(qrels):
        m = query_metrics(ranked.get(qid, []), qrels[qid])
        for name in metrics:
            rows[name].append(100.0 * m[name])
    return {k: np.asarray(v) for k, v in rows.items()}


def run_per_query(run: Any, qrels: Mapping[str, Mapping[str, int]],
                  metrics: tuple[str, ...] = METRICS) -> dict[str, np.ndarray]:
    """:func:`ranked_per_query` of a capr.eval.benchmarks run (``run.results``: each question's hits, best first)."""
    return ranked_per_query({qid: [h.pid for h in hits] for qid, hits in run.results.items()}, qrels, metrics)


def read_trec_run(path: Path | str) -> dict[str, list[str]]:
    """Each question's document ids in rank order, from a TREC run file (`capr eval --run-out`)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for line in Path(path).read_text().splitlines():
        qid, _, pid, rank, *_ = line.split()
        out.setdefault(qid, []).append((int(rank), pid))
    return {q: [p for _, p in sorted(v)] for q, v in out.items()}


def encoder_of(model: str):
    """`minilm`, a model folder, or an index (its encoder), as `capr eval --model` reads it."""
    from capr.eval.benchmarks import QueryField
    from capr.eval.runner import EvalConfig
    from capr.records import Retriever

    return EvalConfig(benchmark="mediqa2019", retriever=Retriever.dense, model=model,
                      query_field=QueryField.question).encoder()


def consumer_setup(name: str, data_dir: Path, model: str, k: int = 100):
    """consumer-dev(-titled) indexed with ``model``'s encoder: (its BenchmarkData, the search options `capr search
    --group-by doc -k K` uses on an index of this model — the fusion it records —, the second stage it records)."""
    from capr.eval.benchmarks import QueryField
    from capr.eval.devsets import load_consumer_dev
    from capr.eval.runner import EvalConfig, encoder_slug
    from capr.models.encoder import cache_root
    from capr.search import GroupBy

    enc = encoder_of(model)
    data = load_consumer_dev(data_dir, cache_root() / "bench" / name / encoder_slug(enc), dense=enc,
                             titled=name.endswith("titled"))
    config = EvalConfig(benchmark="mediqa2019", pipeline="default", model=model, query_field=QueryField.question)
    options = replace(config.search_options(), k=k, highlights=False, group_by=GroupBy.doc)
    return data, options, config.effective_reranker
