"""How a search's ranking is shown: each hit with its query-term highlights, snippet and, when asked, scored
evidence sentences (:class:`Hit`, serialised one way: ``Hit.to_dict``), the result with what the user should know
(:class:`SearchResult`), one hit per document, and scores that fall with rank."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from capr.records import Passage, Retriever, ScoredPassage
from capr.search.config import Evidence, SearchOptions
from capr.search.highlight import snippet, term_spans
from capr.search.query import ParsedQuery
from capr.store.protocol import Store

if TYPE_CHECKING:
    from capr.search.evidence import SentenceScore

# Said (CLI, API) instead of "no matching passages" when a search finds nothing because nothing is left.
EMPTY_INDEX_MESSAGE = "the index is empty: all documents were deleted"


@dataclass
class Hit:
    """One ranked passage with its highlights (document offsets) and, when asked, scored sentences."""

    rank: int
    score: float
    passage: Passage
    highlights: list[tuple[int, int]] = field(default_factory=list)
    snippet: tuple[int, str, list[tuple[int, int]]] | None = None  # (offset in passage, text, highlights in it)
    sentences: list["SentenceScore"] | None = None

    @property
    def pid(self) -> str:
        return self.passage.pid

    def to_dict(self) -> dict[str, Any]:
        p = self.passage
        out = {"rank": self.rank, "pid": p.pid, "doc_id": p.doc_id, "title": p.title, "aspect": p.aspect,
               "heading": p.heading, "score": round(float(self.score), 4), "start": p.start, "end": p.end,
               "text": p.text, "highlights": [list(h) for h in self.highlights], "metadata": p.metadata}
        if self.snippet is not None:
            out["snippet_start"], out["snippet"], _ = self.snippet
        out["sentences"] = None if self.sentences is None else [s.to_dict() for s in self.sentences]
        return out


@dataclass
class SearchResult:
    query: ParsedQuery
    options: SearchOptions
    hits: list[Hit]
    retriever: str  # what ranked the first stage: a Retriever value, or "cdv"
    reranker: str | None = None
    evidence_method: str | None = None
    notices: list[str] = field(default_factory=list)  # what the user should know about these results

    def fusion_shown(self) -> dict[str, Any] | None:
        """How the hybrid first stage fused BM25 and dense for this query (the weights may be the question's own:
        capr.search.query_weights); None for any other first stage."""
        fusion = self.options.fusion
        if self.retriever != Retriever.hybrid.value or fusion is None:
            return None
        return {"method": fusion.method.value, "weights": {"bm25": fusion.weights[0], "dense": fusion.weights[-1]}}

    def to_dict(self) -> dict[str, Any]:
        q = self.query.query
        return {"query": {"text": q.text, "entity": q.entity, "aspect": q.aspect}, "retriever": self.retriever,
                "fusion": self.fusion_shown(), "reranker": self.reranker, "filters": _shown_filters(self.options.filters),
                "evidence_method": self.evidence_method, "notices": list(self.notices), "reading": self.reading(),
                "results": [h.to_dict() for h in self.hits]}

    def reading(self) -> list[dict[str, str]]:
        """What the question was read as (capr.search.reading): [{"text", "read_as", "kind"}], one per word read."""
        reading = self.query.reading
        return [w.to_dict() for w in reading.words] if reading is not None else []


def _shown_filters(filters: Any) -> Any:
    """Filters as given: a {field: value} dict as it is, clauses (capr.filters) as their text."""
    if not filters or isinstance(filters, dict):
        return filters or {}
    return [str(c) for c in filters]


def annotate(store: Store, pq: ParsedQuery, hits: list[Hit], synonym_forms: Sequence[list[str]] = ()) -> None:
    """Query-term highlights (document offsets) and the best snippet window of each hit; a passage that names the
    entity by a synonym has that synonym highlighted too."""
    analyzer = store.analyzer
    for h in hits:
        p = h.passage
        terms = set(pq.terms)
        if synonym_forms:
            words = set(analyzer(p.text))
            terms.update(*(form for form in synonym_forms if set(form) <= words))
        h.highlights = [(a + p.start, b + p.start) for a, b in term_spans(p.text, terms, analyzer)]
        snip = snippet(p.text, terms, analyzer)
        h.snippet = (snip.start, snip.text, [(a + snip.start + p.start, b + snip.start + p.start) for a, b in snip.highlights])


def add_evidence(store: Store, pq: ParsedQuery, hits: list[Hit], options: SearchOptions, cdv: Any = None,
                 forms: Sequence[Sequence[str]] | None = None) -> str:
    """Each hit's sentences scored by ``options.evidence`` (lexical, dense, or ``cdv``'s model), evidence marked;
    returns the method's name. ``forms``: the entity's names as analysed terms — a sentence that names it only to
    deny it is never evidence (default: the query entity's own name)."""
    from capr.search.evidence import dense_sentence_scores, lexical_sentence_scores

    method = options.evidence
    passages = [h.passage for h in hits]
    if method is Evidence.cdv:
        scored = cdv.evidence(pq, passages, options.thetas)
    elif method is Evidence.dense:
        scored = dense_sentence_scores(store, pq, passages, options.template, forms) if passages else []
    else:
        scored = [lexical_sentence_scores(store, pq, p, forms=forms) for p in passages]
    for h, s in zip(hits, scored):
        h.sentences = list(s)
    return method.value


def scores_falling_with_rank(hits: Sequence[Hit | ScoredPassage]) -> None:
    """Make each score at most the one ranked above it, keeping the order. A ranking built in parts (the entity's
    tiers, each ranked on its own; the re-ranked head before the first stage's tail) can score a lower part's best
    above a higher part's last; a client that sorts by score (trec_eval reads a run file so) would then undo the
    ranking. Each such part, with all below it, is scaled down (or, at scores <= 0, shifted down) to fit under the
    hit above it: order within it, and every rank, stay as they were."""
    for i in range(1, len(hits)):
        above, here = hits[i - 1].score, hits[i].score
        if here <= above:
            continue
        if above > 0:
            factor = above / here * _BELOW
            for h in hits[i:]:
                h.score *= factor
        else:
            drop = here - above + (1 - _BELOW) * max(abs(above), abs(here))
            for h in hits[i:]:
                h.score -= drop


_BELOW = 0.999  # a part moved under the hit above it ends this much below it


def best_per_document(ranked: list[ScoredPassage], k: int) -> list[ScoredPassage]:
    """One hit per document, its best-ranked passage, in rank order: a document scores as its best passage."""
    out: list[ScoredPassage] = []
    seen: set[str] = set()
    for h in ranked:
        if h.passage.doc_id in seen:
            continue
        seen.add(h.passage.doc_id)
        out.append(ScoredPassage(pid=h.pid, score=h.score, rank=len(out) + 1, passage=h.passage))
        if len(out) >= k:
            break
    return out


__all__ = ["EMPTY_INDEX_MESSAGE", "Hit", "SearchResult", "add_evidence", "annotate", "best_per_document",
           "scores_falling_with_rank"]
