"""Dev check for the aspect read from a question's wording (capr.text.aspects.infer_aspect): the questions of
MedQuAD's *training* documents (the medquad-cdv test documents left out), each labelled with its question type.
Prints how often the inferred aspect is right, wrong (the prior then favours another section) or missing (no prior).

    .venv/bin/python -m experiments.infer_aspect_dev --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from capr.corpus import read_documents
from capr.text.aspects import infer_aspect
from capr.labels.splits import exclude_test_documents, medquad_test_exclusion


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default="../shared/data")
    args = ap.parse_args()
    data = Path(args.data_dir)
    docs = exclude_test_documents(read_documents(data / "medquad" / "MedQuAD.tar.gz"), medquad_test_exclusion(data))
    tot, right, wrong, missing = (collections.Counter() for _ in range(4))
    for d in docs:
        for s in d.sections:  # a MedQuAD section: heading = the question, aspect = its question type
            got = infer_aspect(s.heading)
            tot[s.aspect] += 1
            right[s.aspect] += got == s.aspect
            wrong[s.aspect] += got is not None and got != s.aspect
            missing[s.aspect] += got is None
    n = sum(tot.values())
    print(f"{n} questions of MedQuAD training documents\n")
    print("| question type | questions | right % | wrong % | no aspect % |")
    print("|---|---:|---:|---:|---:|")
    for a, k in tot.most_common():
        print(f"| {a} | {k} | {100 * right[a] / k:.1f} | {100 * wrong[a] / k:.1f} | {100 * missing[a] / k:.1f} |")
    print(f"| **all** | {n} | {100 * sum(right.values()) / n:.1f} | {100 * sum(wrong.values()) / n:.1f} | "
          f"{100 * sum(missing.values()) / n:.1f} |")


if __name__ == "__main__":
    main()
