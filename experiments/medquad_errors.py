"""Where a medquad-cdv run's top-1 errors come from (issue 8): the wrong passage of the right document (wrong
aspect), a passage of another document with the right aspect (wrong entity), or neither; and R@1 per aspect.

    capr eval --benchmark medquad-cdv -r dense --model MODEL --run-out model.run
    .venv/bin/python -m experiments.medquad_errors model.run [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path

from experiments.common import DEFAULT_DATA


def main(run_path: str, data_dir: Path = DEFAULT_DATA) -> None:
    def records(name: str, key: str) -> dict[str, dict]:
        with gzip.open(Path(data_dir) / "medquad_cdv_test" / name, "rt", encoding="utf-8") as fh:
            return {r[key]: r for r in map(json.loads, fh)}

    qs, ps = records("queries.jsonl.gz", "qid"), records("passages.jsonl.gz", "pid")
    top = {}
    for line in open(run_path):
        q, _, p, r, *_ = line.split()
        if r == "1":
            top[q] = p
    by: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    kinds: collections.Counter = collections.Counter()
    for q, p in top.items():
        rec = qs[q]
        ok = p in rec["relevant_pids"]
        by[rec["aspect_heading"]][0] += ok
        by[rec["aspect_heading"]][1] += 1
        if not ok:
            g, t = ps[rec["relevant_pids"][0]], ps[p]
            kinds["same document, wrong aspect" if t["doc_id"] == g["doc_id"] else
                  ("same entity, other document" if t["entity"] == g["entity"] else
                   ("right aspect, wrong entity" if t["aspect"] == g["aspect"] else "wrong entity and aspect"))] += 1
    print(kinds)
    for a, (o, n) in sorted(by.items(), key=lambda x: -x[1][1]):
        print(f"{a:35s} {n:5d} {100*o/n:6.1f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a TREC run of medquad-cdv (capr eval --run-out)")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args()
    main(args.run, args.data_dir)
