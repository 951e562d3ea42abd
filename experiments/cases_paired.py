"""Paired comparison of two scorers on the same multiple-choice questions (issue 5): accuracy of each, how many
questions each side gets more credit on, a two-sided paired randomization test on the per-question credit
differences (20,000 sign flips, seed 0) and a 95 % paired bootstrap interval of the accuracy difference (10,000
resamples, seed 0), and each scorer against chance (one-sided exact binomial test). Ties count with their expected credit (1/t when the answer shares the top score with t-1
others), as in `capr eval` — which is why this is not a sign test: a scorer that ties everything earns 0.25 per
question, and counting those as "wins" would make a difference look significant that is not.

    capr eval --benchmark medqa-dev --index IDX -r bm25 --run-out a.jsonl
    capr eval --benchmark medqa-dev --index IDX --reranker cross:MODEL --dense-k 5 --run-out b.jsonl
    .venv/bin/python -m experiments.cases_paired a.jsonl b.jsonl
"""
from __future__ import annotations

import argparse
import random
import sys

import numpy as np

from capr.cases.bench import read_outcomes
from capr.eval.significance import paired_randomisation_p


def load(path: str) -> dict[str, float]:
    return {o.qid: o.credit for o in read_outcomes(path)}


def above_chance(path: str) -> str:
    """One-sided exact binomial test of the questions answered (expected credit, rounded) against chance (1/options,
    the mean over the questions)."""
    from scipy.stats import binomtest

    outcomes = list(read_outcomes(path))
    chance = float(np.mean([1 / len(o.scores) for o in outcomes]))
    k = round(sum(o.credit for o in outcomes))
    p = binomtest(k, len(outcomes), chance, alternative="greater").pvalue
    return f"{path}: {k} of {len(outcomes)} ({100 * k / len(outcomes):.2f}) vs chance {100 * chance:.1f}: p={p:.2g}"


def main(a_path: str, b_path: str) -> None:
    a, b = load(a_path), load(b_path)
    if set(a) != set(b):
        sys.exit(f"the two files hold different questions ({len(set(a) ^ set(b))} differ); run both on the same set")
    qs = sorted(a)
    diff = [b[q] - a[q] for q in qs]
    wins, losses = sum(d > 1e-9 for d in diff), sum(d < -1e-9 for d in diff)
    rng = random.Random(0)
    boots = sorted(sum(diff[rng.randrange(len(diff))] for _ in diff) / len(diff) for _ in range(10_000))
    lo, hi = boots[249], boots[9_749]
    acc_a, acc_b = 100 * sum(a.values()) / len(a), 100 * sum(b.values()) / len(b)
    print(f"{len(qs)} questions: accuracy {acc_a:.2f} -> {acc_b:.2f} ({acc_b - acc_a:+.2f}; 95% CI "
          f"{100 * lo:+.2f} .. {100 * hi:+.2f}); more/less credit {wins}/{losses}; paired randomization "
          f"p={paired_randomisation_p(np.asarray(diff), np.zeros(len(diff)), rounds=20_000):.3f}")
    for path in (a_path, b_path):
        print(above_chance(path))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="the baseline's outcome file (capr eval --run-out)")
    ap.add_argument("b", help="the other scorer's outcome file")
    args = ap.parse_args()
    main(args.a, args.b)
