"""Dev check for reading an aspect the corpus has no section for as its nearest corpus aspect
(capr.search.query.nearest_aspect), without any benchmark query: the synonym table itself is the dev set.

Every multi-word synonym of a canonical aspect is held out in turn (removed from the table), the corpus is taken to
hold the canonical aspects of one family (clinical-note sections, or health-article aspects), and the held-out
phrase must resolve to its own aspect. Reported per threshold: right, wrong (a wrong section gets the prior: worse
than none) and unresolved (no prior: as before).

    .venv/bin/python -m experiments.aspect_resolution_dev
"""

from __future__ import annotations

import argparse

import capr.search.query as query_mod
from capr.corpus import aspects as aspects_mod
from capr.text.analyzer import Analyzer, AnalyzerConfig

HEALTH = ["information", "symptoms", "causes", "treatment", "prevention", "exams and tests", "outlook", "inheritance",
          "frequency", "genetic changes", "research", "susceptibility", "considerations", "stages", "complications"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--thresholds", default="0.25,0.34,0.5,0.67,1.0")
    args = ap.parse_args()
    analyzer = Analyzer(AnalyzerConfig())
    table = {a: list(s) for a, s in aspects_mod.ASPECT_SYNONYMS.items()}
    clinical = [a for a in table if a not in HEALTH] + ["complications"]
    cases = [(fam, a, s) for fam, members in (("clinical", clinical), ("health", HEALTH)) for a in members
             for s in table[a] if len(s.split()) > 1]
    print(f"{len(cases)} held-out multi-word synonyms ({sum(f == 'clinical' for f, _, _ in cases)} clinical, "
          f"{sum(f == 'health' for f, _, _ in cases)} health)\n")
    print("| min Jaccard | right | wrong | unresolved |")
    print("|---:|---:|---:|---:|")
    wrong_examples: dict[float, list[str]] = {}
    for t in (float(x) for x in args.thresholds.split(",")):
        right = wrong = none = 0
        for fam, aspect, held in cases:
            members = clinical if fam == "clinical" else HEALTH
            reduced = {a: [s for s in syns if s != held] for a, syns in table.items()}
            lookup = {}
            for a, syns in reduced.items():
                lookup[a] = a
                for s in syns:
                    lookup.setdefault(s, a)
            old_syn, old_lookup = aspects_mod.ASPECT_SYNONYMS, aspects_mod._LOOKUP
            aspects_mod.ASPECT_SYNONYMS, aspects_mod._LOOKUP = reduced, lookup
            query_mod.ASPECT_SYNONYMS = reduced
            try:
                got = query_mod.nearest_aspect(held, {a: 100 for a in members if a != held}, analyzer, t)
            finally:
                aspects_mod.ASPECT_SYNONYMS, aspects_mod._LOOKUP = old_syn, old_lookup
                query_mod.ASPECT_SYNONYMS = old_syn
            if got is None:
                none += 1
            elif got == aspect:
                right += 1
            else:
                wrong += 1
                wrong_examples.setdefault(t, []).append(f"{held!r} → {got!r} (is {aspect!r})")
        print(f"| {t:g} | {right} | {wrong} | {none} |")
    for t, ex in wrong_examples.items():
        print(f"\nwrong at {t:g}: " + "; ".join(ex))


if __name__ == "__main__":
    main()
