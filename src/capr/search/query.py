"""A query, read once: every stage of a search (validation, lexical and dense first stages, the aspect prior,
re-ranking, evidence, highlights) reads the same :class:`ParsedQuery` instead of re-deriving text and terms.

    pq = parse_query(Query("q1", entity="IgA nephropathy", aspect="symptoms"), analyzer)
    pq.terms            # analysed terms, each once: ['iga', 'nephropathi', 'symptom', ...]
    pq.dismax           # (entity terms, [terms of each phrasing of the aspect]) — how lexical scoring combines them
    pq.dense_text()     # "IgA nephropathy symptoms": what a dense encoder reads
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from capr.text.aspects import KnownTerms, aspect_terms, check_aspect, infer_aspect, normalize_aspect
from capr.errors import QueryError
from capr.records import Query, Retriever

if TYPE_CHECKING:
    from capr.text.analyzer import Analyzer


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


def store_known_terms(store: object) -> KnownTerms | None:
    """The vocabulary lookup of a store that has collection statistics (capr's embedded index); None for one that
    cannot tell which terms it holds (Milvus: every aspect must then be known to the table or the corpus)."""
    from capr.store.protocol import Capability

    if Capability.collection_stats not in getattr(store, "capabilities", ()):
        return None
    term_idf = store.term_idf  # type: ignore[attr-defined]
    return lambda terms: term_idf(terms).keys()


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
    # what the question was read as (capr.search.reading.Reading): its terms are ``terms``, its text the encoder's
    reading: Any = None
    # during one search (Searcher.search), every passage's lexical scores, which its entity tiers ask for again
    # (capr.search.first_stage.LexicalRetriever.scores); None outside a search, so nothing outlives it
    lexical_memo: dict[Any, Any] | None = field(default=None, init=False, repr=False, compare=False)

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
            query = self.query if self.reading is None else replace(self.query, text=self.reading.dense_text)
            self._dense[template] = dense_query_text(query, template)
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
        check_aspect(q.aspect, aspects, analyzer, known_terms)
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


__all__ = ["DEFAULT_TEMPLATE", "ParsedQuery", "TEMPLATES", "as_query", "check_searchable", "check_template",
           "dense_query_text", "parse_query", "parse_store_query", "query_aspect", "query_text", "query_tokens",
           "searchable_terms", "store_known_terms"]
