"""The differential diagnosis of a described patient: conditions ranked by how well their profiles (capr.cases.profiles),
the passages that discuss them and the most similar coded cases match the patient's findings (capr.cases.findings),
each with the findings that support it and those that argue against it.

Each finding is matched against every passage as the share of its words the passage holds (capr.cases.matching) and
weighted by how rare it is among the profiles: a finding half of the profiles name ("fever", "pain") says little,
"orchitis" a lot. A denied finding a profile names counts against it (``DENIED_WEIGHT``). Five rankings, fused by
weighted reciprocal rank (k 60, ``WEIGHTS``):

- **profile**: per entity, each finding's best match among its profile passages, weighted and summed;
- **passages**: the passages that match the findings best (``PASSAGE_DEPTH``), each voting its score for the
  conditions it names (an ICD-10-CM name or a profile's name, not negated) and for the entity it is the profile of;
- **dense**: the description's cosine with the profile passages (an index with vectors only);
- **votes**: the codes of the most similar coded cases, each of the first 20 voting 1/rank (capr.cases.similar_eval);
- **names**: the codes whose ICD-10-CM names match the description (capr.cases.diagnose.NameMatcher).

A code and an entity are one diagnosis when the entity's name is the code's (or its category's) ICD-10-CM name.
Symptom-chapter codes (R00–R99, G89 pain) and conditions named by one of the patient's own findings ("Fever") are
findings, not diagnoses; external causes and factors influencing health (V–Z) are factors: both come after every
diagnosis the rankings put forward, labelled ``finding`` or ``factor``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from capr.cases.findings import Finding, Findings
from capr.cases.icd10 import category, code_name, find_names, mention_table, surface_form
from capr.cases.matching import CoverageScorer, best_sentence
from capr.cases.profiles import ProfileTable, normalize_name, short_keys

if TYPE_CHECKING:
    from capr.index.index import Index

DENIED_WEIGHT = 1.0  # a denied finding the profile names takes away what it would have given
MATCH = 0.6  # a finding matches a passage holding this share of its words
WEIGHTS = {"profile": 1.0, "passages": 0.5, "dense": 1.0, "votes": 1.0, "names": 1.0}
PASSAGE_DEPTH = 50  # passages that vote for the conditions they name


@dataclass(slots=True)
class DifferentialConfig:
    """The settings of the differential (module constants: the defaults)."""

    weights: dict[str, float] = field(default_factory=lambda: dict(WEIGHTS))
    rrf_k: int = 60  # reciprocal-rank fusion's k (smaller: the first places of each ranking count more)
    passage_depth: int = PASSAGE_DEPTH
    # how an entity's profile score is read: "findings" (each finding's best passage, summed), "passage" (the best
    # passage's findings, plus half the second best's), or both rankings fused
    entity_score: str = "findings"
    length_b: float = 0.0  # BM25-like length normalisation of the profile score by the profile's passages
    # a symptom code's fused score is multiplied by this before it is placed among the diagnoses (None: after all)
    finding_discount: float | None = None
    # how an option is scored on its passages: "max" (each finding's best share, weighted) or "pmi" (how much more
    # often than in the whole index the option's passages hold each finding)
    option_score: str = "pmi"
    # the weight of a finding no profile holds ("born at term", "immigrated"): narrative more often than a feature of
    # a disease (None: weighted as the rarest finding)
    unmatched_weight: float | None = None
    # how a finding's share in a passage counts: None, 1 from MATCH up and 0 below; a number p, share ** p (a
    # partial match counts a little)
    share_power: float | None = None
    # passages vote for the conditions they name weighted by how rarely the index names them (the idf of the name's
    # rarest word): a passage naming "anemia" or "hypertension" in passing says less than one naming "brucellosis"
    vote_idf: bool = False
    # codes the similar cases vote for equally (every code of the most similar case) share their rank in the fusion
    vote_ties: bool = True
    # the names ranking keeps only codes whose whole name the description holds (not "visual loss" for "weight loss")
    whole_names: bool = True
    profile_row_weight: float = 3.0  # a profile passage counts as this many passages that name the option
_PROFILE_DEPTH = 200  # entities the profile and dense rankings pass to the fusion
_SENTENCES = 3  # supporting sentences per diagnosis and side


@dataclass(slots=True)
class FindingEvidence:
    """A finding of the patient and where a diagnosis' profile, or a passage naming it, says it."""

    finding: str  # the finding as the reader is shown it
    negated: bool  # the description denies it
    sentence: str
    doc_id: str
    source: str  # "profile" | "passage"
    share: float  # of the finding's words the sentence holds

    def to_dict(self) -> dict[str, Any]:
        return {"finding": self.finding, "negated": self.negated, "sentence": self.sentence, "doc_id": self.doc_id,
                "source": self.source, "share": round(self.share, 3)}


