"""Measuring the differential on exam vignettes: the questions that ask for the most likely diagnosis, answered open
(is the right diagnosis among the first k likely diagnoses? R@1/5/10) and with the exam's options (four-option
accuracy: each option scored by how well its profile matches the findings).

The vignettes: multiple-choice questions whose last sentence asks "Which of the following is / What is the most
likely diagnosis (in / for this patient)?"; the description is the question without that sentence.

Answer matching: an answer ("Primary Sjogren’s syndrome", "Crohn's disease", "Kawasaki disease") is the same
diagnosis as a listed one when their names are one key (capr.cases.profiles.normalize_name: case, possessives,
accents and British spellings aside), when one is an alias of the other's profile entity, when both are the same
ICD-10-CM code, or when the answer's name without a qualifier that does not change the disease ("primary",
"acute", "malignant", …) is, or a name's head before " of " ("Basal cell carcinoma of skin") is. An answer that maps to no entity of the profiles and to no ICD-10-CM name can never be
found: :meth:`AnswerMatcher.mappable` counts them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from capr.cases.data import MCQuestion
from capr.cases.icd10 import lookup_forms
from capr.cases.profiles import ProfileTable, icd10_code, normalize_name, short_keys

DIAGNOSIS_QUESTION_RE = re.compile(
    r"(?:which of the following is|what is) the most likely diagnosis(?: (?:in|for) this patient)?\?\s*$", re.IGNORECASE)


def is_diagnosis_question(question: str) -> bool:
    return bool(DIAGNOSIS_QUESTION_RE.search(question.strip().rstrip('"').strip()))


def without_question(question: str) -> str:
    """The vignette: the question without its last sentence (the one that asks for the diagnosis)."""
    q = question.strip().rstrip('"').strip()
    m = DIAGNOSIS_QUESTION_RE.search(q)
    return q[: m.start()].rstrip() if m else q


def diagnosis_vignettes(questions: Iterable[MCQuestion]) -> list[MCQuestion]:
    """The questions that ask for the most likely diagnosis, each without that last sentence."""
    out = []
    for q in questions:
        if is_diagnosis_question(q.description):
            out.append(MCQuestion(q.qid, without_question(q.description), [o.strip().strip('"').strip() for o in q.options],
                                  q.answer, q.source, q.exclude_docs))
    return out


@dataclass(slots=True)
class AnswerMatcher:
    """Whether a listed diagnosis (name, code) is an exam's answer; see the module docstring."""

    table: ProfileTable | None = None
    _cache: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)

    def keys(self, name: str) -> tuple[set[str], set[str]]:
        """(the name keys, the ICD-10-CM codes) a name stands for: its own, its short forms', its entity's aliases."""
        got = self._cache.get(name)
        if got is not None:
            return got
        keys: set[str] = set()
        for k in short_keys(normalize_name(name)):
            keys.add(k)
            if self.table is not None:
                i = self.table.find(k)
                if i is not None:
                    e = self.table.entities[i]
                    keys |= {normalize_name(a) for a in [e.name, *e.aliases]}
        codes = {c for c in (icd10_code(k) for k in keys) if c}
        if self.table is not None:
            for k in list(keys):
                i = self.table.find(k)
                if i is not None and self.table.entities[i].code:
                    codes.add(self.table.entities[i].code)
        self._cache[name] = got = (keys, codes)
        return got

    def same(self, answer: str, name: str, code: str | None = None) -> bool:
        """Whether a listed diagnosis is the answer (the listed name's head before " of " counts: a listed "Basal
        cell carcinoma of skin" is the answer "Basal cell carcinoma", not the other way round)."""
        a_keys, a_codes = self.keys(answer)
        n_keys, n_codes = self.keys(name)
        n_keys = n_keys | {normalize_name(f) for f in lookup_forms(name)}
        if code:
            n_codes = n_codes | {code.upper()}
        return bool(a_keys & n_keys) or bool(a_codes & n_codes)

    def mappable(self, answer: str) -> bool:
        """Whether the answer names a profile entity or an ICD-10-CM code: something a differential can list."""
        keys, codes = self.keys(answer)
        return bool(codes) or (self.table is not None and any(self.table.find(k) is not None for k in keys))

    def rank_of(self, answer: str, listed: Sequence[tuple[str, str | None]]) -> int | None:
        """The 1-based rank of the answer among (name, code) pairs, None when absent."""
        return next((r for r, (n, c) in enumerate(listed, 1) if self.same(answer, n, c)), None)


@dataclass(slots=True)
class VignetteOutcome:
    qid: str
    answer: str
    rank: int | None  # of the answer among the likely diagnoses (open)
    mappable: bool
    credit: float  # four-option: 1 when the answer scores best alone, 1/n when n options tie for best, else 0
    listed: list[str] = field(default_factory=list)

    @property
    def correct(self) -> float:
        return self.credit


def option_credit(scores: Sequence[float], answer: int) -> float:
    """1/n when the answer is among the n options tied for the best score, else 0 (ties: a guess's expected credit)."""
    best = max(scores)
    tied = [i for i, s in enumerate(scores) if s >= best - 1e-9]
    return 1.0 / len(tied) if answer in tied else 0.0


def open_recall(outcomes: Sequence[VignetteOutcome], k: int) -> float:
    return 100.0 * sum(o.rank is not None and o.rank <= k for o in outcomes) / max(1, len(outcomes))


def accuracy(outcomes: Sequence[VignetteOutcome]) -> float:
    return 100.0 * sum(o.credit for o in outcomes) / max(1, len(outcomes))


def evaluate_vignettes(questions: Sequence[MCQuestion], listed: Callable[[MCQuestion], list[tuple[str, str | None]]],
                       option_scores: Callable[[MCQuestion], Sequence[float]],
                       matcher: AnswerMatcher) -> list[VignetteOutcome]:
    """Each vignette's outcome: where its answer is among ``listed(q)`` (the likely diagnoses as (name, code)) and
    the credit of ``option_scores(q)`` (a score per option)."""
    out = []
    for q in questions:
        answer = q.options[q.answer]
        got = listed(q)
        out.append(VignetteOutcome(q.qid, answer, matcher.rank_of(answer, got), matcher.mappable(answer),
                                   option_credit(list(option_scores(q)), q.answer), [n for n, _ in got]))
    return out


__all__ = ["AnswerMatcher", "DIAGNOSIS_QUESTION_RE", "VignetteOutcome", "accuracy", "diagnosis_vignettes",
           "evaluate_vignettes", "is_diagnosis_question", "open_recall", "option_credit", "without_question"]
