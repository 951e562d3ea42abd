"""The issue-5 ablation table from `capr eval ... --run-out FILE.jsonl` outcome files: accuracy, AP over all
(question, option) pairs, coverage, and accuracy on the questions whose options are all found in the corpus.

    .venv/bin/python -m experiments.cases_table runs/ev/medqa-dev.bm25.jsonl runs/ev/medqa-dev.dense.jsonl ...
"""
from __future__ import annotations

import argparse
from pathlib import Path

from capr.cases.bench import read_outcomes, summarize

COLUMNS = ("accuracy", "AP", "coverage", "correct_found", "all_found_accuracy")


def main(paths: list[str]) -> None:
    print("| run | questions | " + " | ".join(COLUMNS) + " | all-found questions |")
    print("|---|---:|" + "---:|" * len(COLUMNS) + "---:|")
    for p in paths:
        m = summarize(read_outcomes(p))
        cells = " | ".join(f"{m[c]:.2f}" for c in COLUMNS)
        print(f"| {Path(p).name.removesuffix('.jsonl')} | {m['questions']} | {cells} | {m['all_found_questions']} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="outcome files (capr eval --run-out FILE.jsonl)")
    main(ap.parse_args().runs)