@dataclass(slots=True)
class LikelyDiagnosis:
    """One entry of the differential: a condition (or, labelled ``finding`` or ``factor``, a coded symptom or
    circumstance)."""

    name: str
    code: str | None
    rank: int
    score: float  # fused reciprocal-rank score
    # diagnosis | finding (a symptom code, or a condition that restates one of the patient's findings: what the patient
    # has, not why) | factor (external causes and factors influencing health, V–Z: context, not a diagnosis)
    kind: str = "diagnosis"
    cases: int = 0  # of the most similar coded cases, how many carry the code
    case_ids: list[str] = field(default_factory=list)
    profile: list[str] = field(default_factory=list)  # documents of its profile
    supporting: list[FindingEvidence] = field(default_factory=list)
    against: list[FindingEvidence] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # the rankings that put it forward

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "code": self.code, "rank": self.rank, "score": round(self.score, 6),
                "kind": self.kind, "cases": self.cases, "case_ids": self.case_ids, "profile": self.profile,
                "supporting": [e.to_dict() for e in self.supporting], "against": [e.to_dict() for e in self.against],
                "sources": self.sources}


@dataclass(slots=True)
class ProfileMatch:
    """The findings against the index: per finding its share in every row (``coverage``) and its weight; per
    entity, ``shares[f, e]`` (finding f's best share among e's profile rows), ``best[f, e]`` (that row) and the
    entity's score."""

    scores: np.ndarray
    shares: np.ndarray
    best: np.ndarray
    weights: np.ndarray
    signs: np.ndarray
    coverage: list[np.ndarray] = field(default_factory=list)
    power: float | None = None

    def matched(self, cov: np.ndarray) -> np.ndarray:
        return cov * (cov >= MATCH) if self.power is None else cov ** self.power

    def row_scores(self) -> np.ndarray:
        """Every row's match with the findings (the weighted shares it holds, denied ones against)."""
        out = np.zeros(len(self.coverage[0]) if self.coverage else 0, dtype=np.float32)
        for c, w, s in zip(self.coverage, self.weights, self.signs):
            if w:
                out += (s * w) * self.matched(c)
        return out

    def score_rows(self, rows: np.ndarray) -> float:
        """The score of an entity whose profile is ``rows`` (e.g. the passages that name it)."""
        if not len(rows) or not self.coverage:
            return 0.0
        shares = np.array([float(c[rows].max()) for c in self.coverage], dtype=np.float32)
        return float((self.signs * self.weights) @ self.matched(shares))


def _fused_scores(a: np.ndarray, b: np.ndarray, k: int = 60) -> np.ndarray:
    """Reciprocal-rank fusion of two score vectors over the same entities."""
    out = np.zeros(len(a), dtype=np.float32)
    for s in (a, b):
        order = np.lexsort((np.arange(len(s)), -s))
        ranks = np.empty(len(s), dtype=np.float32)
        ranks[order] = np.arange(1, len(s) + 1)
        out += np.where(s > 0, 1.0 / (k + ranks), 0.0)
    return out


def is_symptom_code(code: str | None) -> bool:
    """Symptoms, signs and abnormal findings (ICD-10-CM chapter R) and pain not elsewhere classified (G89): what a
    patient has, not a diagnosis."""
    return bool(code) and (code.upper().startswith("R") or code.upper().startswith("G89"))


