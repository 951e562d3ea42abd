"""The similar-case pipeline (Alghanmi, Espinosa-Anke, Schockaert, SIGIR'22).

For a patient description D and hypotheses H1..Hm, per hypothesis:
1. the passages that mention H (normalized, abbreviations, simple variants) other than to deny it, best BM25 for D
   first, up to ``lexical_k`` (1,000);
2. of those, the ``dense_k`` (50) closest to D with the index's encoder (TSDAE-adapted: `capr train tsdae`);
3. a cross-encoder scores (D, passage) for the best ``cross_k`` of them; C_H is the best passage and its score
   the hypothesis' score. A hypothesis no passage mentions is scored against its own text (C_H = H).
4. The answer is the best-scoring hypothesis.

The bm25 and dense scorers stop after step 1 and 2 and score with those stages (the paper's ablation rows)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from capr.cases.config import CaseConfig, CaseResult, CaseScorer, Fallback, HypothesisResult, MentionMatch, Support
from capr.cases.mentions import (candidate_rows, check_distinct_hypotheses, hypothesis_variants, mention_regex,
                                 mention_stance)
from capr.errors import QueryError
from capr.store.embedded import EmbeddedStore

if TYPE_CHECKING:
    from capr.index.index import Index


def _check_input(description: str, hypotheses: Sequence[str]) -> None:
    if not isinstance(description, str) or not description.strip():
        raise QueryError("empty patient description: give the case as text or a file")
    if not hypotheses:
        raise QueryError("no hypotheses: give at least one option (e.g. --options \"asthma\" \"heart failure\")")
    for i, h in enumerate(hypotheses):
        if not isinstance(h, str) or not h.strip():
            raise QueryError(f"hypothesis {i + 1} is empty")


class CasePipeline:
    """Ranks hypotheses for patient descriptions over one index (built with `--dense` for the dense and
    cross scorers). Load once, call :meth:`rank` many times; the cross-encoder loads lazily."""

    def __init__(self, index: "Index", config: CaseConfig | None = None) -> None:
        self.index = index
        self.config = config or CaseConfig(scorer=CaseScorer.bm25)
        self._finder = None
        if self.config.scorer not in (CaseScorer.bm25, CaseScorer.profile) and not index.has_dense:
            raise QueryError(f"{index.root}: the {self.config.scorer.value} scorer needs passage vectors; build the "
                             "index with `capr case-index` (vectors are its default: leave out --no-dense) or "
                             "`capr index ... --dense`")
        self._cross = None

    # -- models -----------------------------------------------------------------------------
    def cross(self):
        if self._cross is None:
            from capr.search.second_stage import CrossReranker

            self._cross = CrossReranker(self.config.cross_model, batch_size=self.config.cross_batch_size)
        return self._cross

    # -- steps ------------------------------------------------------------------------------
    def mentions(self, hypothesis: str, base_scores: np.ndarray, allowed: np.ndarray,
                 exclude_docs: set[str]) -> tuple[list[str], list[Support]]:
        """Step 1: passages mentioning the hypothesis, best BM25 for the description first (whether a mention denies
        it is read later, of the few passages kept: :meth:`affirming`)."""
        cfg = self.config
        variants = hypothesis_variants(hypothesis)
        if not variants or self.index.matrix is None:
            return variants, []
        rows = candidate_rows(self.index, variants, allowed)
        if not len(rows):
            return variants, []
        scores = base_scores[rows]
        order = np.lexsort((rows, -scores))[: cfg.max_checked]
        pattern = mention_regex(variants) if cfg.match is MentionMatch.phrase else None
        out: list[Support] = []
        for j in order:
            p = self.index.passage(int(rows[j]))
            if p.doc_id in exclude_docs or (pattern is not None and not pattern.search(p.text)):
                continue
            out.append(Support(row=int(rows[j]), passage=p, bm25=float(scores[j])))
            if len(out) >= cfg.lexical_k:
                break
        return variants, out

    def affirming(self, supports: list[Support], variants: list[str]) -> tuple[list[Support], list[int]]:
        """The first ``dense_k`` of ``supports`` (in the order given) that mention the hypothesis other than to deny
        it, and the rows of those read and found only to deny it: a passage that rules pneumonia out describes a
        patient without it. All of them are read when none affirms it. The words match reads no sentences, so it
        keeps the first ``dense_k`` as they are."""
        keep = self.config.dense_k
        if self.config.match is not MentionMatch.phrase:
            return supports[:keep], []
        pattern = mention_regex(variants)
        kept: list[Support] = []
        denied: list[int] = []
        for s in supports:
            if mention_stance(s.passage, pattern) is False:
                denied.append(s.row)
                continue
            kept.append(s)
            if len(kept) >= keep:
                break
        return kept, denied

    def related(self, hypothesis: str, variants: list[str], base_scores: np.ndarray, allowed: np.ndarray,
                exclude_docs: set[str], denied: Sequence[int] = ()) -> tuple[str | None, list[Support]]:
        """Fallback ``related`` for a hypothesis no passage mentions: passages holding all the words of one of its
        forms ("words"), else the ``related_k`` best BM25 passages for its words ("related"); either way ordered by
        BM25 for the description, like step 1. ``denied``: rows that mention it only to deny it, never its support."""
        index, cfg = self.index, self.config
        rows = candidate_rows(index, variants, allowed) if cfg.match is MentionMatch.phrase else np.zeros(0, np.int64)
        if denied:
            rows = np.setdiff1d(rows, np.asarray(denied, dtype=np.int64))
        kind = "words"
        if not len(rows):
            kind = "related"
            terms = index.analyzer(hypothesis)
            if not terms:
                return None, []
            from capr.records import Retriever

            own = index.scorer(Retriever.bm25).scores(terms)
            own = np.where(allowed, own, 0.0)
            rows = np.flatnonzero(own > 0)
            if denied:
                rows = np.setdiff1d(rows, np.asarray(denied, dtype=np.int64))
            rows = rows[np.lexsort((rows, -own[rows]))][: cfg.related_k]
        order = np.lexsort((rows, -base_scores[rows]))[: cfg.lexical_k]
        out = [Support(row=int(rows[j]), passage=index.passage(int(rows[j])), bm25=float(base_scores[rows[j]]))
               for j in order]
        out = [s for s in out if s.passage.doc_id not in exclude_docs]
        return (kind if out else None), out

    def candidates(self, description: str, hypotheses: Sequence[str], filters: dict[str, Any] | None = None,
                   exclude_docs: Iterable[str] = ()) -> tuple[list[HypothesisResult], np.ndarray | None]:
        """Steps 1-2 for every hypothesis (its supports, in the order step 3 reads them) and the description's
        vector (None for the bm25 scorer): what :func:`capr.cases.candidates.export_candidates` saves, so that
        step 3 can run where the index is not."""
        _check_input(description, hypotheses)
        cfg, index = self.config, self.index
        if cfg.scorer is CaseScorer.bm25 and index.matrix is not None and not index.analyzer(description):
            # as capr.search.query.check_searchable: BM25 would score every passage 0, "rank" the options in the order
            # given and show an arbitrary passage as each one's supporting case
            raise QueryError(f"the patient description has no searchable words after stopword removal: "
                             f"{description.strip()[:80]!r}; describe the patient (age, symptoms, findings)",
                             "description")
        excluded = set(exclude_docs)
        mask = EmbeddedStore.of(index).compile_filter(filters)
        allowed = index.live if mask is None else (index.live & mask)
        if index.matrix is not None:
            from capr.records import Retriever

            base = index.scorer(Retriever.bm25).scores(index.analyzer(description))
        else:
            base = np.zeros(len(index), dtype=np.float32)
        qvec = index.encoder().encode_queries([description])[0] if cfg.scorer is not CaseScorer.bm25 else None
        results: list[HypothesisResult] = []
        # one cosine per passage and question: a passage supporting two hypotheses gives both the same score (computed
        # over different sets of rows it could differ in the last bits and break their tie by noise)
        dense_of: dict[int, float] = {}
        for hyp in hypotheses:
            variants, sups = self.mentions(hyp, base, allowed, excluded)
            if qvec is not None:
                self._order_by_dense(sups, qvec, dense_of)
            mentioned = len(sups)
            sups, denied = self.affirming(sups, variants)
            res = HypothesisResult(hypothesis=hyp, score=0.0, found=bool(sups), candidates=mentioned - len(denied),
                                   variants=variants, denied=len(denied))
            if not sups and cfg.fallback is Fallback.related and index.matrix is not None:
                res.fallback, sups = self.related(hyp, variants, base, allowed, excluded, denied)
                if qvec is not None:
                    self._order_by_dense(sups, qvec, dense_of)
                sups = sups[: cfg.dense_k]
            res.supports = sups
            results.append(res)
        return results, qvec

    def _order_by_dense(self, supports: list[Support], qvec: np.ndarray, dense_of: dict[int, float]) -> None:
        """Step 2: the supports closest to the description first (cosines computed once per question and row)."""
        need = list(dict.fromkeys(s.row for s in supports if s.row not in dense_of))
        if need:
            dense_of.update(zip(need, map(float, self.index.dense_scores(qvec, np.array(need, dtype=np.int64)))))
        for s in supports:
            s.dense = dense_of[s.row]
        supports.sort(key=lambda s: (-s.dense, s.row))

    def rank(self, description: str, hypotheses: Sequence[str], filters: dict[str, Any] | None = None,
             exclude_docs: Iterable[str] = (), allow_repeats: bool = False) -> CaseResult:
        """Hypotheses ranked by their best supporting case. ``exclude_docs``: documents that must not serve
        as support (e.g. the explanation written for the very question being answered). A hypothesis given twice
        (but for case or spacing) is a QueryError unless ``allow_repeats``: a benchmark's question may list one
        option twice (MedMCQA and HEAD-QA do), and its answer names one of them."""
        if not allow_repeats:
            check_distinct_hypotheses(hypotheses)
        if self.config.scorer is CaseScorer.profile:
            return self._rank_by_profiles(description, hypotheses, filters, exclude_docs)
        results, qvec = self.candidates(description, hypotheses, filters, exclude_docs)
        self._score(description, results, qvec)
        order = sorted(range(len(results)), key=lambda i: (-results[i].score, i))
        ranked = [results[i] for i in order]
        for r, res in enumerate(ranked, 1):
            res.rank = r
        return CaseResult(description=description, hypotheses=ranked, scorer=self.config.scorer.value)

    def _rank_by_profiles(self, description: str, hypotheses: Sequence[str], filters: dict[str, Any] | None,
                          exclude_docs: Iterable[str]) -> CaseResult:
        """The profile scorer: :meth:`capr.cases.similar.CaseFinder.option_scores` (filters do not apply: a profile
        is the corpus' knowledge of a condition, not a case to filter)."""
        _check_input(description, hypotheses)
        if filters:
            raise QueryError("the profile scorer reads the profiles of the whole index: filters do not apply", "filters")
        if self._finder is None:
            from capr.cases.similar import CaseFinder

            self._finder = CaseFinder(self.index)
        scores = self._finder.option_scores(description, hypotheses, exclude_docs)
        results = [HypothesisResult(hypothesis=h, score=float(s), found=True, fallback="profile")
                   for h, s in zip(hypotheses, scores)]
        order = sorted(range(len(results)), key=lambda i: (-results[i].score, i))
        ranked = [results[i] for i in order]
        for r, res in enumerate(ranked, 1):
            res.rank = r
        return CaseResult(description=description, hypotheses=ranked, scorer=CaseScorer.profile.value)

    def _score(self, description: str, results: list[HypothesisResult], qvec: np.ndarray | None) -> None:
        cfg = self.config
        if cfg.scorer is CaseScorer.bm25:
            # an unmentioned hypothesis has no support at all: below every supported one
            for res in results:
                if res.supports:
                    best = max(res.supports, key=lambda s: (s.bm25, -s.row))
                    res.score, res.passage = best.bm25, best.passage
                    res.supports.sort(key=lambda s: (-s.bm25, s.row))
            return
        if cfg.scorer is CaseScorer.dense:
            missing = [r for r in results if not r.supports]
            if missing:  # C_H = H: the description against the hypothesis' own text
                hv = self.index.encoder().encode_passages([r.hypothesis for r in missing])
                for r, v in zip(missing, hv):
                    r.score = float(v @ qvec)
            for res in results:
                if res.supports:
                    res.score, res.passage = float(res.supports[0].dense), res.supports[0].passage
            return
        groups = [[s.passage.text for s in res.supports[: cfg.cross_k]] if res.supports else [res.hypothesis]
                  for res in results]
        for res, scores in zip(results, score_groups(description, groups, self.cross().score)):
            best = int(np.argmax(scores))
            res.score = float(scores[best])
            if not res.supports:
                res.passage = None
                continue
            for s, sc in zip(res.supports, scores):
                s.cross = float(sc)
            res.passage = res.supports[best].passage
            head = sorted(res.supports[: len(scores)], key=lambda s: (-s.cross, s.row))
            res.supports = head + res.supports[len(scores):]


def score_groups(description: str, groups: Sequence[Sequence[str]],
                 score: Callable[[str, Sequence[str]], np.ndarray]) -> list[np.ndarray]:
    """Step 3: the cross-encoder scores of (description, text) for each hypothesis' texts (its supports, or its own
    text when it has none), in one batch per question. A hypothesis' score is the best of its group's (the first
    best on ties): :meth:`CasePipeline.rank` and the saved-candidates path read it the same way."""
    flat = [t for g in groups for t in g]
    scores = np.asarray(score(description, flat), dtype=np.float64) if flat else np.zeros(0)
    out, at = [], 0
    for g in groups:
        if not g:
            raise ValueError("every hypothesis needs at least one text to score")
        out.append(scores[at: at + len(g)])
        at += len(g)
    return out


def rank_cases(index: "Index", description: str, hypotheses: Sequence[str], config: CaseConfig | None = None,
               filters: dict[str, Any] | None = None) -> CaseResult:
    """One-shot convenience over :class:`CasePipeline`."""
    return CasePipeline(index, config).rank(description, hypotheses, filters=filters)


__all__ = ["CasePipeline", "rank_cases", "score_groups"]
