"""Does the default `capr index` + `capr search` answer ⟨entity, aspect⟩ about the entity asked? (issue 16)

Indexes MTSamples with `capr index`'s defaults (unless --index names an existing one), then asks 60 pairs
(10 common MTSamples entities × 6 common note aspects, top 3 each) with `capr search`'s defaults and counts, over
the 180 results: the share whose passage mentions the entity (every analysed term of it), whose passage or document
title does, and whose section is the asked aspect. Printed side by side: the default pipeline, and the same
pipeline without entity-first ranking (what `capr search` did before issue 16).

    python -m experiments.entity_aspect_bench --data-dir ../shared/data [--index idx/mts]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ENTITIES = ["diabetes", "hypertension", "asthma", "COPD", "pneumonia", "atrial fibrillation",
            "coronary artery disease", "congestive heart failure", "depression", "cholecystitis"]
ASPECTS = ["medications", "history of present illness", "past medical history", "physical examination",
           "assessment", "plan"]
K = 3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    ap.add_argument("--index", type=Path, default=None, help="An MTSamples index built by `capr index` (default: build one).")
    args = ap.parse_args()
    from capr.text.aspects import normalize_aspect
    from capr.index import load_index
    from capr.records import Query
    from capr.search import EntityScope, SearchOptions, Searcher

    index_dir = args.index
    if index_dir is None or not index_dir.exists():
        index_dir = index_dir or Path(tempfile.mkdtemp()) / "mts"
        src = args.data_dir / "mtsamples" / "mtsamples.csv.gz"
        subprocess.run([sys.executable, "-m", "capr", "index", str(src), "--out", str(index_dir)], check=True)
    index = load_index(index_dir)
    searcher = Searcher(index)
    an = index.analyzer
    rows = []
    variants = [("default", SearchOptions(k=K)),
                ("entity in passage, then its document (scope passage)", SearchOptions(k=K, entity_scope=EntityScope.passage)),
                ("entity in passage or its document (scope document)", SearchOptions(k=K, entity_scope=EntityScope.document)),
                ("without entity-first ranking", SearchOptions(k=K, entity_first=False)),
                ("bm25, without entity-first ranking (the default before issue 16)",
                 SearchOptions(k=K, retriever="bm25", entity_first=False, aspect_boost=0.5))]
    print(f"default retriever on this index: {searcher.default_retriever().value}")
    for name, opts in variants:
        n = in_passage = in_passage_or_title = in_aspect = 0
        for entity in ENTITIES:
            terms = set(an(entity))
            for aspect in ASPECTS:
                for h in searcher.search(Query("b", entity=entity, aspect=aspect), opts).hits:
                    p = h.passage
                    n += 1
                    in_passage += terms <= set(an(p.text))
                    in_passage_or_title += terms <= set(an(f"{p.title} {p.text}"))
                    in_aspect += p.aspect == normalize_aspect(aspect)
        rows.append((name, n, 100 * in_passage / n, 100 * in_passage_or_title / n, 100 * in_aspect / n))
    print(f"MTSamples index {index_dir}: {index.counts['documents']} documents, {index.counts['passages']} passages; "
          f"{len(ENTITIES)} entities × {len(ASPECTS)} aspects, top {K}")
    print("| pipeline | results | entity in passage % | entity in passage or title % | from the asked aspect % |")
    print("|---|---:|---:|---:|---:|")
    for name, n, a, b, c in rows:
        print(f"| {name} | {n} | {a:.1f} | {b:.1f} | {c:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
