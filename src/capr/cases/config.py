"""Settings and result records of the similar-case pipeline (Alghanmi, Espinosa-Anke, Schockaert, SIGIR'22)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from capr.errors import QueryError
from capr.records import Passage


class CaseScorer(str, Enum):
    """What scores (description, passage) pairs in step 3.

    bm25: the lexical score of step 1 (no model); dense: the cosine of step 2; cross: a cross-encoder over
    the dense top-k (the paper's method); profile: no step 1-3 — each option (a diagnosis) scored by how well its
    disease profile and the passages naming it match the description's findings (capr.cases.differential)."""

    bm25 = "bm25"
    dense = "dense"
    cross = "cross"
    profile = "profile"


class MentionMatch(str, Enum):
    """What counts as a passage mentioning a hypothesis in step 1.

    phrase: one of its surface forms as a phrase (the paper's string match); words: every content word of a
    surface form somewhere in the passage (finds multi-word options such as "inhibition of cell wall synthesis"
    that are rarely written verbatim)."""

    phrase = "phrase"
    words = "words"


class Fallback(str, Enum):
    """How a hypothesis that no passage mentions is scored.

    text: against its own text (C_H = H, the paper's; nothing to show as evidence); related: on the passages that
    hold all its words anywhere, else on the passages closest to its words (BM25 of the hypothesis, then ordered by
    the description as in step 1) — scored by the same stages, so its score comes with a passage to read."""

    text = "text"
    related = "related"


@dataclass(slots=True)
class CaseConfig:
    scorer: CaseScorer = CaseScorer.cross
    cross_model: str | None = None  # a folder written by `capr train cases` (or any CrossEncoder folder)
    lexical_k: int = 1000  # step 1: passages mentioning H, best BM25 for the description first
    max_checked: int = 3000  # phrase checks per hypothesis (candidates hold every term, nearly all pass)
    dense_k: int = 50  # step 2: kept by cosine to the description (the bm25 scorer keeps its best by BM25)
    cross_k: int = 50  # step 3: of those, scored by the cross-encoder (lower on CPU to trade accuracy for time)
    cross_batch_size: int = 32
    match: MentionMatch = MentionMatch.phrase
    fallback: Fallback = Fallback.text
    related_k: int = 50  # fallback related: passages closest to the hypothesis' words

    def __post_init__(self) -> None:
        self.scorer = CaseScorer(self.scorer)
        try:
            self.fallback = Fallback(self.fallback)
        except ValueError:
            raise QueryError(f"unknown fallback {self.fallback!r}; choose text or related") from None
        try:
            self.match = MentionMatch(self.match)
        except ValueError:
            raise QueryError(f"unknown mention match {self.match!r}; choose phrase or words") from None
        for name in ("lexical_k", "max_checked", "dense_k", "cross_k", "related_k"):
            if getattr(self, name) < 1:
                raise QueryError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.scorer is CaseScorer.cross and not self.cross_model:
            raise QueryError("the cross scorer needs a cross-encoder model folder (cross_model / --model)")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["scorer"] = self.scorer.value
        d["match"] = self.match.value
        d["fallback"] = self.fallback.value
        return d


def case_config(has_dense: bool, cross_model: str | None = None, **settings: Any) -> CaseConfig:
    """The similar-case pipeline as capr runs it unless told otherwise — `capr cases`, `capr eval` on the
    multiple-choice benchmarks and `POST /cases` all start here: the cross-encoder when one is given,
    else the dense scorer on an index with vectors, else BM25; an option no passage mentions is scored on the passages
    closest to its words, so its score comes with evidence and a notice (``Fallback.related``). ``settings``: any
    :class:`CaseConfig` field; None keeps the default."""
    scorer = CaseScorer.cross if cross_model else CaseScorer.dense if has_dense else CaseScorer.bm25
    chosen: dict[str, Any] = {"scorer": scorer, "cross_model": cross_model, "fallback": Fallback.related}
    chosen.update({k: v for k, v in settings.items() if v is not None})
    return CaseConfig(**chosen)


@dataclass(slots=True)
class Support:
    """One candidate case for a hypothesis, with the score of each stage it reached."""

    row: int
    passage: Passage
    bm25: float
    dense: float | None = None
    cross: float | None = None


@dataclass(slots=True)
class HypothesisResult:
    hypothesis: str
    score: float
    rank: int = 0
    found: bool = False  # some passage mentions the hypothesis; if not, C_H is the hypothesis itself
    passage: Passage | None = None  # C_H, the supporting case
    candidates: int = 0  # passages that mention the hypothesis (capped at lexical_k)
    denied: int = 0  # passages that mention it only to deny it ("pneumonia was ruled out"): no support
    variants: list[str] = field(default_factory=list)  # the surface forms searched
    supports: list[Support] = field(default_factory=list)  # what step 3 saw, best first (for --explain)
    fallback: str | None = None  # not mentioned: what it was scored on instead ("words", "related"; None: its text)

    @property
    def notice(self) -> str | None:
        """What a reader should know about this score: said when no passage mentions the hypothesis."""
        if self.found:
            return None
        if self.denied:
            one = self.denied == 1
            unmentioned = f"{self.denied} passage{'' if one else 's'} mention{'s' if one else ''} it, only to deny it"
        else:
            unmentioned = "no passage mentions it" + (" as a phrase" if self.fallback == "words" else "")
        if self.fallback == "words":
            return f"{unmentioned}: scored on passages that hold all its words"
        if self.fallback == "related":
            return f"{unmentioned}: scored on the passages closest to its words"
        return f"{unmentioned}: scored on its own text"

    @property
    def support_text(self) -> str:
        return self.passage.text if self.passage is not None else self.hypothesis

    def to_dict(self, explain: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "hypothesis": self.hypothesis, "rank": self.rank, "score": round(float(self.score), 4),
            "found": self.found, "candidates": self.candidates, "notice": self.notice,
            "support": None if self.passage is None else {
                "pid": self.passage.pid, "doc_id": self.passage.doc_id, "title": self.passage.title,
                "aspect": self.passage.aspect, "text": self.passage.text,
            },
        }
        if explain:
            d["variants"] = self.variants
            d["supports"] = [{"pid": s.passage.pid, "bm25": round(s.bm25, 4),
                              "dense": None if s.dense is None else round(s.dense, 4),
                              "cross": None if s.cross is None else round(s.cross, 4)} for s in self.supports]
        return d


@dataclass(slots=True)
class CaseResult:
    description: str
    hypotheses: list[HypothesisResult]  # ranked, best first
    scorer: str

    @property
    def answer(self) -> HypothesisResult:
        return self.hypotheses[0]

    def to_dict(self, explain: bool = False) -> dict[str, Any]:
        return {"scorer": self.scorer, "answer": self.answer.hypothesis,
                "hypotheses": [h.to_dict(explain) for h in self.hypotheses]}


__all__ = ["CaseConfig", "CaseResult", "case_config", "CaseScorer", "Fallback", "MentionMatch", "HypothesisResult", "Support"]
