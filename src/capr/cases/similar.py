""""Patients like this one": the cases of an index most similar to a patient description, with the diagnoses
they carry and the sentences that make them similar.

A case is a document. Its score is its best passage's score for the description: BM25, the cosine of the index's
encoder, or both fused by reciprocal rank (BM25 : dense = 1 : 4, the weights of capr's default search). In an index
with a ``source`` column (`capr case-index`) only patient descriptions are cases — case reports and notes, not
textbook sections or question-answer pages; any other index treats every document as a case.

Diagnoses: the ICD-10-CM codes a case is labelled with (``metadata["diagnoses"]``, CodiEsp), named in English
(`simple-icd-10-cm`); an unlabelled case gets the ICD-10-CM names its text mentions instead (`capr.cases.icd10`).
Evidence: each case sentence is matched with the description sentence it shares the most rare words with
(idf-weighted overlap of analysed terms) and the best few are kept, each with the words they share.

Two lists come with the cases. Likely diagnoses: the differential (capr.cases.differential), conditions ranked by
how well their profiles, the passages naming them and the similar coded cases match the description's findings,
symptom codes after every diagnosis, labelled as findings. Likely codes: what a coder would assign, the codes of the
most similar labelled cases voted and fused with the codes whose names match the description (capr.cases.diagnose),
symptoms among the rest as coders code them. Negated findings count in both: CodiEsp's coders code 77 % of the
findings a case mentions only negated ("without fever" → R50.9), and leaving them out cost 0.5 MAP on its dev set."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from capr.cases.diagnose import VOTE_K, LikelyCode, NameMatcher, likely_codes
from capr.cases.differential import Differential, LikelyDiagnosis
from capr.cases.findings import FindingNames, Findings, extract_findings
from capr.cases.icd10 import Diagnosis, diagnoses_of
from capr.cases.mentions import candidate_rows, hypothesis_variants, mention_regex, mention_stance
from capr.cases.profiles import PATIENT_SOURCES, cached, load_profiles
from capr.errors import QueryError
from capr.search.highlight import term_spans
from capr.store.embedded import EmbeddedStore

if TYPE_CHECKING:
    from capr.index.index import Index

# the `source` values of the reference texts `capr case-index` puts beside the cases (capr.cases.data.case_corpus):
# textbooks, abstracts, explanations and MedQuAD's pages, whose source is their collection. Never cases; a document
# with another source or none (a user's notes, `capr case-index --add`, a MIMIC or FHIR export) describes a patient.
MEDQUAD_COLLECTIONS = ("ADAM", "CDC", "CancerGov", "GARD", "GHR", "MPlusDrugs", "MPlusHealthTopics",
                       "MPlusHerbsSupplements", "MedQuAD", "NHLBI", "NIDDK", "NIHSeniorHealth", "NINDS")
REFERENCE_SOURCES = ("medmcqa", "openstax", "pubmedqa", *MEDQUAD_COLLECTIONS)
MENTION_ROWS = 400  # passages naming an option, read beside its profile
RRF_K = 60
RRF_WEIGHTS = {"bm25": 1.0, "dense": 4.0}
RETRIEVERS = ("auto", "bm25", "dense", "hybrid")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'])|\n+")


@dataclass(slots=True)
class Evidence:
    """A sentence of the similar case and the description sentence it matches best."""

    sentence: str
    query_sentence: str
    score: float
    shared: list[str] = field(default_factory=list)  # the analysed words both hold, rarest first
    # [start, end) of the words holding a shared term, in `sentence` and in `query_sentence` (for highlighting)
    highlights: list[tuple[int, int]] = field(default_factory=list)
    query_highlights: list[tuple[int, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"sentence": self.sentence, "query_sentence": self.query_sentence, "score": round(self.score, 4),
                "shared": self.shared, "highlights": [list(h) for h in self.highlights],
                "query_highlights": [list(h) for h in self.query_highlights]}


@dataclass(slots=True)
class SimilarCase:
    doc_id: str
    rank: int
    score: float
    source: str
    labelled: bool  # the diagnoses are the case's own codes, not mentions found in its text
    diagnoses: list[Diagnosis]
    evidence: list[Evidence]
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "rank": self.rank, "score": round(float(self.score), 6), "source": self.source,
                "labelled": self.labelled, "diagnoses": [d.to_dict() for d in self.diagnoses],
                "evidence": [e.to_dict() for e in self.evidence], "text": self.text}


@dataclass(slots=True)
class SimilarCases:
    description: str
    retriever: str
    cases: list[SimilarCase]
    notices: list[str] = field(default_factory=list)
    diagnoses: list[LikelyDiagnosis] = field(default_factory=list)  # the differential of the described patient
    findings: Findings | None = None  # what the description says the patient has and has not
    # the codes a coder would assign, as the similar coded cases were coded (symptoms among them: capr.cases.diagnose)
    codes: list[LikelyCode] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"retriever": self.retriever, "notices": self.notices,
                "findings": self.findings.to_dict() if self.findings is not None else None,
                "diagnoses": [d.to_dict() for d in self.diagnoses], "codes": [c.to_dict() for c in self.codes],
                "cases": [c.to_dict() for c in self.cases]}


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_RE.split(text) if s and len(s.split()) >= 3]


class CaseFinder:
    """Similar-case search over one index. Load once, call :meth:`similar` many times; per-document row maps
    and the patient mask are built on first use."""

    def __init__(self, index: "Index", sources: Sequence[str] | None = None) -> None:
        self.index = index
        self._sources = tuple(sources) if sources is not None else None
        self._doc_keys: np.ndarray | None = None
        self._doc_names: list[tuple[int, int]] = []
        self._key_of: dict[str, int] = {}
        self._mask: np.ndarray | None = None
        self._names: NameMatcher | None = None
        self._codes_of: dict[int, list[str]] = {}  # document key → its codes, for every labelled case
        self._differential: Differential | None = None
        self._finding_names: FindingNames | None = None
        self.notices: list[str] = []

    # -- structure ----------------------------------------------------------------------------
    def doc_keys(self) -> np.ndarray:
        """Row → a document number unique across segments."""
        if self._doc_keys is None:
            parts, base = [], 0
            for si, seg in enumerate(self.index.segments):
                parts.append(np.asarray(seg.passage_doc_rows, dtype=np.int64) + base)
                # every name decoded at once: one by one, a segment's string table costs a cold search 0.1 s
                ids = list(seg.doc_ids)
                self._doc_names += [(si, i) for i in range(len(ids))]
                self._key_of.update((doc_id, base + i) for i, doc_id in enumerate(ids))
                base += len(ids)
            self._doc_keys = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return self._doc_keys

    def doc_id(self, key: int) -> str:
        si, i = self._doc_names[key]
        return self.index.segments[si].doc_ids[i]

    def patient_mask(self) -> np.ndarray:
        """Live rows of patient descriptions (see the module docstring)."""
        if self._mask is None:
            index = self.index
            mask = index.live.copy()
            if "source" in index.fields():
                present = {str(v) for v in index.live_values("source")}
                store = EmbeddedStore.of(index)
                if self._sources is not None:
                    wanted = sorted(present & set(self._sources))
                    if not wanted:
                        raise QueryError(f"no case of source {', '.join(self._sources)} in {index.root}; sources: "
                                         f"{', '.join(sorted(present))}")
                    mask &= store.compile_filter([f"source in ({', '.join(wanted)})"])
                else:
                    reference = sorted(present & set(REFERENCE_SOURCES))
                    cases = mask & ~store.compile_filter([f"source in ({', '.join(reference)})"]) if reference else mask
                    if cases.any():
                        mask = cases
                    else:
                        self.notices.append("no patient descriptions (case reports, notes) in this index: every "
                                            "document counts as a case")
            self._mask = mask
        return self._mask

    def name_matcher(self) -> NameMatcher:
        """Names of the codes the index's labelled cases carry (the label space; read once)."""
        if self._names is None:
            patients = self.patient_mask()

            def read() -> dict[str, list[str]]:
                keys = np.unique(self.doc_keys()[patients]) if len(self.index) else np.zeros(0, dtype=np.int64)
                out = {}
                for key in keys.tolist():
                    dx = self.index.document(self.doc_id(key)).metadata.get("diagnoses")
                    if isinstance(dx, list) and dx:
                        out[self.doc_id(key)] = [str(c).upper() for c in dx]
                return out

            # every patient's document read once per index generation, then from the cache
            self.doc_keys()
            for doc_id, codes in cached(self.index, "labels", patients, read).items():
                self._codes_of[self._key_of[doc_id]] = codes
            self._names = NameMatcher(self.index, sorted({c for codes in self._codes_of.values() for c in codes}))
        return self._names

    def profile_mask(self) -> np.ndarray:
        """Live rows that may be profiles: all but patients' records (CodiEsp, E3C, MIMIC: capr.cases.profiles
        .PATIENT_SOURCES) — textbooks, health pages, and a user's own articles added to the index."""
        index = self.index
        if "source" in index.fields():
            present = {str(v) for v in index.live_values("source")}
            patients = sorted(present & set(PATIENT_SOURCES))
            if patients:
                return index.live & ~EmbeddedStore.of(index).compile_filter([f"source in ({', '.join(patients)})"])
        return index.live.copy()

    def differential(self) -> Differential:
        """The profiles of the index's reference texts, read once."""
        if self._differential is None:
            self._differential = Differential(self.index, load_profiles(self.index, self.profile_mask()))
        return self._differential

    def prepare(self) -> Differential:
        """Reads and caches what the likely diagnoses need (`capr case-index` calls it, so that no first search
        waits for it): the profiles, the ICD-10-CM names and the HPO synonyms of findings."""
        diff = self.differential()
        diff.names()
        self.name_matcher()
        self.findings("fever")
        return diff

    def findings(self, description: str) -> Findings:
        """The description's findings, affirmed or denied (capr.cases.findings)."""
        if self._finding_names is None:
            self._finding_names = FindingNames()
        return extract_findings(description, self._finding_names)

    def option_scores(self, description: str, options: Sequence[str], exclude_docs: Iterable[str] = ()) -> list[float]:
        """Each option (a diagnosis) scored by how well its profile and the passages that name it (case reports and
        reference texts, at most ``MENTION_ROWS``) match the description's findings (capr.cases.differential)."""
        if not isinstance(description, str) or not description.strip():
            raise QueryError("empty patient description: give the case as text or a file", "description")
        excluded = set(exclude_docs)
        allowed = self.allowed_rows(excluded)

        def mentions(option: str) -> np.ndarray:
            variants = hypothesis_variants(option)
            if not variants:
                return np.zeros(0, dtype=np.int64)
            pattern = mention_regex(variants)
            rows = []
            for row in candidate_rows(self.index, variants, allowed).tolist():
                p = self.index.passage(row)
                if mention_stance(p, pattern):
                    rows.append(row)
                    if len(rows) >= MENTION_ROWS:
                        break
            return np.asarray(rows, dtype=np.int64)

        return self.differential().option_scores(self.findings(description), options, mentions)

    def allowed_rows(self, exclude_docs: Iterable[str] = ()) -> np.ndarray:
        """Live rows, but those of ``exclude_docs``."""
        keys = self.doc_keys()
        drop = [self._key_of[d] for d in exclude_docs if d in self._key_of]
        return self.index.live & ~np.isin(keys, drop) if drop else self.index.live

    def likely_diagnoses(self, description: str | Findings, voters: Sequence[Sequence[str]], n: int = 10,
                         case_ids: Sequence[str] = (), exclude_docs: Iterable[str] = ()) -> list[LikelyDiagnosis]:
        """The ``n`` likeliest diagnoses (capr.cases.differential): the profiles and the passages that match the
        findings, fused with the votes of ``voters`` (the codes of the most similar labelled cases, best first;
        ``case_ids``: their documents) and the label space's codes whose names match the description.
        ``exclude_docs``: documents that must not count (e.g. a question's own explanation)."""
        if n < 1:
            return []
        found = description if isinstance(description, Findings) else self.findings(description)
        names = self.name_matcher()
        voters = [[str(c).upper() for c in codes] for codes in voters[:VOTE_K]]
        diff = self.differential()
        terms = set(names.analyze(found.description))
        named = names.ranked(terms) if names.codes else []
        if diff.config.whole_names:
            named = [c for c in named if set(names.terms[names.position[c]]) <= terms]
        return diff.rank(found, voters, case_ids, named, n, self.allowed_rows(exclude_docs))

    def likely_codes(self, description: str, voters: Sequence[Sequence[str]], n: int = 10) -> list[LikelyCode]:
        """The ``n`` likeliest ICD-10-CM codes for coding the described case (capr.cases.diagnose.likely_codes): the
        votes of ``voters`` (the codes of the most similar labelled cases, best first) fused with the label space's
        codes whose names share words with the description. None when the index has no labelled case."""
        names = self.name_matcher()
        voters = [[str(c).upper() for c in codes] for codes in voters[:VOTE_K]]
        return likely_codes(voters, names, set(names.analyze(description)), n)

    # -- scores -------------------------------------------------------------------------------
    def _doc_best(self, rows: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(document keys, best score) ordered best first, ties by key."""
        keys = self.doc_keys()[rows]
        order = np.lexsort((-scores, keys))
        keys, scores = keys[order], scores[order]
        first = np.ones(len(keys), dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        keys, scores = keys[first], scores[first]
        best = np.lexsort((keys, -scores))
        return keys[best], scores[best]

    def document_scores(self, description: str, retriever: str, exclude: set[str]) -> tuple[np.ndarray, np.ndarray]:
        index = self.index
        rows = np.flatnonzero(self.patient_mask())
        runs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if retriever in ("bm25", "hybrid"):
            from capr.records import Retriever

            bm25 = np.asarray(index.scorer(Retriever.bm25).scores(index.analyzer(description))[rows], dtype=np.float64)
            hit = bm25 > 0  # a case sharing no word with the description is not similar by BM25 (not a tie at 0)
            runs["bm25"] = self._doc_best(rows[hit], bm25[hit])
        if retriever in ("dense", "hybrid"):
            qvec = index.encoder().encode_queries([description])[0]
            runs["dense"] = self._doc_best(rows, index.dense_scores(qvec, rows).astype(np.float64))
        drop = [self._key_of[d] for d in exclude if d in self._key_of]
        if drop:
            runs = {n: (k[keep], s[keep]) for n, (k, s) in runs.items() if (keep := ~np.isin(k, drop)) is not None}
        if len(runs) == 1:
            return next(iter(runs.values()))
        fused: dict[int, float] = {}
        for name, (keys, _) in runs.items():
            for r, k in enumerate(keys[:1000].tolist(), 1):
                fused[k] = fused.get(k, 0.0) + RRF_WEIGHTS[name] / (RRF_K + r)
        keys = np.fromiter(fused, dtype=np.int64, count=len(fused))
        scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
        order = np.lexsort((keys, -scores))
        return keys[order], scores[order]

    # -- evidence -----------------------------------------------------------------------------
    def evidence(self, description: str, text: str, n: int = 2) -> list[Evidence]:
        analyze = self.index.analyzer
        q_sents = split_sentences(description) or [description]
        q_terms = [set(analyze(s)) for s in q_sents]
        sents = split_sentences(text)
        vocab = set().union(*q_terms)
        idf = self.index.term_idf(sorted(vocab)) if vocab else {}
        out: list[Evidence] = []
        for s in sents:
            terms = set(analyze(s)) & vocab
            if not terms:
                continue
            best_j, best, shared = 0, 0.0, []
            for j, qt in enumerate(q_terms):
                common = terms & qt
                score = sum(float(idf.get(t, 0.0)) for t in common)
                if score > best:
                    best_j, best, shared = j, score, sorted(common, key=lambda t: -float(idf.get(t, 0.0)))
            if best > 0:
                out.append(Evidence(s, q_sents[best_j], best, shared))
        out.sort(key=lambda e: -e.score)
        for e in out[:n]:
            e.highlights = term_spans(e.sentence, set(e.shared), analyze)
            e.query_highlights = term_spans(e.query_sentence, set(e.shared), analyze)
        return out[:n]

    # -- the search ---------------------------------------------------------------------------
    def similar(self, description: str, k: int = 10, retriever: str = "auto", exclude_docs: Iterable[str] = (),
                evidence: int = 2, labelled_only: bool = False, diagnoses: int = 10) -> SimilarCases:
        """The ``k`` cases most similar to ``description``. ``retriever``: auto (hybrid when the index has vectors,
        else bm25), bm25, dense or hybrid. ``labelled_only``: only cases that carry diagnosis codes.
        ``diagnoses``: how many likely diagnoses to rank (0: none; an index without labelled cases has none)."""
        if not isinstance(description, str) or not description.strip():
            raise QueryError("empty patient description: give the case as text or a file", "description")
        if retriever not in RETRIEVERS:
            raise QueryError(f"unknown retriever {retriever!r}; choose {', '.join(RETRIEVERS)}", "retriever")
        if k < 1:
            raise QueryError(f"k must be at least 1, got {k}", "k")
        if evidence < 0:
            raise QueryError(f"evidence must be 0 or more sentences per case, got {evidence}", "evidence")
        index = self.index
        if retriever == "auto":
            retriever = "hybrid" if index.has_dense else "bm25"
        if retriever in ("dense", "hybrid") and not index.has_dense:
            raise QueryError(f"{index.root}: the {retriever} retriever needs passage vectors; build the index with "
                             "`capr case-index` (leave out --no-dense) or `capr index ... --dense`", "retriever")
        if index.is_empty:
            return SimilarCases(description, retriever, [], ["the index is empty"])
        # as capr.search.query.check_searchable: a lexical or hybrid search needs a searchable word (hybrid would otherwise
        # return the dense side's nearest cases to an empty description as "similar patients")
        if retriever in ("bm25", "hybrid") and not index.analyzer(description):
            raise QueryError(f"the patient description has no searchable words after stopword removal: "
                             f"{description.strip()[:80]!r}; describe the patient (age, symptoms, findings)", "description")
        exclude_docs = set(exclude_docs)
        found = self.findings(description)
        # a final exam question ("Which of the following is the most likely diagnosis?") describes no patient
        text = found.patient_text if index.analyzer(found.patient_text) else description
        keys, scores = self.document_scores(text, retriever, set(exclude_docs))
        cases: list[SimilarCase] = []
        notices = list(self.notices)
        # a case whose text is the description's, or a listed case's, word for word: the patient asked about (a copy
        # of a note in the index) or the same patient twice (corpora repeat a few reports); neither is listed nor votes
        query_words, listed, skipped = _same_words(description), {}, set()
        for key, score in zip(keys.tolist(), scores.tolist()):
            doc = index.document(self.doc_id(key))
            words = _same_words(doc.text)
            if words == query_words or words in listed:
                skipped.add(key)
                notices.append(f"{doc.doc_id} is the description itself, word for word: not listed"
                               if words == query_words else f"{doc.doc_id} repeats {listed[words]} word for word: listed once")
                continue
            labelled, dx = diagnoses_of(doc.metadata, doc.text)
            if labelled_only and not labelled:
                continue
            listed[words] = doc.doc_id
            cases.append(SimilarCase(doc.doc_id, len(cases) + 1, score, str(doc.metadata.get("source") or ""),
                                     labelled, dx, self.evidence(description, doc.text, evidence) if evidence else [],
                                     doc.text))
            if len(cases) >= k:
                break
        likely: list[LikelyDiagnosis] = []
        codes: list[LikelyCode] = []
        if diagnoses > 0:
            self.name_matcher()  # the label space
            # the most similar labelled cases, best first (read from the label space, not per document)
            voting = [key for key in keys.tolist() if key in self._codes_of and key not in skipped][:VOTE_K]
            # the description itself (a case of the index pasted whole) is no passage to vote either
            unseen = exclude_docs | {self.doc_id(key) for key in skipped}
            voters = [self._codes_of[key] for key in voting]
            likely = self.likely_diagnoses(found, voters, diagnoses, [self.doc_id(key) for key in voting], unseen)
            codes = self.likely_codes(description, voters, diagnoses)
        return SimilarCases(description, retriever, cases, notices, likely, found, codes)


def _same_words(text: str) -> str:
    """What two texts share when they are one text: their words, case and spacing aside."""
    return " ".join(text.split()).casefold()


def similar_cases(index: "Index", description: str, k: int = 10, retriever: str = "auto",
                  sources: Sequence[str] | None = None, labelled_only: bool = False, diagnoses: int = 10) -> SimilarCases:
    """One-shot convenience over :class:`CaseFinder`."""
    return CaseFinder(index, sources).similar(description, k=k, retriever=retriever, labelled_only=labelled_only,
                                              diagnoses=diagnoses)


__all__ = ["CaseFinder", "Evidence", "LikelyDiagnosis", "REFERENCE_SOURCES", "SimilarCase", "SimilarCases", "similar_cases",
           "split_sentences"]
