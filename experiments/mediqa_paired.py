"""Paired comparison of two rankings of the MEDIQA 2019 validation set (issue 8): per-question AP, how many
questions each side wins, and a two-sided paired randomization test (capr.eval.significance, 20,000 sign flips, seed 0).

    capr eval --benchmark mediqa2019 --query-field question -r dense --model minilm --run-out a.run
    capr eval --benchmark mediqa2019 --query-field question -r dense --model MODEL --run-out b.run
    .venv/bin/python -m experiments.mediqa_paired a.run b.run [mediqa2019-train]   (the set: default mediqa2019)
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from capr.corpus.mediqa import read_task3, task3_path
from capr.eval.metrics import query_metrics
from capr.eval.significance import paired_randomisation_p
from experiments.common import DEFAULT_DATA, read_trec_run


def main(a_path: str, b_path: str, set_name: str = "mediqa2019") -> None:
    rel: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for ans in read_task3(task3_path(DEFAULT_DATA, set_name)):
        rel[ans.qid][ans.aid] = int(ans.relevant)
    a = {q: query_metrics(r, rel[q])["MAP"] for q, r in read_trec_run(a_path).items() if q in rel}
    b = {q: query_metrics(r, rel[q])["MAP"] for q, r in read_trec_run(b_path).items() if q in rel}
    qs = sorted(a)
    diff = [b[q] - a[q] for q in qs]
    obs = sum(diff) / len(diff)
    p = paired_randomisation_p(np.asarray([b[q] for q in qs]), np.asarray([a[q] for q in qs]), rounds=20_000)
    print(f"MAP {100*sum(a.values())/len(a):.2f} -> {100*sum(b.values())/len(b):.2f}; diff {100*obs:+.2f}; "
          f"questions better/worse/equal {sum(d>1e-9 for d in diff)}/{sum(d<-1e-9 for d in diff)}/"
          f"{sum(abs(d)<=1e-9 for d in diff)}; paired randomization p={p:.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="the baseline's TREC run")
    ap.add_argument("b", help="the other TREC run")
    ap.add_argument("set", nargs="?", default="mediqa2019", help="mediqa2019 or mediqa2019-train")
    args = ap.parse_args()
    main(args.a, args.b, args.set)
