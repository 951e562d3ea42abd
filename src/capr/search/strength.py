"""How strong each first-stage retriever is on *this* index, measured without a single label (issue 53): inverse-cloze
pseudo-questions (Lee et al. 2019, "Latent Retrieval for Weakly Supervised Open Domain Question Answering", ICT).

A few hundred passages are drawn with a fixed seed; from each, one sentence of at least ``MIN_WORDS`` words (in text
written without sentence ends, one window of ``WINDOW_WORDS`` words) is taken out and asked as a question, and the
passage *without that sentence* is the one answer. Every other passage keeps the score the index gives it; the answer is scored on its masked text (BM25 with the index's IDF and parameters, its
length against the index's mean length estimated from the passages read; dense: the masked text encoded as the index
encodes passages), so no retriever finds it by the sentence itself. Each retriever's MRR@10 over these questions,
and that of their reciprocal-rank fusion at each BM25 share of ``SHARES`` (the lists and arithmetic of
:func:`capr.search.fusion.fuse`, each ``FusionConfig.depth`` deep), say how far each one finds a passage from words
that are not its own — on the user's own corpus, with the index's own encoder.

What it cannot see: how the user's questions are worded. A cloze sentence shares the passage's rare words (drug and
disease names), which favours BM25 over what a consumer's paraphrase does. On the seven free-text dev sets
(docs/RESULTS.md, issue 53) it tells the encoders apart — the static encoder loses to BM25 on every index, MiniLM wins
on six of seven — and within one index its MRR by share follows the questions' nDCG@10 by share (Spearman +0.43 to
+1.00), but across indexes of one encoder it does not say which wants more BM25 (+0.14 with MiniLM).
:func:`probe_fusion` (BM25 alone where dense loses, else the default) is what ``SearchOptions.fusion_probe`` runs;
:func:`probe_share` (the share whose fusion found most answers) was measured and is kept for experiments.

    strength = measure_strength(store)        # None when the index is too small or has no vectors
    strength.bm25, strength.dense             # MRR@10 of each on the index's own cloze questions
    probe_fusion(strength)                    # BM25 alone where dense loses, else None (the caller's fusion)
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from capr.corpus.passages import index_text
from capr.records import Passage, Query, Retriever
from capr.search.first_stage import lexical_retriever
from capr.search.fusion import FusionConfig, FusionMethod, fuse
from capr.search.query import ParsedQuery, parse_query
from capr.store.protocol import Capability, Store
from capr.text import bm25

PROBE_QUESTIONS = 200  # cloze questions drawn per index
PROBE_SEED = 0
MIN_SENTENCES = 3  # a passage with fewer keeps too little once a sentence is out
MIN_WORDS = 6  # a shorter sentence (a heading, "See below.") asks nothing
WINDOW_WORDS = 20  # a passage written without sentence ends (NFCorpus' stop-word-free text) is cut into such windows
MIN_PROBES = 20  # fewer cloze questions than this: no measure (a tiny index, or one of single sentences)
READ_PER_QUESTION = 50  # passages read at most per question asked (an index of one-line passages is not read whole)
CUTOFF = 10  # MRR@10
# BM25's share in the reciprocal-rank fusion (dense has the rest): 0 is dense alone, 1 BM25 alone
SHARES = (0.0, 0.1, 0.2, 1 / 3, 0.5, 2 / 3, 1.0)
PROBE_TOLERANCE = 0.0  # probe_share's default (docs/RESULTS.md, issue 53: each tolerance measured)


@dataclass(frozen=True)
class ClozeQuestion:
    row: int  # the passage it was taken from: its one answer
    question: str  # the sentence taken out
    answer_text: str  # the passage's index text without that sentence (what BM25 reads)
    answer_dense_text: str  # ... and what the encoder reads for it


@dataclass(frozen=True)
class Strength:
    """MRR@10 of the cloze questions: by BM25's share in the fusion (0: dense alone, 1: BM25 alone)."""

    questions: int
    by_share: dict[float, float]
    seed: int = PROBE_SEED
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def bm25(self) -> float:
        return self.by_share[1.0]

    @property
    def dense(self) -> float:
        return self.by_share[0.0]

    def to_dict(self) -> dict[str, Any]:
        return {"questions": self.questions, "seed": self.seed, "mrr@10": {"bm25": round(self.bm25, 4),
                "dense": round(self.dense, 4), **{f"rrf {s:.3g}": round(v, 4) for s, v in self.by_share.items()}},
                **self.extra}


