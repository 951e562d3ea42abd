"""Multiple-choice evaluation of the similar-case pipeline: accuracy (argmax option) and the paper's ranking
view, average precision over all (question, option) pairs ranked by score."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from capr.cases.data import MCQA_PREFIX, MCQuestion, QuestionSet, load_questions, read_mcqa_file, subsample
from capr.cases.pipeline import CasePipeline
from capr.errors import CaprError, QueryError
from capr.rank_metrics import average_precision_by_score as average_precision  # ties ranked against the scorer


class CaseBenchmark(str, Enum):
    medqa_dev = "medqa-dev"  # the fixed held-out part of MedQA-USMLE dev (never trained or tuned on)
    headqa = "headqa"  # HEAD-QA English test
    medmcqa_dev = "medmcqa-dev"  # the fixed held-out part of MedMCQA dev; each question's own explanation is excluded
    headqa_dev = "headqa-dev"  # HEAD-QA English dev: for choosing settings, never trained on


BENCHMARK_QUESTIONS = {
    CaseBenchmark.medqa_dev: QuestionSet.medqa_heldout,
    CaseBenchmark.headqa: QuestionSet.headqa_test,
    CaseBenchmark.medmcqa_dev: QuestionSet.medmcqa_heldout,
    CaseBenchmark.headqa_dev: QuestionSet.headqa_dev,
}


def is_case_benchmark(name: str) -> bool:
    """A named multiple-choice benchmark, or ``mcqa:PATH`` (any MedQA- or MedMCQA-style question file)."""
    return name in {b.value for b in CaseBenchmark} or name.startswith(MCQA_PREFIX)


def benchmark_questions(data_dir: str | Path, benchmark: CaseBenchmark | str, limit: int | None = None,
                        seed: int = 0) -> list[MCQuestion]:
    if limit is not None and limit < 1:  # 0 scored no question as a table of zeros; a negative one was a traceback
        raise CaprError(f"--limit must be at least 1 (questions), got {limit}")
    if isinstance(benchmark, str) and benchmark.startswith(MCQA_PREFIX):
        return subsample(read_mcqa_file(benchmark[len(MCQA_PREFIX):]), limit, seed)
    return subsample(load_questions(data_dir, BENCHMARK_QUESTIONS[CaseBenchmark(benchmark)]), limit, seed)


@dataclass
class QuestionOutcome:
    qid: str
    scores: list[float]  # per option, in option order
    answer: int
    found: list[bool]
    supports: list[str | None] | None = None  # per option, the pid of its supporting case (None: C_H = H)

    @property
    def credit(self) -> float:
        """1 if the correct option alone scores best; 1/t when it ties with t-1 others (random tie-break)."""
        s = np.asarray(self.scores)
        top = s.max()
        if s[self.answer] < top:
            return 0.0
        return 1.0 / int((s == top).sum())


def summarize(outcomes: Sequence[QuestionOutcome]) -> dict[str, float]:
    """Accuracy, AP over all (question, option) pairs, coverage, and accuracy on the questions whose options
    are all mentioned in the corpus (where the method is not falling back to an option's own text)."""
    flat_s = [s for o in outcomes for s in o.scores]
    flat_y = [i == o.answer for o in outcomes for i in range(len(o.scores))]
    n_opt = sum(len(o.scores) for o in outcomes)
    covered = [o for o in outcomes if all(o.found)]
    return {
        "accuracy": 100 * float(np.mean([o.credit for o in outcomes])) if outcomes else 0.0,
        "AP": 100 * average_precision(flat_s, flat_y) if outcomes else 0.0,
        "coverage": 100 * sum(sum(o.found) for o in outcomes) / max(1, n_opt),
        "correct_found": 100 * float(np.mean([o.found[o.answer] for o in outcomes])) if outcomes else 0.0,
        "chance": 100 * float(np.mean([1 / len(o.scores) for o in outcomes])) if outcomes else 0.0,
        "questions": len(outcomes),
        "all_found_questions": len(covered),
        "all_found_accuracy": 100 * float(np.mean([o.credit for o in covered])) if covered else 0.0,
    }


def read_outcomes(path: str | Path) -> list[QuestionOutcome]:
    """The file :func:`write_outcomes` wrote."""
    with open(path, encoding="utf-8") as fh:
        return [QuestionOutcome(r["qid"], r["scores"], r["answer"], r["found"], r.get("supports"))
                for r in map(json.loads, fh) if r]


def outcome_of(q: MCQuestion, ranked: Iterable[tuple[str, float, bool, str | None]]) -> QuestionOutcome:
    """A question's outcome from its hypotheses as a ranker returns them, best first: (hypothesis, score, found,
    supporting pid). Ties keep the input order, so each is mapped back to its option's position (options may
    repeat)."""
    pos: dict[str, list[int]] = {}
    for i, o in enumerate(q.options):
        pos.setdefault(o, []).append(i)
    scores = [0.0] * len(q.options)
    found = [False] * len(q.options)
    supports: list[str | None] = [None] * len(q.options)
    for hypothesis, score, was_found, pid in ranked:
        i = pos[hypothesis].pop(0)
        scores[i], found[i], supports[i] = float(score), was_found, pid
    return QuestionOutcome(q.qid, scores, q.answer, found, supports)


def evaluate_cases(pipe: CasePipeline, questions: Iterable[MCQuestion],
                   progress: Callable[[Iterable], Iterable] | None = None) -> tuple[dict[str, float], list[QuestionOutcome]]:
    questions = list(questions)
    t0 = time.time()
    outcomes: list[QuestionOutcome] = []
    unreadable = 0
    for q in (progress(questions) if progress else questions):
        try:
            res = pipe.rank(q.description, q.options, exclude_docs=q.exclude_docs, allow_repeats=True)
        except QueryError:
            # a question this scorer cannot read (only stopwords, for BM25): its options tie, chance credit, as a
            # guess would get; one such question among thousands must not end the evaluation, and the count is said
            unreadable += 1
            outcomes.append(outcome_of(q, ((o, 0.0, False, None) for o in q.options)))
            continue
        outcomes.append(outcome_of(q, ((h.hypothesis, h.score, h.found, h.passage.pid if h.passage is not None else None)
                                       for h in res.hypotheses)))
    metrics = summarize(outcomes)
    if unreadable:
        metrics["unreadable"] = unreadable
    metrics["seconds"] = round(time.time() - t0, 1)
    return metrics, outcomes


def write_outcomes(path: str | Path, outcomes: Iterable[QuestionOutcome]) -> None:
    """One JSON line per question (scores, answer, found, supporting pids), written atomically: the input
    of paired comparisons between scorers (experiments/cases_paired.py)."""
    from capr.index.atomic import write_bytes

    # scores at full precision: rounding would create ties that change the credit read back
    lines = [json.dumps({"qid": o.qid, "scores": [float(x) for x in o.scores], "answer": o.answer,
                         "found": o.found, "supports": o.supports, "credit": o.credit}) for o in outcomes]
    write_bytes(Path(path), ("\n".join(lines) + "\n").encode())


__all__ = ["BENCHMARK_QUESTIONS", "CaseBenchmark", "is_case_benchmark", "QuestionOutcome", "average_precision", "benchmark_questions",
           "evaluate_cases", "outcome_of", "read_outcomes", "summarize", "write_outcomes"]
