"""The differential on exam vignettes that ask for the most likely diagnosis (issue 54): open R@1/5/10 of the right
diagnosis among `capr cases similar`'s likely diagnoses, and four-option accuracy (each option scored by how well its
profile matches the findings: capr.cases.differential.Differential.option_scores), with a paired randomisation test
against a saved run (--compare).

Dev sets (never a test split):
- medqa-dx: MedQA-USMLE dev questions whose last sentence asks for the most likely diagnosis (capr.cases.diagnosis_eval);
- headqa-dx: HEAD-QA medicine train + dev questions that ask for a diagnosis;
- medmcqa-dx: MedMCQA dev questions that ask for a diagnosis (each question's own explanation excluded).

    OMP_NUM_THREADS=1 python -m experiments.cases_diagnoses_dev --index cases-idx --sets medqa-dx \\
        --out runs/dx.json [--compare runs/dx-before.json] [--rescore before-lists.json]

--rescore FILE: instead of running, score saved lists ({set: [{"qid", "answer", "pairs": [[name, code], …],
"chosen", "correct"}]}, e.g. what the commit before the differential listed and chose) with this checkout's answer
matching, so that both sides of a comparison are matched alike."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np

from capr.cases.data import MCQuestion, read_headqa, read_medmcqa, read_medqa
from capr.cases.diagnosis_eval import AnswerMatcher, accuracy, diagnosis_vignettes, evaluate_vignettes, open_recall
from capr.cases.differential import DifferentialConfig
from capr.cases.similar import CaseFinder
from capr.eval.significance import paired_randomisation_p
from capr.index import Index

_ASKS = re.compile(r"(most (likely|probable)|likely|probable|your)\s+(\w+\s+)?diagnosis|diagnosis (is|would be)",
                   re.IGNORECASE)


def _last_sentence_cut(q: MCQuestion) -> MCQuestion | None:
    """HEAD-QA and MedMCQA phrase the question many ways: a question whose last sentence asks for the diagnosis,
    without that sentence."""
    text = q.description.strip()
    parts = re.split(r"(?<=[.?!:])\s+", text)
    last = parts[-1] if parts else ""
    if not _ASKS.search(last) or len(parts) < 2:
        return None
    return MCQuestion(q.qid, " ".join(parts[:-1]), q.options, q.answer, q.source, q.exclude_docs)


def load(data_dir: str, name: str) -> list[MCQuestion]:
    if name == "medqa-dx":
        return diagnosis_vignettes(read_medqa(data_dir))
    if name == "headqa-dx":
        qs = read_headqa(data_dir, "train", "medicine") + read_headqa(data_dir, "dev", "medicine")
    elif name == "medmcqa-dx":
        qs = read_medmcqa(data_dir)
    else:
        raise SystemExit(f"unknown set {name}")
    return [c for c in map(_last_sentence_cut, qs) if c is not None]


def run(finder: CaseFinder, qs: list[MCQuestion]) -> list[dict]:
    matcher = AnswerMatcher(finder.differential().table)

    def listed(q: MCQuestion):
        res = finder.similar(q.description, k=5, evidence=0, exclude_docs=q.exclude_docs, diagnoses=10)
        return [(d.name, d.code) for d in res.diagnoses]

    def scores(q: MCQuestion) -> list[float]:
        return finder.option_scores(q.description, q.options, exclude_docs=q.exclude_docs)

    outcomes = evaluate_vignettes(qs, listed, scores, matcher)
    return [{"qid": o.qid, "answer": o.answer, "rank": o.rank, "mappable": o.mappable, "correct": o.credit,
             "listed": o.listed} for o in outcomes]


def rescore(finder: CaseFinder, saved: list[dict]) -> list[dict]:
    matcher = AnswerMatcher(finder.differential().table)
    out = []
    for r in saved:
        pairs = [(n, c) for n, c in r["pairs"]]
        out.append({"qid": r["qid"], "answer": r["answer"], "rank": matcher.rank_of(r["answer"], pairs),
                    "mappable": matcher.mappable(r["answer"]), "correct": r["correct"], "listed": [n for n, _ in pairs]})
    return out


def summary(rows: list[dict]) -> dict:
    class O:  # the outcome fields the metrics read
        def __init__(self, r: dict) -> None:
            self.rank, self.credit = r["rank"], float(r["correct"])

    outs = [O(r) for r in rows]
    return {"n": len(rows), "R@1": open_recall(outs, 1), "R@5": open_recall(outs, 5), "R@10": open_recall(outs, 10),
            "four-option": accuracy(outs), "unmappable": sum(not r["mappable"] for r in rows)}


def paired(a: list[dict], b: list[dict]) -> dict:
    by = {r["qid"]: r for r in b}
    common = [r for r in a if r["qid"] in by]
    out = {}
    for name, f in (("R@10", lambda r: float(r["rank"] is not None and r["rank"] <= 10)),
                    ("four-option", lambda r: float(r["correct"]))):
        x = np.array([f(r) for r in common])
        y = np.array([f(by[r["qid"]]) for r in common])
        out[name] = paired_randomisation_p(x, y)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--sets", default="medqa-dx,headqa-dx,medmcqa-dx")
    ap.add_argument("--rescore")
    ap.add_argument("--out")
    ap.add_argument("--compare")
    ap.add_argument("--show", type=int, default=0, help="print the first N vignettes' lists")
    ap.add_argument("--configs", default="{}", help="DifferentialConfig settings as JSON objects separated by ';' "
                    "(each run in turn; the last one's rows are saved)")
    args = ap.parse_args()
    finder = CaseFinder(Index.load(args.index))
    result: dict[str, list[dict]] = {}
    saved = json.loads(Path(args.rescore).read_text()) if args.rescore else None
    sets = {name: load(args.data_dir, name) for name in args.sets.split(",")}
    for spec in args.configs.split(";"):
        finder.differential().config = DifferentialConfig(**json.loads(spec))
        for name, qs in sets.items():
            t0 = time.time()
            result[name] = rescore(finder, saved[name]) if saved is not None else run(finder, qs)
            s = summary(result[name])
            print(f"{spec} {name}: {json.dumps({k: round(v, 1) for k, v in s.items()})} ({time.time() - t0:.0f} s)",
                  flush=True)
            for r in result[name][: args.show]:
                print(f"  {r['answer']!r} rank {r['rank']} correct {r['correct']}: {r['listed'][:10]}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        for name, rows in result.items():
            if name in before:
                print(f"{name} vs {args.compare}: before {json.dumps({k: round(v, 1) for k, v in summary(before[name]).items()})}"
                      f" p {json.dumps({k: round(v, 4) for k, v in paired(rows, before[name]).items()})}")


if __name__ == "__main__":
    main()