def probe_share(strength: Strength, tolerance: float = PROBE_TOLERANCE) -> float:
    """BM25's share in the fusion, from the index's cloze measure: the most dense-leaning share (lowest) whose MRR@10
    is within ``tolerance`` (relative) of the best share's. ``tolerance`` 0 is the probe's own best; above 0 it leans
    to dense where the probe cannot tell the shares apart, since a cloze sentence favours BM25 (module docstring)."""
    top = max(strength.by_share.values())
    return min(s for s, v in strength.by_share.items() if v >= top * (1.0 - tolerance) - 1e-12)


def probe_fusion(strength: Strength | None, fallback: FusionConfig | None = None) -> FusionConfig | None:
    """The fusion the index's cloze measure asks for: BM25 alone (RRF with dense's share 0) where the encoder finds
    fewer answers than BM25 on the index's own cloze questions — its list would only add noise to the fusion —
    else ``fallback`` (None: the caller's own, capr's dev-chosen default). Without a measure: ``fallback``."""
    if strength is None or strength.dense >= strength.bm25:
        return fallback
    return FusionConfig(FusionMethod.rrf, weights=(1.0, 0.0))


def _words(text: str) -> int:
    return len(text.split())


def _windows(text: str) -> list[tuple[int, int]]:
    """``WINDOW_WORDS``-word spans of a text that has no sentence ends (a last shorter one joins the one before)."""
    words = [m.span() for m in re.finditer(r"\S+", text)]
    cuts = list(range(0, len(words), WINDOW_WORDS))
    if len(cuts) > 1 and len(words) - cuts[-1] < WINDOW_WORDS // 2:
        cuts.pop()
    return [(words[c][0], words[min(c + WINDOW_WORDS, len(words)) - 1 if i + 1 < len(cuts) else len(words) - 1][1])
            for i, c in enumerate(cuts)]


def cloze_questions(store: Store, n: int = PROBE_QUESTIONS, seed: int = PROBE_SEED,
                    dense_text: Any = None) -> tuple[list[ClozeQuestion], float]:
    """Up to ``n`` cloze questions from the store's live passages, drawn in a fixed order from ``seed`` (at most
    ``READ_PER_QUESTION`` × n passages read); and the mean analysed length of the index texts of every passage read
    (BM25's average passage length, estimated).
    ``dense_text(passage, index_text)``: what the encoder reads for a passage (default: the index text)."""
    rng = np.random.default_rng(seed)
    rows = np.arange(store.row_count(), dtype=np.int64)
    rows = rows[store.passing(None, rows)]
    order = rng.permutation(rows)[: n * READ_PER_QUESTION]
    include_title = store.includes_titles()
    analyzer = store.analyzer
    out: list[ClozeQuestion] = []
    lengths: list[int] = []
    for lo in range(0, len(order), 256):
        keys = order[lo: lo + 256]
        for row, p in zip(keys.tolist(), store.passages(keys)):
            lengths.append(len(analyzer(index_text(p.title, p.text, include_title))))
            spans = [(a - p.start, b - p.start) for a, b in p.sentences]
            if len(spans) < MIN_SENTENCES and not any(c in p.text for c in ".?!"):
                spans = _windows(p.text)
            if len(spans) < MIN_SENTENCES:
                continue
            asked = [(a, b) for a, b in spans if _words(p.text[a:b]) >= MIN_WORDS]
            if not asked:
                continue
            a, b = asked[int(rng.integers(len(asked)))]
            rest = f"{p.text[:a].rstrip()} {p.text[b:].lstrip()}".strip()
            masked: Passage = replace(p, text=rest, end=p.start + len(rest), sentences=None)
            text = index_text(p.title, rest, include_title)
            out.append(ClozeQuestion(row, p.text[a:b], text, dense_text(masked, text) if dense_text else text))
            if len(out) >= n:
                return out, float(np.mean(lengths))
    return out, float(np.mean(lengths)) if lengths else 1.0


def _bm25_of_text(store: Store, pq: ParsedQuery, text: str, avgdl: float) -> float:
    """The BM25 score the index would give a passage of ``text`` (its IDF and parameters, length against ``avgdl``)."""
    tokens = store.analyzer(text)
    idf = store.term_idf(set(pq.terms))
    norm = bm25.length_norm(len(tokens), avgdl, store.bm25_params)
    tf: dict[str, int] = {}
    for t in tokens:
        if t in idf:
            tf[t] = tf.get(t, 0) + 1
    return float(sum(bm25.term_score(idf[t], tf[t], norm) for t in pq.terms if t in tf))


