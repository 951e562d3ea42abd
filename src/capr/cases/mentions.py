"""Step 1 of the similar-case pipeline: the passages that mention a hypothesis.

A hypothesis is searched under a few surface forms: normalized (case, spacing, articles, trailing
punctuation), an abbreviation and its long form (from "Long form (ABBR)" in the option itself and from a
small table of common clinical abbreviations), hyphen/space and singular/plural variants. Candidates are
the rows holding every term of a variant (posting-list intersection), checked as a phrase. A passage whose every
mention denies the hypothesis ("pneumonia was ruled out", "no signs of meningitis"; ConText's rules, capr.text.negation)
describes a patient who does not have it, so it is no case for it."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

import numpy as np

from capr.errors import QueryError
from capr.text.negation import negations
from capr.records import Passage

if TYPE_CHECKING:
    from capr.index.index import Index

# Common clinical abbreviations in exam options and notes; both directions are searched. Kept small on
# purpose: an ambiguous abbreviation ("MS") would pull in passages about something else.
ABBREVIATIONS: dict[str, str] = {
    "mi": "myocardial infarction", "chf": "congestive heart failure", "copd": "chronic obstructive pulmonary disease",
    "ckd": "chronic kidney disease", "aki": "acute kidney injury", "dvt": "deep vein thrombosis",
    "pe": "pulmonary embolism", "uti": "urinary tract infection", "gerd": "gastroesophageal reflux disease",
    "sle": "systemic lupus erythematosus", "ra": "rheumatoid arthritis", "ibd": "inflammatory bowel disease",
    "ibs": "irritable bowel syndrome", "dka": "diabetic ketoacidosis", "ards": "acute respiratory distress syndrome",
    "tia": "transient ischemic attack", "cad": "coronary artery disease", "afib": "atrial fibrillation",
    "hiv": "human immunodeficiency virus", "aids": "acquired immunodeficiency syndrome", "tb": "tuberculosis",
    "ct": "computed tomography", "mri": "magnetic resonance imaging", "ecg": "electrocardiogram",
    "ekg": "electrocardiogram", "eeg": "electroencephalogram", "ssri": "selective serotonin reuptake inhibitor",
    "nsaid": "nonsteroidal anti-inflammatory drug", "ace inhibitor": "angiotensin-converting enzyme inhibitor",
    "bph": "benign prostatic hyperplasia", "pcos": "polycystic ovary syndrome", "adhd": "attention deficit hyperactivity disorder",
    "ptsd": "post-traumatic stress disorder", "ocd": "obsessive-compulsive disorder", "als": "amyotrophic lateral sclerosis",
    "hus": "hemolytic uremic syndrome", "ttp": "thrombotic thrombocytopenic purpura", "itp": "immune thrombocytopenic purpura",
    "dic": "disseminated intravascular coagulation", "sids": "sudden infant death syndrome", "csf": "cerebrospinal fluid",
}
_LONG_TO_SHORT = {v: k for k, v in ABBREVIATIONS.items()}
_ARTICLE_RE = re.compile(r"^(?:a|an|the)\s+", re.IGNORECASE)
_PAREN_RE = re.compile(r"^(.*?)\s*\(([^()]{2,40})\)\s*$")
_MAX_VARIANTS = 8


def normalize_hypothesis(text: str) -> str:
    t = " ".join(text.split()).strip().strip(".;:,")
    t = _ARTICLE_RE.sub("", t)
    return t.lower()


def _number_variants(phrase: str) -> list[str]:
    words = phrase.split()
    last = words[-1]
    if len(last) <= 3 or not last.isalpha():
        return []
    head = " ".join(words[:-1] + [""])
    if last.endswith("ies"):
        return [head + last[:-3] + "y"]
    if last.endswith(("ses", "xes", "ches", "shes")):
        return [head + last[:-2]]
    if last.endswith("s") and not last.endswith(("ss", "us", "is")):
        return [head + last[:-1]]
    if last.endswith("y") and last[-2] not in "aeiou":
        return [head + last[:-1] + "ies"]
    if last.endswith(("s", "x", "ch", "sh")):
        return [head + last + "es"]
    return [head + last + "s"]


def hypothesis_variants(hypothesis: str) -> list[str]:
    """Surface forms to search for, the normalized hypothesis first."""
    base = normalize_hypothesis(hypothesis)
    if not base:
        return []
    forms = [base]
    m = _PAREN_RE.match(base)
    if m:  # "chronic kidney disease (CKD)" → both parts; "(CKD)" alone is not a form
        forms += [m.group(1), m.group(2)]
    for f in list(forms):
        if f in ABBREVIATIONS:
            forms.append(ABBREVIATIONS[f])
        if f in _LONG_TO_SHORT:
            forms.append(_LONG_TO_SHORT[f])
    for f in list(forms):
        if "-" in f:
            forms += [f.replace("-", " "), f.replace("-", "")]
        forms += _number_variants(f)
    out = [f.strip() for f in dict.fromkeys(forms) if f.strip()]
    return out[:_MAX_VARIANTS]


def mention_regex(variants: Sequence[str]) -> re.Pattern[str]:
    """Any variant as a phrase: case-insensitive, any whitespace between words, whole words."""
    return _mention_regex(tuple(variants))


@lru_cache(maxsize=4096)  # a question's options are matched by step 1 and again when their denials are read
def _mention_regex(variants: tuple[str, ...]) -> re.Pattern[str]:
    alts = sorted({r"\s+".join(re.escape(w) for w in v.split()) for v in variants}, key=len, reverse=True)
    return re.compile(r"(?<!\w)(?:" + "|".join(alts) + r")(?!\w)", re.IGNORECASE)


def mention_stance(passage: Passage, pattern: re.Pattern[str]) -> bool | None:
    """Whether ``passage`` mentions what ``pattern`` (:func:`mention_regex`) finds: True when some mention is not
    negated in its sentence, False when every one is, None when there is no mention."""
    if not pattern.search(passage.text):
        return None
    denied = False
    for a, b in passage.sentences or [(passage.start, passage.end)]:
        sentence = passage.text[a - passage.start: b - passage.start]
        found = None
        for m in pattern.finditer(sentence):
            found = negations(sentence) if found is None else found
            if not any(n.negates(m.start(), m.end()) for n in found):
                return True
            denied = True
    # a mention that spans two sentences ("… of the heart. Failure …") is no sentence's to deny
    return not denied


def rows_with_all_terms(index: "Index", tokens: Sequence[str]) -> np.ndarray:
    """Rows whose passage holds every token (posting-list intersection, rarest term first)."""
    m = index.matrix
    if m is None or not tokens:
        return np.zeros(0, dtype=np.int64)
    ids = []
    for t in dict.fromkeys(tokens):
        tid = m.vocab.get(t)
        if tid is None:
            return np.zeros(0, dtype=np.int64)
        ids.append(tid)
    ids.sort(key=lambda tid: m.indptr[tid + 1] - m.indptr[tid])
    rows: np.ndarray | None = None
    for tid in ids:
        post = np.asarray(m.indices[m.indptr[tid] : m.indptr[tid + 1]], dtype=np.int64)
        rows = post if rows is None else np.intersect1d(rows, post, assume_unique=True)
        if not len(rows):
            break
    return rows if rows is not None else np.zeros(0, dtype=np.int64)


def candidate_rows(index: "Index", variants: Sequence[str], allowed: np.ndarray) -> np.ndarray:
    """Live, allowed rows holding all terms of at least one variant (phrase not yet checked)."""
    parts = [rows_with_all_terms(index, index.analyzer(v)) for v in variants]
    parts = [p for p in parts if len(p)]
    if not parts:
        return np.zeros(0, dtype=np.int64)
    rows = np.unique(np.concatenate(parts))
    return rows[allowed[rows]]


def check_distinct_hypotheses(hypotheses: Sequence[str]) -> None:
    """Refuses a hypothesis given twice, alike but for case or spacing ("Asthma", "asthma"): the mentions are found
    without regard to either, so both were ranked, tied on the same supports, one taking the rank below the other
    from a hypothesis that differs. Which spelling to keep is the caller's to say, so none is merged away."""
    first: dict[str, int] = {}
    for i, h in enumerate(hypotheses):
        key = " ".join(h.split()).casefold()
        if key in first:
            j = first[key]
            raise QueryError(f"hypotheses {j + 1} and {i + 1} ({hypotheses[j]!r}, {h!r}) are the same hypothesis "
                             "(they differ only in case or spacing); give each once", "hypotheses")
        first[key] = i


__all__ = ["ABBREVIATIONS", "candidate_rows", "check_distinct_hypotheses", "hypothesis_variants", "mention_regex",
           "mention_stance", "normalize_hypothesis", "rows_with_all_terms"]
