"""Paired comparison of two rankings of the MEDIQA 2019 validation set (issue 8): per-question AP, how many
questions each side wins, and a two-sided paired randomization test (20,000 sign flips, seed 0).

    capr eval --benchmark mediqa2019 --query-field question -r dense --model minilm --run-out a.run
    capr eval --benchmark mediqa2019 --query-field question -r dense --model MODEL --run-out b.run
    .venv/bin/python -m experiments.mediqa_paired a.run b.run [mediqa2019-train]   (the set: default mediqa2019)
"""

from __future__ import annotations

import argparse
import collections
import random

from capr.corpus.mediqa import read_task3, task3_path
from experiments.common import DEFAULT_DATA, read_trec_run


def main(a_path: str, b_path: str, set_name: str = "mediqa2019") -> None:
    rel: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for ans in read_task3(task3_path(DEFAULT_DATA, set_name)):
        rel[ans.qid][ans.aid] = int(ans.relevant)

    def ap(run: dict[str, list[str]]) -> dict[str, float]:
        out = {}
        for qid, ranked in run.items():
            r = rel[qid]
            nrel = sum(r.values())
            hits = 0
            s = 0.0
            for i, p in enumerate(ranked, 1):
                if r.get(p):
                    hits += 1
                    s += hits / i
            out[qid] = s / nrel if nrel else 0
        return out

    a, b = ap(read_trec_run(a_path)), ap(read_trec_run(b_path))
    qs = sorted(a)
    diff = [b[q] - a[q] for q in qs]
    obs = sum(diff) / len(diff)
    rng = random.Random(0)
    n = 20000
    cnt = 0
    for _ in range(n):
        s = sum(d if rng.random() < .5 else -d for d in diff) / len(diff)
        cnt += abs(s) >= abs(obs) - 1e-12
    print(f"MAP {100*sum(a.values())/len(a):.2f} -> {100*sum(b.values())/len(b):.2f}; diff {100*obs:+.2f}; "
          f"questions better/worse/equal {sum(d>1e-9 for d in diff)}/{sum(d<-1e-9 for d in diff)}/"
          f"{sum(abs(d)<=1e-9 for d in diff)}; paired randomization p={cnt/n:.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="the baseline's TREC run")
    ap.add_argument("b", help="the other TREC run")
    ap.add_argument("set", nargs="?", default="mediqa2019", help="mediqa2019 or mediqa2019-train")
    args = ap.parse_args()
    main(args.a, args.b, args.set)
