"""How well a passage holds a finding: the idf-weighted share of the finding's words the passage holds, the best
over the names the finding may be written as ("joint pain" or "arthralgia"). A share, not BM25: a profile that
names "orchitis" matches "orchitis" fully whatever its length, and a finding of six words is no heavier than one of
one word. Computed from the index's postings, segment by segment, for every row at once."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from capr.index.index import Index


SIDE_WORDS = ("right", "left", "both", "bilateral", "bilaterally", "unilateral", "side", "sides")


def term_rows(index: "Index", term: str) -> np.ndarray:
    """Rows (index-wide) whose passage holds ``term``, deleted rows included."""
    parts = []
    for si, seg in enumerate(index.segments):
        m = seg.matrix
        j = m.vocab.get(term)
        if j is not None:
            parts.append(np.asarray(m.indices[m.indptr[j]:m.indptr[j + 1]], dtype=np.int64) + int(index.offsets[si]))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class CoverageScorer:
    """``coverage(names)``: per row, the best idf-weighted share of one name's analysed words the row holds."""

    def __init__(self, index: "Index") -> None:
        self.index = index
        self._rows: dict[str, np.ndarray] = {}
        self._sides: set[str] | None = None

    def _side_terms(self) -> set[str]:
        """Analysed words of laterality ("right eye", "both hands"): where a profile rarely says which side."""
        if self._sides is None:
            self._sides = set(self.index.analyzer(" ".join(SIDE_WORDS)))
        return self._sides

    def rows_of(self, term: str) -> np.ndarray:
        rows = self._rows.get(term)
        if rows is None:
            if len(self._rows) > 20_000:
                self._rows.clear()
            rows = self._rows[term] = term_rows(self.index, term)
        return rows

    def name_terms(self, names: Sequence[str]) -> list[list[str]]:
        out, seen = [], set()
        for n in names:
            terms = list(dict.fromkeys(t for t in self.index.analyzer(n) if t not in self._side_terms()))
            key = tuple(sorted(terms))
            if terms and key not in seen:
                seen.add(key)
                out.append(terms)
        return out

    def coverage(self, names: Sequence[str]) -> np.ndarray:
        """Per row, the best share over ``names`` (the finding's own words first, then its other names)."""
        best = np.zeros(len(self.index), dtype=np.float32)
        for j, terms in enumerate(self.name_terms(names)):
            idf = self.index.term_idf(terms)
            total = float(sum(idf.get(t, 0.0) for t in terms))
            if total <= 0 or (j and len(idf) < len(terms)):
                # another name holding a word no passage has is not what this corpus calls the finding: its other
                # words alone would match in full ("swelling" of "scrotal swelling"; "53" of the brand "53-32c")
                continue
            acc = np.zeros(len(self.index), dtype=np.float32)
            for t in terms:
                if t in idf:
                    acc[self.rows_of(t)] += idf[t] / total
            np.maximum(best, acc, out=best)
        return best

    def informativeness(self, names: Sequence[str]) -> float:
        """The summed idf of the finding's most informative name (a finding of rare words says more)."""
        best = 0.0
        for terms in self.name_terms(names):
            best = max(best, float(sum(self.index.term_idf(terms).values())))
        return best


_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'])|\n+|\s+-\s+(?=[A-Z])")


def best_sentence(text: str, names: Sequence[str], analyze, idf: dict[str, float]) -> tuple[str, float]:
    """The sentence of ``text`` holding the largest idf-weighted share of one of ``names``' words, and that share."""
    forms = [set(analyze(n)) for n in names]
    forms = [f for f in forms if f]
    best, share = "", 0.0
    for s in _SENTENCE_RE.split(text):
        s = s.strip()
        if len(s) < 8:
            continue
        words = set(analyze(s))
        for f in forms:
            total = sum(idf.get(t, 1.0) for t in f)
            got = sum(idf.get(t, 1.0) for t in f & words) / total if total else 0.0
            if got > share + 1e-9:
                best, share = s, got
    return best, share


__all__ = ["SIDE_WORDS", "CoverageScorer", "best_sentence", "term_rows"]