def _vote_scores(case_codes: Sequence[Sequence[str]], k: int = 20) -> dict[str, float]:
    """Each code's votes: 1/rank from each of the first ``k`` cases that carry it (capr.cases.similar_eval.vote)."""
    votes: dict[str, float] = {}
    for rank, codes in enumerate(list(case_codes)[:k], 1):
        for c in dict.fromkeys(codes):
            votes[c] = votes.get(c, 0.0) + 1.0 / rank
    return votes


def _shared_ranks(scores: dict[str, float]) -> dict[str, int]:
    """1 + the number of items scoring strictly more: equal scores share the best rank."""
    values = sorted(scores.values(), reverse=True)
    first: dict[float, int] = {}
    for r, v in enumerate(values, 1):
        first.setdefault(v, r)
    return {item: first[v] for item, v in scores.items()}


def _fuse(rankings: dict[str, list[str]], weights: dict[str, float], k: int,
          ranks: dict[str, dict[str, int]]) -> list[tuple[str, float]]:
    """Weighted reciprocal-rank fusion (capr.cases.similar_eval.fuse_scored) where ``ranks`` may give a ranking's
    items their ranks (shared by ties) instead of their positions."""
    fused: dict[str, float] = {}
    for name, ranked in rankings.items():
        w = weights.get(name, 0.0)
        if not w:
            continue
        own = ranks.get(name)
        for r, item in enumerate(ranked, 1):
            fused[item] = fused.get(item, 0.0) + w / (k + (own[item] if own else r))
    return sorted(fused.items(), key=lambda kv: -kv[1])


def is_factor_code(code: str | None) -> bool:
    """External causes and factors influencing health status (ICD-10-CM chapters V–Z: "Contact with and exposure
    to…", "Personal history of…"): context of a case, not a diagnosis."""
    return bool(code) and code.upper()[:1] in "VWXYZ"


def signs(findings: Sequence[Finding]) -> np.ndarray:
    """+1 for an affirmed finding, −DENIED_WEIGHT for a denied one."""
    return np.array([-DENIED_WEIGHT if f.negated else 1.0 for f in findings], dtype=np.float32)