def _with_answer(ranked: tuple[np.ndarray, np.ndarray], row: int, score: float, depth: int,
                 positive: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A retriever's list with the answer scored on its masked text instead of its own: the others' top ``depth``,
    the answer placed among them by its score (after equal scores of lower rows, as :func:`fuse` ranks ties);
    ``positive``: a score of 0 is no match (BM25), and leaves the answer out."""
    rows, scores = ranked
    keep = rows != row
    rows, scores = rows[keep][:depth], np.asarray(scores, dtype=np.float64)[keep][:depth]
    if score > 0 or not positive:
        rows, scores = np.append(rows, row), np.append(scores, score)
    order = np.lexsort((rows, -scores))[:depth]
    return rows[order], scores[order]


def _reciprocal_rank(fused: tuple[np.ndarray, np.ndarray], row: int) -> float:
    rows, scores = fused
    at = np.flatnonzero(rows == row)
    if not len(at) or scores[at[0]] <= 0:
        return 0.0
    s = scores[at[0]]
    rank = 1 + int(np.count_nonzero(scores > s)) + int(np.count_nonzero((scores == s) & (rows < row)))
    return 1.0 / rank if rank <= CUTOFF else 0.0


def measure_strength(store: Store, n: int = PROBE_QUESTIONS, seed: int = PROBE_SEED,
                     shares: Sequence[float] = SHARES) -> Strength | None:
    """MRR@10 of ``n`` cloze questions on ``store`` by BM25's share in the fusion (module docstring), with the store's
    own encoder; None when the store cannot score every passage exactly, has no vectors, or yields fewer than
    ``MIN_PROBES`` questions."""
    if not {Capability.dense, Capability.bm25, Capability.exhaustive} <= store.capabilities:
        return None
    encoder = store.encoder()
    questions, avgdl = cloze_questions(store, n, seed, getattr(encoder, "passage_text", None))
    if len(questions) < MIN_PROBES:
        return None
    depth = FusionConfig().depth
    parsed = [parse_query(Query(f"cloze{i}", text=q.question), store.analyzer, expand=False)
              for i, q in enumerate(questions)]
    qvecs = encoder.encode_queries([pq.dense_text() for pq in parsed])
    avecs = encoder.encode_passages([q.answer_dense_text for q in questions])
    lexical = lexical_retriever(store, Retriever.bm25)
    rr = {s: [] for s in shares}
    for q, pq, qv, av in zip(questions, parsed, qvecs, avecs):
        b = _with_answer(lexical.top(pq, depth + 1), q.row, _bm25_of_text(store, pq, q.answer_text, avgdl), depth)
        d = _with_answer(store.dense_top(qv, depth + 1, None), q.row, float(np.dot(qv, av)), depth, positive=False)
        for s in shares:
            rr[s].append(_reciprocal_rank(fuse([b, d], FusionConfig(FusionMethod.rrf, weights=(s, 1.0 - s))), q.row))
    return Strength(len(questions), {s: float(np.mean(v)) for s, v in rr.items()}, seed,
                    {"avgdl": round(avgdl, 1), "passages": int(store.live_count())})


_PROBED: dict[str, FusionConfig | None] = {}
_PROBING = threading.Lock()


def probed_fusion(store: Store) -> FusionConfig | None:
    """:func:`probe_fusion` of this store's :func:`measure_strength`, measured once per index generation and encoder
    in a process (a service's first such question pays for it: a few hundred queries and passages encoded); None
    where the store cannot be measured or the probe leaves the fusion to the caller."""
    if not {Capability.dense, Capability.bm25, Capability.exhaustive} <= store.capabilities:
        return None
    key = json.dumps([store.name, store.generation_info(), store.dense_manifest().get("model")], sort_keys=True,
                     default=str)
    with _PROBING:
        if key not in _PROBED:
            _PROBED[key] = probe_fusion(measure_strength(store))
        return _PROBED[key]


__all__ = ["CUTOFF", "ClozeQuestion", "MIN_PROBES", "PROBE_QUESTIONS", "PROBE_SEED", "SHARES", "Strength",
           "cloze_questions", "measure_strength", "probe_fusion", "probe_share", "probed_fusion"]
