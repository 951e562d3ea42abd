"""Searching an index with a CDV model: passages ranked by mean sentence score, free-boundary spans, evidence
sentences for any result, and `explain` — the score curves over one document (the CDV paper's Figure 4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from capr.cdv.spans import BoundaryConfig, Span, free_spans, grow_span, scaled
from capr.cdv.store import CDVStore, DocVectors
from capr.errors import QueryError
from capr.records import Passage, ScoredPassage
from capr.store import as_store

if TYPE_CHECKING:
    from capr.search.evidence import SentenceScore
    from capr.store.protocol import Store

MAX_EVIDENCE = 3


def _query(store: CDVStore, entity: str | None, aspect: str | None):
    if not ((entity and entity.strip()) or (aspect and aspect.strip())):
        raise QueryError("CDV ranks ⟨entity, aspect⟩ questions: give --entity and/or --aspect")
    return store.query(entity, aspect)


def cdv_search(index: "Store", store: CDVStore, entity: str | None, aspect: str | None, k: int = 10,
               filters: dict[str, Any] | None = None) -> list[ScoredPassage]:
    """The k passages of ``index`` (a Store) CDV scores best among those passing ``filters``."""
    if k <= 0:
        raise QueryError(f"k must be positive, got {k}")
    qe, qa = _query(store, entity, aspect)
    scores = store.passage_scores(qe, qa)
    index = as_store(index)
    keys = index.keys_of(store.pids)
    flt = index.compile_filter(filters)
    if flt is not None:
        scores = np.where(index.passing(flt, keys), scores, -np.inf)
    order = [int(i) for i in np.argsort(-scores, kind="stable")[:k] if np.isfinite(scores[i])]
    passages = index.passages(keys[order])
    return [ScoredPassage(pid=store.pids[i], score=float(scores[i]), rank=r + 1, passage=p)
            for r, (i, p) in enumerate(zip(order, passages))]


@dataclass
class SpanHit:
    rank: int
    doc_id: str
    title: str
    start: int  # document offsets
    end: int
    score: float
    text: str
    sentences: list[dict[str, Any]] = field(default_factory=list)
    pids: list[str] = field(default_factory=list)  # the index passages the span touches

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "doc_id": self.doc_id, "title": self.title, "start": self.start, "end": self.end,
                "score": round(self.score, 4), "text": self.text, "passages": self.pids, "sentences": self.sentences}


def free_search(index: "Store", store: CDVStore, entity: str | None, aspect: str | None, k: int = 10,
                config: BoundaryConfig | None = None, filters: dict[str, Any] | None = None) -> list[SpanHit]:
    """Answers with free boundaries: CDV ranks passages, and around each top passage's best sentence a span grows
    over the neighbouring sentences that still score high (θ_close), within or beyond the passage. Spans keep
    their passage's rank; a span overlapping a better one of the same document is skipped."""
    config = config or BoundaryConfig()
    qe, qa = _query(store, entity, aspect)
    index = as_store(index)
    hits: list[SpanHit] = []
    taken: dict[str, list[tuple[int, int]]] = {}
    doc_scores: dict[str, dict[str, np.ndarray]] = {}
    for hit in cdv_search(index, store, entity, aspect, k=max(3 * k, k + 10), filters=filters):
        doc_id, j = store.pid_doc[hit.pid]
        dv = store.docs[doc_id]
        if doc_id not in doc_scores:  # several top passages often share a document
            doc_scores[doc_id] = dv.scores(qe, qa)
        s = doc_scores[doc_id]
        rows = np.flatnonzero(dv.passage_of == j)
        span = grow_span(s["combined"], int(rows[np.argmax(s["combined"][rows])]), config)
        if any(span.first < e and b < span.end for b, e in taken.get(doc_id, [])):
            continue
        taken.setdefault(doc_id, []).append((span.first, span.end))
        h = span_hit(index, dv, span, s, len(hits) + 1)
        h.score = hit.score
        hits.append(h)
        if len(hits) == k:
            break
    return hits


def span_hit(index: "Store", dv: DocVectors, span: Span, s: dict[str, np.ndarray], rank: int = 1) -> SpanHit:
    doc = index.document(dv.doc_id)
    a, b = int(dv.sent_start[span.first]), int(dv.sent_end[span.end - 1])
    sents = [{"start": int(dv.sent_start[i]), "end": int(dv.sent_end[i]),
              "score": round(float(s["combined"][i]), 4)} for i in range(span.first, span.end)]
    pids = list(dict.fromkeys(dv.pids[int(j)] for j in dv.passage_of[span.first : span.end]))
    return SpanHit(rank, dv.doc_id, doc.title, a, b, span.score, doc.text[a:b], sents, pids)


def evidence_sentences(store: CDVStore, passage: Passage, qvecs: tuple[np.ndarray | None, np.ndarray | None],
                       config: BoundaryConfig | None = None) -> list["SentenceScore"]:
    """The passage's sentences with their CDV scores; evidence = the best (up to 3) that reach θ_open, scaled
    within the document so that a passage's evidence is judged in its document's context."""
    from capr.search.evidence import SentenceScore

    config = config or BoundaryConfig()
    loc = store.pid_doc.get(passage.pid)
    if loc is None:
        return []
    dv = store.docs[loc[0]]
    s = dv.scores(*qvecs)["combined"]
    rel = scaled(s) if config.relative else s
    rows = np.flatnonzero(dv.passage_of == loc[1])
    text_of = lambda a, b: passage.text[a - passage.start : b - passage.start]  # noqa: E731
    out = [SentenceScore(text_of(int(dv.sent_start[i]), int(dv.sent_end[i])), int(dv.sent_start[i]),
                         int(dv.sent_end[i]), round(float(s[i]), 4)) for i in rows]
    for i in sorted(range(len(rows)), key=lambda j: -rel[rows[j]])[:MAX_EVIDENCE]:
        if rel[rows[i]] >= config.open:
            out[i].evidence = True
    return out


