"""SPBERTQA sentence selection: when a passage is longer than a cross-encoder reads, it keeps the sentences BM25
ranks highest for the query (in document order) rather than the passage's first tokens. The trainer selects with
the training corpus' statistics; the re-ranker with those of the candidates it is given."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from capr.text import bm25
from capr.text.analyzer import Analyzer
from capr.text.bm25 import BM25Params


class SentenceSelector:
    def __init__(self, analyzer: Analyzer, df: Counter, n_docs: int, params: BM25Params | None = None) -> None:
        self.analyzer, self.df, self.n, self.params = analyzer, df, max(n_docs, 1), params or BM25Params()

    def idf(self, term: str) -> float:
        return bm25.idf(self.n, self.df.get(term, 0))

    def select(self, query: str, text: str, sentences: Sequence[tuple[int, int]], budget_words: int) -> str:
        words = text.split()
        if len(words) <= budget_words or len(sentences) < 2:
            return text
        q = set(self.analyzer(query))
        sents = [text[s:e] for s, e in sentences]
        toks = [self.analyzer(s) for s in sents]
        avg = sum(map(len, toks)) / max(1, len(toks))
        scores = []
        for i, t in enumerate(toks):
            tf = Counter(t)
            norm = bm25.length_norm(len(t), max(avg, 1e-9), self.params)
            s = sum(bm25.term_score(self.idf(w), tf[w], norm) for w in q if w in tf)
            scores.append((s, -i))
        keep, used = set(), 0
        for s, neg_i in sorted(scores, reverse=True):
            n = len(sents[-neg_i].split())
            if used + n > budget_words and keep:
                continue
            keep.add(-neg_i)
            used += n
        return " ".join(sents[i] for i in sorted(keep))


__all__ = ["SentenceSelector"]
