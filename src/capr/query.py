"""A query, read once: every stage of a search (validation, lexical and dense first stages, the aspect prior,
re-ranking, evidence, highlights) reads the same :class:`ParsedQuery` instead of re-deriving text and terms.

    pq = parse_query(Query("q1", entity="IgA nephropathy", aspect="symptoms"), analyzer)
    pq.terms            # analysed terms, each once: ['iga', 'nephropathi', 'symptom', ...]
    pq.dismax           # (entity terms, [terms of each phrasing of the aspect]) — how lexical scoring combines them
    pq.dense_text()     # "IgA nephropathy symptoms": what a dense encoder reads
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from capr.corpus.aspects import ASPECT_SYNONYMS, aspect_terms, infer_aspect, normalize_aspect
from capr.errors import QueryError
from capr.records import Query

if TYPE_CHECKING:
    from capr.index.analyzer import Analyzer


class Retriever(str, Enum):
    bm25 = "bm25"
    tfidf = "tfidf"
    dense = "dense"
    hybrid = "hybrid"


LEXICAL = (Retriever.bm25, Retriever.tfidf)

# How an ⟨entity, aspect⟩ question becomes text for a dense encoder (compared in docs/RESULTS.md).
TEMPLATES = {
    "plain": "{entity} {aspect}",
    "of": "{aspect} of {entity}",
    "question": "What are the {aspect} of {entity}?",
}
DEFAULT_TEMPLATE = "plain"


def check_template(template: str) -> str:
    if template not in TEMPLATES:
        raise QueryError(f"unknown query template {template!r}; choose one of {sorted(TEMPLATES)}")
    return template


def as_query(query: Query | str) -> Query:
    return Query("q", text=query) if isinstance(query, str) else query


def query_text(query: Query | str, expand: bool = True) -> str:
    """Text a lexical retriever searches for. ⟨entity, aspect⟩ becomes "entity aspect [synonyms]"."""
    if isinstance(query, str):
        if not query.strip():
            raise QueryError("empty query: give a question or an entity/aspect")
        return query
    parts = []
    if query.entity:
        parts.append(query.entity)
    if query.aspect:
        parts.extend(aspect_terms(query.aspect) if expand else [query.aspect])
    if query.text:
        parts.append(query.text)
    text = " ".join(parts)
    if not text.strip():
        raise QueryError(f"query {query.qid!r} is empty")
    return text


def query_tokens(analyzer: Callable[[str], list[str]], query: Query | str, expand: bool = True) -> list[str]:
    """Analysed query terms. Free text keeps term repetitions (as bm25s does); an ⟨entity, aspect⟩
    query uses each term once, so a long synonym list cannot outweigh the entity."""
    tokens = analyzer(query_text(query, expand))
    if isinstance(query, Query) and (query.entity or query.aspect):
        tokens = list(dict.fromkeys(tokens))
    return tokens


def query_aspect(query: Query | str) -> str | None:
    """The aspect a query asks about: given explicitly, or read from a question's wording."""
    if isinstance(query, Query) and query.aspect:
        return normalize_aspect(query.aspect)
    text = query if isinstance(query, str) else query.text
    return infer_aspect(text) if text else None


def dense_query_text(query: Query | str, template: str = DEFAULT_TEMPLATE) -> str:
    fmt = TEMPLATES[check_template(template)]
    if isinstance(query, str):
        return query_text(query)
    if query.text and not (query.entity or query.aspect):
        return query.text
    text = fmt.format(entity=query.entity or "", aspect=query.aspect or "").strip()
    return f"{text} {query.text}" if query.text else text


# Corpus aspects are cleaned note headings; many are one-off fragments ("a 21-day-old with", "a-1 womac
# score"). Only frequent ones that look like a heading are suggested to a user who mistyped an aspect.
MIN_SUGGESTED_ASPECT_PASSAGES = 5  # ... and at least 1 in 2,000 live passages
_HEADING_LIKE_RE = re.compile(r"^[a-z][a-z&/()' \-]{2,39}$")


def _heading_like(aspect: str) -> bool:
    words = aspect.split()
    return bool(_HEADING_LIKE_RE.match(aspect)) and len(words) <= 5 and len(words[0]) > 1


# A typo rarely changes a word's first letter; difflib alone finds "stage" close to "dosage" (ratio 0.73), which
# is no help. A match starting with another letter is shown only when it is this close.
_TYPO_OTHER_START_MIN = 0.8


def _plausible_typo(wanted: str, match: str) -> bool:
    return wanted[:1] == match[:1] or difflib.SequenceMatcher(None, wanted, match).ratio() >= _TYPO_OTHER_START_MIN