# --------------------------------------------------------------------------- explain
@dataclass
class Explanation:
    doc_id: str
    title: str
    entity: str | None
    aspect: str | None
    sentences: list[tuple[int, int, str]]  # document offsets and text
    curves: dict[str, list[float]]  # entity / aspect / combined: one point per sentence
    passages: list[tuple[int, int, str, str]]  # first sentence, end sentence, pid, aspect of each index passage
    best: SpanHit | None
    focus_pid: str | None = None
    plot_points: dict[str, int] = field(default_factory=dict)  # points of each curve actually drawn

    def to_dict(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "title": self.title, "entity": self.entity, "aspect": self.aspect,
                "sentences": [{"start": a, "end": b, "text": t, **{k: round(v[i], 4) for k, v in self.curves.items()}}
                              for i, (a, b, t) in enumerate(self.sentences)],
                "passages": [{"first": f, "end": e, "pid": p, "aspect": asp} for f, e, p, asp in self.passages],
                "best_span": self.best.to_dict() if self.best else None}


def explain(index: "Store", store: CDVStore, doc_or_pid: str, entity: str | None, aspect: str | None,
            config: BoundaryConfig | None = None, plot: str | Path | None = None) -> Explanation:
    config = config or BoundaryConfig()
    focus = None
    index = as_store(index)
    if index.has_document(doc_or_pid):
        doc_id = doc_or_pid
    elif index.has_passage(doc_or_pid):
        focus = doc_or_pid
        doc_id = index.passage_by_pid(doc_or_pid).doc_id
    else:
        raise QueryError(f"no document or passage with id {doc_or_pid!r}")
    dv = store.docs.get(doc_id)
    if dv is None or len(dv.sent_start) == 0:
        raise QueryError(f"document {doc_id!r} has no sentences to explain")
    qe, qa = _query(store, entity, aspect)
    s = dv.scores(qe, qa)
    doc = index.document(doc_id)
    sentences = [(int(a), int(b), doc.text[int(a) : int(b)]) for a, b in zip(dv.sent_start, dv.sent_end)]
    passages = []
    for j, pid in enumerate(dv.pids):
        rows = np.flatnonzero(dv.passage_of == j)
        if len(rows):
            passages.append((int(rows[0]), int(rows[-1]) + 1, pid, index.passage_by_pid(pid).aspect or ""))
    spans = free_spans(s["combined"], config)
    best = max(spans, key=lambda sp: sp.score) if spans else None
    ex = Explanation(doc_id, doc.title, entity, aspect, sentences, {k: [float(x) for x in v] for k, v in s.items()},
                     passages, span_hit(index, dv, best, s) if best else None, focus)
    if plot:
        ex.plot_points = plot_explanation(ex, best, Path(plot))
    return ex


def plot_explanation(ex: Explanation, best: Span | None, path: Path) -> dict[str, int]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(ex.sentences)
    x = np.arange(1, n + 1)
    fig, ax = plt.subplots(figsize=(max(6.0, min(16.0, 0.25 * n + 4)), 4.2))
    style = {"entity": ("tab:blue", 1.2, "entity"), "aspect": ("tab:orange", 1.2, "aspect"),
             "combined": ("black", 2.2, "entity ⊕ aspect")}
    for key, (color, width, label) in style.items():
        if key in ex.curves:
            ax.plot(x, ex.curves[key], color=color, lw=width, marker="o", ms=2.5, label=label, gid=key)
    if best is not None:
        ax.axvspan(best.first + 0.5, best.end + 0.5, color="tab:green", alpha=0.18, label="best free span")
    for first, end, pid, asp in ex.passages:
        ax.axvline(first + 0.5, color="grey", lw=0.6, ls=":")
        if pid == ex.focus_pid:
            ax.axvspan(first + 0.5, end + 0.5, color="grey", alpha=0.12, label=f"passage {pid}")
        ax.text((first + end) / 2 + 0.5, 1.02, asp[:18], transform=ax.get_xaxis_transform(), ha="center",
                va="bottom", fontsize=7, rotation=30 if len(ex.passages) > 6 else 0, color="dimgrey")
    q = " · ".join(t for t in (ex.entity, ex.aspect) if t)
    ax.set_title(f"{ex.title or ex.doc_id} — ⟨{q}⟩", fontsize=10, pad=22)
    ax.set_xlabel("sentence")
    ax.set_ylabel("cosine score")
    ax.set_xlim(0.5, n + 0.5)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    points = {line.get_gid(): len(line.get_xdata()) for line in ax.get_lines() if line.get_gid()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=130, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    tmp.replace(path)
    return points


__all__ = ["Explanation", "SpanHit", "cdv_search", "evidence_sentences", "explain", "free_search"]


class CdvRetriever:
    """CDV inside the one search pipeline: ``Searcher(store, cdv=CdvRetriever(cdv_store))`` ranks the first stage
    by discourse vectors and gives ``cdv`` evidence sentences; the pipeline never imports CDV itself."""

    def __init__(self, store: CDVStore) -> None:
        self.store = store

    def first_stage(self, index: "Store", pq: Any, k: int, filters: Any) -> list:
        return cdv_search(index, self.store, pq.entity, pq.query.aspect, k, filters)

    def evidence(self, pq: Any, passages: Sequence[Passage], thetas: tuple[float, float]) -> list:
        qv = self.store.query(pq.entity, pq.query.aspect)
        return [evidence_sentences(self.store, p, qv, BoundaryConfig(*thetas)) for p in passages]