class Differential:
    """Ranks the conditions of one index for findings; load once, call :meth:`rank` many times."""

    def __init__(self, index: "Index", table: ProfileTable, config: DifferentialConfig | None = None) -> None:
        self.index = index
        self.table = table
        self.config = config or DifferentialConfig()
        self.coverage = CoverageScorer(index)
        self._code_entity: dict[str, int] = {}
        for i, e in enumerate(table.entities):
            if e.code:
                self._code_entity.setdefault(e.code, i)
        self.row_entity = np.full(len(index), -1, dtype=np.int64)
        sizes = np.diff(np.append(table.starts, len(table.rows)))
        self.row_entity[table.rows] = np.repeat(np.arange(len(table)), sizes)
        self._names: dict[str, str] | None = None
        self._rarities: dict[str, float] = {}
        # a subtype is listed under its condition: "Thrombotic thrombocytopenic purpura, congenital" (GARD) under
        # "Thrombotic Thrombocytopenic Purpura" — a differential names a condition once, not each of its forms
        self._parent: dict[str, str] = {}
        self._children: dict[str, list[str]] = {}
        for i, e in enumerate(table.entities):
            head, comma, _ = e.name.partition(",")
            j = table.find(head) if comma else None
            if j is not None and j != i:
                self._parent[f"e{i}"] = f"e{j}"
                self._children.setdefault(f"e{j}", []).append(f"e{i}")

    def names(self) -> dict[str, str]:
        """Surface form → item ("e<entity>" or "c<code>") of every condition a passage may name."""
        if self._names is None:
            names = {form: f"c{code}" for form, code in mention_table().items()}
            for i, e in enumerate(self.table.entities):
                for n in [e.name, *e.aliases]:
                    form = surface_form(n)
                    if form and len(form) >= 4:
                        names[form] = f"e{i}"
            self._names = {form: self._item(item[1:]) if item[0] == "c" else item for form, item in names.items()}
        return self._names

    # -- matching -------------------------------------------------------------------------------
    def match(self, findings: Sequence[Finding]) -> ProfileMatch:
        n_ent = len(self.table)
        shares = np.zeros((len(findings), n_ent), dtype=np.float32)
        best = np.full((len(findings), n_ent), -1, dtype=np.int64)
        weights = np.zeros(len(findings), dtype=np.float32)
        covs = []
        for i, f in enumerate(findings):
            cov = self.coverage.coverage(f.names)
            covs.append(cov)
            if not n_ent:
                continue
            shares[i] = self.table.per_entity_max(cov)
            best[i] = self._entity_argmax(cov, shares[i])
            named_by = int(np.count_nonzero(shares[i] >= MATCH))
            unmatched = self.config.unmatched_weight
            weights[i] = np.log1p(n_ent / (1.0 + named_by)) if named_by or unmatched is None else unmatched
        sign = signs(findings)
        pm = ProfileMatch(np.zeros(n_ent, dtype=np.float32), shares, best, weights, sign, covs, self.config.share_power)
        if len(findings):
            pm.scores = np.asarray((sign * weights) @ pm.matched(shares), dtype=np.float32)
        cfg = self.config
        if n_ent and cfg.entity_score != "findings" and covs:
            by_passage = self._passage_scores(pm.row_scores())
            pm.scores = by_passage if cfg.entity_score == "passage" else _fused_scores(pm.scores, by_passage)
        if n_ent and cfg.length_b:
            sizes = np.diff(np.append(self.table.starts, len(self.table.rows))).astype(np.float32)
            pm.scores = pm.scores / (1 - cfg.length_b + cfg.length_b * sizes / sizes.mean())
        return pm

    def _passage_scores(self, rows_scores: np.ndarray) -> np.ndarray:
        """Per entity, its best profile passage's score plus half its second best's."""
        vals = rows_scores[self.table.rows].astype(np.float32)
        first = np.maximum.reduceat(vals, self.table.starts)
        ent = self.row_entity[self.table.rows]
        rest = np.where(vals >= first[ent] - 1e-7, -np.inf, vals)
        second = np.maximum.reduceat(rest, self.table.starts)
        return first + 0.5 * np.where(np.isfinite(second), np.maximum(second, 0), 0)

    def _entity_argmax(self, row_scores: np.ndarray, maxima: np.ndarray) -> np.ndarray:
        """For each entity, the first of its profile rows reaching its maximum."""
        rows = self.table.rows
        ent = self.row_entity[rows]
        hit = np.flatnonzero(row_scores[rows] >= maxima[ent] - 1e-7)[::-1]
        first = np.full(len(self.table), -1, dtype=np.int64)
        first[ent[hit]] = rows[hit]
        return first

    def find(self, name: str) -> int | None:
        """The profile entity ``name`` names (exactly, or without a qualifier such as "acute", "primary")."""
        return next((i for k in short_keys(normalize_name(name)) if (i := self.table.find(k)) is not None), None)

    # -- rankings -------------------------------------------------------------------------------
    def passage_votes(self, pm: ProfileMatch, allowed: np.ndarray) -> tuple[list[str], dict[str, list[int]]]:
        """Items ranked by the votes of the passages that match the findings best, and each item's voting rows."""
        scores = pm.row_scores() if pm.coverage else np.zeros(len(self.index), dtype=np.float32)
        scores = np.where(allowed, scores, 0.0)
        rows = np.flatnonzero(scores > 0)
        rows = rows[np.lexsort((rows, -scores[rows]))][:self.config.passage_depth]
        votes: dict[str, float] = {}
        voters: dict[str, list[int]] = {}
        table = self.names()
        for row in rows.tolist():
            items = [item for item, _, negated in find_names(self.index.passage(row).text, table) if not negated]
            if self.row_entity[row] >= 0:
                items.append(f"e{self.row_entity[row]}")
            items = list(dict.fromkeys(items))
            for item in items:
                weight = self._rarity(item) if self.config.vote_idf else 1.0
                votes[item] = votes.get(item, 0.0) + weight * float(scores[row]) / np.sqrt(len(items))
                voters.setdefault(item, []).append(row)
        return sorted(votes, key=lambda k: -votes[k]), voters

    def _rarity(self, item: str) -> float:
        """The idf of the rarest word of the condition's name: how rarely the index names it."""
        got = self._rarities.get(item)
        if got is None:
            name = self.table.entities[int(item[1:])].name if item[0] == "e" else code_name(item[1:])
            idf = self.index.term_idf(self.index.analyzer(name))
            got = self._rarities[item] = max(idf.values(), default=1.0)
        return got

    def dense_ranking(self, text: str) -> list[str]:
        if not self.index.has_dense or not len(self.table.rows):
            return []
        qvec = self.index.encoder().encode_queries([text])[0]
        cos = np.zeros(len(self.index), dtype=np.float32)
        cos[self.table.rows] = self.index.dense_scores(qvec, self.table.rows)
        ent = self.table.per_entity_max(cos)
        return [f"e{i}" for i in np.lexsort((np.arange(len(ent)), -ent))[:_PROFILE_DEPTH].tolist()]

    def rank(self, findings: Findings, votes: Sequence[Sequence[str]] = (), case_ids: Sequence[str] = (),
             names: Sequence[str] = (), n: int = 10, allowed: np.ndarray | None = None, dense: bool = True,
             explain: int = 10, weights: dict[str, float] | None = None) -> list[LikelyDiagnosis]:
        """The ``n`` likeliest diagnoses, the first ``explain`` with their evidence. ``votes``: the codes of the
        most similar coded cases, best first (``case_ids`` their documents); ``names``: codes whose names match the
        description, best first; ``allowed``: the rows that may vote (default: every live row)."""
        fs = findings.findings
        pm = self.match(fs)
        order = np.lexsort((np.arange(len(pm.scores)), -pm.scores))
        rankings: dict[str, list[str]] = {"profile": [f"e{i}" for i in order[:_PROFILE_DEPTH].tolist()
                                                      if pm.scores[i] > 0]}
        rankings["passages"], voters = self.passage_votes(pm, self.index.live if allowed is None else allowed)
        if dense and self.index.has_dense:
            rankings["dense"] = self.dense_ranking(findings.patient_text)
        voted = _vote_scores(votes)
        rankings["votes"] = list(dict.fromkeys(self._item(c) for c in sorted(voted, key=lambda c: -voted[c])))
        rankings["names"] = list(dict.fromkeys(self._item(c) for c in names))
        ties = {}
        if self.config.vote_ties:
            best: dict[str, float] = {}
            for c, v in voted.items():
                item = self._item(c)
                best[item] = max(best.get(item, 0.0), v)
            ties["votes"] = _shared_ranks(best)
        fused = self._folded(_fuse(rankings, weights or self.config.weights, self.config.rrf_k, ties))
        restated = {normalize_name(name) for f in fs for name in f.names}
        first: list[tuple[str, LikelyDiagnosis]] = []
        later: list[tuple[str, LikelyDiagnosis]] = []
        discount = self.config.finding_discount
        for item, score in fused:
            d = self._diagnosis(item, score, rankings, votes, case_ids, restated)
            (later if d.kind != "diagnosis" and discount is None else first).append((item, d))
            if len(first) >= n and discount is None:
                break
        if discount is not None:
            first.sort(key=lambda x: -(x[1].score * (discount if x[1].kind != "diagnosis" else 1.0)))
        out = (first + later)[:n]
        for r, (item, d) in enumerate(out, 1):
            d.rank = r
            if r <= explain:
                self._evidence(d, item, fs, pm, [v for m in self._members(item) for v in voters.get(m, [])])
        return [d for _, d in out]

    def _folded(self, fused: list[tuple[str, float]]) -> list[tuple[str, float]]:
        """The fused list with each subtype replaced by its condition, which keeps the better place of the two."""
        out, seen = [], set()
        for item, score in fused:
            item = self._parent.get(item, item)
            if item not in seen:
                seen.add(item)
                out.append((item, score))
        return out

    def _members(self, item: str) -> list[str]:
        """The item and the subtypes listed under it."""
        return [item, *self._children.get(item, ())]

    def option_scores(self, findings: Findings, options: Sequence[str],
                      mentions: Callable[[str], np.ndarray]) -> list[float]:
        """Each option's score: how well its profile (when the index has one) and the passages that
        ``mentions(option)`` gives (the reference passages that name it) match the findings."""
        pm = self.match(findings.findings)
        if self.config.option_score != "pmi":
            out = []
            for option in options:
                i = self.find(option)
                out.append(float(pm.scores[i]) if i is not None else pm.score_rows(mentions(option)))
            return out
        live = self.index.live
        hits = [(c >= MATCH) & live for c in pm.coverage]
        base = np.array([h.sum() for h in hits], dtype=np.float64) / max(1, int(live.sum()))
        out = []
        for option in options:
            i = self.find(option)
            own = self.table.entity_rows(i) if i is not None else np.zeros(0, dtype=np.int64)
            named = np.setdiff1d(mentions(option), own)
            weight = np.concatenate([np.full(len(own), self.config.profile_row_weight), np.ones(len(named))])
            rows = np.concatenate([own, named]).astype(np.int64)
            total = float(weight.sum())
            score = 0.0
            for h, p, sign in zip(hits, base, pm.signs):
                together = float(weight[h[rows]].sum()) if len(rows) else 0.0
                score += float(sign) * np.log((together + 1.0) / (total * p + 1.0))
            out.append(score)
        return out

    # -- the entries ----------------------------------------------------------------------------
    def _item(self, code: str) -> str:
        code = str(code).upper()
        i = self._code_entity.get(code)
        if i is None:
            i = self._code_entity.get(category(code))
        return f"e{i}" if i is not None else f"c{code}"

    def _diagnosis(self, item: str, score: float, rankings: dict[str, list[str]], votes: Sequence[Sequence[str]],
                   case_ids: Sequence[str], restated: set[str] = frozenset()) -> LikelyDiagnosis:
        members = self._members(item)
        sources = [k for k, v in rankings.items() if any(m in v for m in members)]
        if item.startswith("e"):
            e = self.table.entities[int(item[1:])]
            name, code, profile = e.name, e.code, list(e.doc_ids)
            # a profile named by one of the patient's own findings ("Fever", "Abdominal pain") restates it
            finding = e.key in restated
        else:
            code = item[1:]
            # a code's chapter says whether it is a finding (R00-R99): a description that names a disease states it
            name, profile, finding = code_name(code) or code, [], False
        kind = "finding" if finding or is_symptom_code(code) else "factor" if is_factor_code(code) else "diagnosis"
        carried = [i for i, codes in enumerate(votes[:20]) if any(self._item(c) in members for c in codes)]
        return LikelyDiagnosis(name, code, 0, score, kind, len(carried),
                               [case_ids[i] for i in carried if i < len(case_ids)][:_SENTENCES], profile[:5],
                               sources=sources)

    def _evidence(self, d: LikelyDiagnosis, item: str, findings: Sequence[Finding], pm: ProfileMatch,
                  voters: Sequence[int]) -> None:
        """The findings the diagnosis' profile (or, without one, the passages that name it) holds — supporting when
        affirmed, against when denied — each with the sentence that says it, most telling first."""
        entity = int(item[1:]) if item.startswith("e") else None
        candidates = np.asarray(voters, dtype=np.int64)
        for fi in np.argsort(-pm.weights, kind="stable").tolist():
            f = findings[fi]
            side = d.against if f.negated else d.supporting
            if len(side) >= _SENTENCES:
                continue
            row, source = -1, "profile"
            if entity is not None and pm.shares[fi, entity] >= MATCH:
                row = int(pm.best[fi, entity])
            elif len(candidates):
                cov = pm.coverage[fi][candidates]
                if cov.max() >= MATCH:
                    row, source = int(candidates[int(np.argmax(cov))]), "passage"
            if row < 0:
                continue
            p = self.index.passage(row)
            idf = self.index.term_idf(self.index.analyzer(" ".join(f.names)))
            sentence, share = best_sentence(p.text, f.names, self.index.analyzer, idf)
            side.append(FindingEvidence(f.label, f.negated, sentence or p.text[:300], p.doc_id, source,
                                        float(max(share, pm.coverage[fi][row]))))


__all__ = ["DENIED_WEIGHT", "Differential", "DifferentialConfig", "FindingEvidence", "LikelyDiagnosis", "MATCH", "PASSAGE_DEPTH",
           "WEIGHTS"]
