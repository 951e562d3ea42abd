"""The model-free lexical baseline (capr.cases.baseline.rank_hypotheses: the mean BM25 of a hypothesis' mentions)
on the multiple-choice benchmarks, beside which the similar-case pipeline's defaults were made the service's:

    python -m experiments.cases_baseline --index IDX headqa-dev [medqa-dev ...]

Accuracy and AP as `capr eval --benchmark B --index IDX` reports them (capr.cases.bench.summarize)."""

from __future__ import annotations

import argparse
import time

from capr.cases.baseline import rank_hypotheses
from capr.cases.bench import benchmark_questions, outcome_of, summarize
from capr.index.index import Index


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("benchmarks", nargs="+")
    ap.add_argument("--index", required=True)
    ap.add_argument("--data-dir", default="../shared/data")
    a = ap.parse_args()
    index = Index.load(a.index)
    for name in a.benchmarks:
        t0 = time.time()
        outcomes = [outcome_of(q, ((h.hypothesis, h.score, h.candidates > 0, None)
                                   for h in rank_hypotheses(index, q.description, q.options, allow_repeats=True)))
                    for q in benchmark_questions(a.data_dir, name)]
        m = summarize(outcomes)
        print(f"{name}: accuracy {m['accuracy']:.2f}, AP {m['AP']:.2f}, {m['questions']} questions, "
              f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
