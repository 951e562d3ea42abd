"""Side by side: the metrics of two `capr eval --json` logs (JSON lines), row by row, and whether each row is
identical to the last digit. Usage: python -m experiments.compare_runs BEFORE.jsonl AFTER.jsonl"""

from __future__ import annotations

import argparse
import json
import sys


def rows(path: str) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8") if line.startswith("{")]


def label(r: dict) -> str:
    return " ".join(str(x) for x in (r["benchmark"], r.get("protocol", ""), r.get("query_field", ""), r["retriever"],
                                     r.get("index_backend", "embedded")))


def main(before: str, after: str) -> int:
    a, b = {label(r): r for r in rows(before)}, {label(r): r for r in rows(after)}
    keys = list(dict.fromkeys([*a, *b]))
    metrics = ["R@1", "R@5", "R@10", "MAP", "MRR@10", "nDCG@10"]
    print("| benchmark protocol field retriever backend | " + " | ".join(metrics) + " | identical |")
    print("|---|" + "---|" * (len(metrics) + 1))
    same_all = True
    for k in keys:
        ma, mb = (a.get(k) or {}).get("metrics"), (b.get(k) or {}).get("metrics")
        same = ma is not None and ma == mb
        same_all &= same
        cells = [f"{ma.get(m, '—') if ma else '—'} / {mb.get(m, '—') if mb else '—'}" if not same else str(ma.get(m, "—"))
                 for m in metrics]
        print(f"| {k} | " + " | ".join(cells) + f" | {'yes' if same else 'NO'} |")
    return 0 if same_all else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("before", help="a `capr eval --json` log")
    ap.add_argument("after", help="the same commands' log on the other code")
    args = ap.parse_args()
    sys.exit(main(args.before, args.after))