def aspect_suggestions(aspect: str, corpus_aspects: Mapping[str, int] | Iterable[str], n: int = 5) -> tuple[list[str], bool]:
    """(suggestions, close): close matches among the canonical aspects and their synonyms (shown by their
    canonical name) first, then among frequent heading-like corpus aspects; without any close match, the
    aspects a user most likely wants: canonical ones by corpus frequency, then frequent corpus headings.
    ``corpus_aspects`` maps aspect → live passages (a plain list: frequency unknown, every one counts)."""
    counts = dict(corpus_aspects) if isinstance(corpus_aspects, Mapping) else {a: None for a in corpus_aspects}
    total = sum(c for c in counts.values() if c) or 0
    floor = max(MIN_SUGGESTED_ASPECT_PASSAGES, total // 2000)
    frequent = {a: c or 0 for a, c in counts.items() if a and _heading_like(a) and (c is None or c >= floor)}
    canonical = {a: a for a in ASPECT_SYNONYMS} | {s: a for a, syns in ASPECT_SYNONYMS.items() for s in syns}
    wanted = aspect.strip().lower()
    out: list[str] = []
    seen: set[str] = set()
    for pool in (canonical, {a: a for a in frequent}):
        # the matched name is shown (synonyms are valid aspects too), one per canonical aspect
        for m in difflib.get_close_matches(wanted, sorted(pool), n=n, cutoff=0.6):
            if not _plausible_typo(wanted, m):
                continue
            if pool[m] not in seen:
                seen.add(pool[m])
                out.append(m)
    if out:
        return out[:n], True
    by_freq = sorted(ASPECT_SYNONYMS, key=lambda a: (-(counts.get(a) or 0), list(ASPECT_SYNONYMS).index(a)))
    present = [a for a in by_freq if counts.get(a)] or by_freq
    others = sorted((a for a in frequent if a not in ASPECT_SYNONYMS), key=lambda a: (-frequent[a], a))
    return (present[:10] + others)[:15], False


# An aspect the corpus has no section for is read as the corpus aspect whose phrasings share the most analysed
# words with it ("genetic inheritance" → inheritance, "diagnosis" on health articles → exams and tests), when the
# overlap is at least this Jaccard similarity and no other aspect ties it. Chosen on the synonym table itself
# (every multi-word synonym held out in turn: experiments/aspect_resolution_dev.py, docs/RESULTS.md).
ASPECT_MATCH_MIN = 0.5


def _phrasings(aspect: str) -> list[str]:
    canonical = normalize_aspect(aspect)
    return list(dict.fromkeys([aspect.strip().lower(), canonical, *ASPECT_SYNONYMS.get(canonical, [])]))


def nearest_aspect(aspect: str, corpus_aspects: Mapping[str, int | None] | Iterable[str],
                   analyzer: Callable[[str], list[str]], min_similarity: float = ASPECT_MATCH_MIN) -> str | None:
    """The corpus aspect that ``aspect`` means: itself (canonical form) when the corpus has it; else the frequent
    corpus aspect whose name or synonyms share the most analysed words with the aspect's own phrasings (Jaccard of
    the word sets, best pair); None when nothing reaches ``min_similarity`` or two aspects tie for it."""
    counts = dict(corpus_aspects) if isinstance(corpus_aspects, Mapping) else {a: None for a in corpus_aspects}
    canonical = normalize_aspect(aspect)
    if canonical in counts or aspect.strip().lower() in counts:
        return canonical if canonical in counts else aspect.strip().lower()
    total = sum(c for c in counts.values() if c) or 0
    floor = max(MIN_SUGGESTED_ASPECT_PASSAGES, total // 2000)
    wanted = [set(analyzer(p)) for p in _phrasings(aspect)]
    wanted = [w for w in wanted if w]
    if not wanted:
        return None
    scored: list[tuple[float, str]] = []
    for cand, n in counts.items():
        if not cand or not _heading_like(cand) or (n is not None and n < floor):
            continue
        best = 0.0
        for phrase in _phrasings(cand):
            have = set(analyzer(phrase))
            for w in wanted:
                if have & w:
                    best = max(best, len(have & w) / len(have | w))
        if best >= min_similarity:
            scored.append((round(best, 6), cand))
    scored.sort(reverse=True)
    if not scored or (len(scored) > 1 and scored[1][0] == scored[0][0]):
        return None
    return scored[0][1]


def filter_aspect(value: object, corpus_aspects: Mapping[str, int | None] | Iterable[str],
                  analyzer: Callable[[str], list[str]] | None = None) -> str:
    """The corpus aspect an ``aspect`` filter value selects, read as ``-a`` reads an aspect: its canonical
    name ("meds" → medications) when the corpus has it, else the corpus aspect it reads as
    (:func:`nearest_aspect`: "medication list" → medications), else its canonical name (which no passage has)."""
    canonical = normalize_aspect(str(value))
    if analyzer is None:
        return canonical
    return nearest_aspect(str(value), corpus_aspects, analyzer) or canonical


def no_aspect_message(value: object, shown: str, corpus_aspects: Mapping[str, int | None] | Iterable[str],
                      n: int = 8) -> str:
    """The error for an aspect filter no passage passes: the index's aspects close to ``value`` (a typo), else
    the aspects it has, most frequent first."""
    counts = dict(corpus_aspects) if isinstance(corpus_aspects, Mapping) else {a: None for a in corpus_aspects}
    close = difflib.get_close_matches(str(value), list(counts), n=5, cutoff=0.6)
    if close:
        return f"no passage has {shown} (close: {', '.join(close)})"
    names = sorted(counts, key=lambda a: -(counts[a] or 0))
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return f"no passage has {shown}; this index's aspects: {', '.join(names[:n])}{more}"


KnownTerms = Callable[[list[str]], Iterable[str]]  # the given analysed terms that occur in an index


def searchable_as_words(aspect: str, analyzer: Callable[[str], list[str]], known_terms: KnownTerms) -> bool:
    """Whether every analysed word of ``aspect`` occurs in the index: it can then be searched as words. A table
    aspect that the corpus has no section for ("stages" on clinical notes) has always been searched that way (its
    words, no section prior); an aspect outside the table ("side effects") whose words the index has is no
    different. A word the index lacks ("zzqqxx", "symptons", "wund care") is most likely a typo: refused."""
    words = list(dict.fromkeys(analyzer(aspect)))
    return bool(words) and set(known_terms(words)) >= set(words)


def store_known_terms(store: object) -> KnownTerms | None:
    """The vocabulary lookup of a store that has collection statistics (capr's embedded index); None for one that
    cannot tell which terms it holds (Milvus: every aspect must then be known to the table or the corpus)."""
    from capr.store.protocol import Capability

    if Capability.collection_stats not in getattr(store, "capabilities", ()):
        return None
    term_idf = store.term_idf  # type: ignore[attr-defined]
    return lambda terms: term_idf(terms).keys()


def check_aspect(aspect: str, corpus_aspects: Mapping[str, int] | Iterable[str],
                 analyzer: Callable[[str], list[str]] | None = None, known_terms: KnownTerms | None = None) -> None:
    """An aspect is known when the synonym table or the corpus has it, or (given the corpus' ``analyzer``) it
    reads as one of the corpus' aspects (:func:`nearest_aspect`), or (given also ``known_terms``) every word of it
    occurs in the index (:func:`searchable_as_words`); otherwise a QueryError with close matches (shared by every
    index backend). ``corpus_aspects``: aspect → live passages, or a list of aspects."""
    corpus = list(corpus_aspects)
    known = set(ASPECT_SYNONYMS) | {s for v in ASPECT_SYNONYMS.values() for s in v} | set(corpus)
    if aspect.strip().lower() in known or normalize_aspect(aspect) in known:
        return
    if analyzer is not None and nearest_aspect(aspect, corpus_aspects, analyzer) is not None:
        return
    if analyzer is not None and known_terms is not None and searchable_as_words(aspect, analyzer, known_terms):
        return
    suggestions, close = aspect_suggestions(aspect, corpus_aspects)
    hint = f"; did you mean {', '.join(suggestions)}?" if close else f"; known aspects include: {', '.join(suggestions)}"
    raise QueryError(f"unknown aspect {aspect!r}{hint}")


# English question and auxiliary words. bm25s' stopword list keeps them ("what", "how", "does"), so a
# question such as "the and of what is was" used to match every passage containing "what": ten
# unrelated hits. A query whose terms are all stopwords or question words asks nothing searchable.
# They still count as terms next to a content word ("what causes gout"), so rankings do not change.
QUESTION_WORDS = frozenset(
    "what whats which who whom whose when where why how is are was were am be been being do does did done "
    "can could should would will shall may might must have has had it its please tell me about there here".split()
)


def searchable_terms(analyzer: "Analyzer", query: Query | str, expand: bool = True) -> list[str]:
    """The query's analysed lexical terms, or [] when there are none or all are question words
    (only for an English analyser that removes stopwords: one that keeps them searches for them)."""
    tokens = query_tokens(analyzer, query, expand)
    if tokens and analyzer.config.stopwords and analyzer.config.language.lower() == "english":
        question = set(analyzer(" ".join(sorted(QUESTION_WORDS))))
        if all(t in question for t in tokens):
            return []
    return tokens


def check_searchable(analyzer: "Analyzer", query: Query | str, retriever: "Retriever | str", expand: bool = True) -> None:
    """A lexical or hybrid search needs at least one searchable term; otherwise a QueryError with the reason.
    A dense search embeds the whole text, so a question of common words is still a question to it and is
    answered (the encoder, not a term list, decides what it means)."""
    if Retriever(retriever) is Retriever.dense or searchable_terms(analyzer, query, expand):
        return
    text = query_text(query, expand)
    if not any(ch.isalnum() for ch in text):  # emoji, punctuation: there are no words at all, not just stopwords
        raise QueryError(f"query has no searchable words: {text!r} has no letters or digits; "
                         "search with words, e.g. a disease or a symptom")
    raise QueryError(
        f"query has no searchable terms after stopword removal: {query_text(query, expand)!r} "
        "(only stopwords and question words); add a content word, e.g. a disease or a symptom"
    )


@dataclass(slots=True)
class ParsedQuery:
    """One query as every stage needs it. Built by :func:`parse_query`; read-only afterwards."""

    query: Query
    expand: bool
    terms: list[str]  # analysed lexical terms (highlights, evidence, plain lexical scoring)
    aspect: str | None  # the canonical aspect asked about: given, or inferred from a question's wording
    # Aspect synonyms are alternatives, not extra evidence: lexical scoring adds to the entity (and text) terms
    # the best-matching phrasing of the aspect (a disjunction-max), so rare abbreviations such as "FHX"
    # cannot outweigh the entity. None: score ``terms`` as one bag of words.
    dismax: tuple[list[str], list[list[str]]] | None = None
    _dense: dict[str, str] = field(default_factory=dict)

    @property
    def qid(self) -> str:
        return self.query.qid

    @property
    def entity(self) -> str | None:
        return self.query.entity

    @property
    def text(self) -> str | None:
        return self.query.text

    @property
    def structured(self) -> bool:
        return bool(self.query.entity or self.query.aspect)

    def dense_text(self, template: str = DEFAULT_TEMPLATE) -> str:
        """What a dense encoder (or a re-ranker, with the plain template) reads for this query."""
        if template not in self._dense:
            self._dense[template] = dense_query_text(self.query, template)
        return self._dense[template]


def parse_query(query: Query | str, analyzer: Callable[[str], list[str]], expand: bool = True,
                aspects: Callable[[], Mapping[str, int | None] | Iterable[str]] | None = None,
                known_terms: KnownTerms | None = None) -> ParsedQuery:
    """Validates and analyses ``query`` once. ``aspects`` (the corpus' aspects, or aspect → passages; asked for only when the query
    names one) makes an unknown aspect a QueryError with close matches; ``known_terms`` (see check_aspect) lets
    an aspect whose words the index has be searched as words."""
    query_text(query)  # rejects empty queries before any work
    q = as_query(query)
    if q.aspect and aspects is not None:
        check_aspect(q.aspect, aspects(), analyzer, known_terms)
    dismax = None
    if expand and q.aspect:
        base = list(dict.fromkeys(analyzer(" ".join(filter(None, [q.entity, q.text])))))
        phrases = []
        for phrase in aspect_terms(q.aspect):
            toks = [t for t in dict.fromkeys(analyzer(phrase)) if t not in base]
            if toks:
                phrases.append(toks)
        dismax = (base, phrases)
    return ParsedQuery(query=q, expand=expand, terms=query_tokens(analyzer, q, expand), aspect=query_aspect(q),
                       dismax=dismax)


def parse_store_query(store: object, query: Query | str, expand: bool = True) -> ParsedQuery:
    """:func:`parse_query` against a store: its analyser, its aspects and (where it has them) its terms. What
    ``capr search``, the service's /search and Searcher.parse validate a query with."""
    return parse_query(query, store.analyzer, expand, aspects=store.aspect_counts,  # type: ignore[attr-defined]
                       known_terms=store_known_terms(store))


__all__ = ["DEFAULT_TEMPLATE", "LEXICAL", "ParsedQuery", "Retriever", "TEMPLATES", "as_query", "check_aspect", "filter_aspect",
           "nearest_aspect", "no_aspect_message",
           "check_searchable", "check_template", "dense_query_text", "parse_query", "parse_store_query", "searchable_as_words", "store_known_terms", "searchable_terms", "query_aspect", "query_text", "query_tokens"]
