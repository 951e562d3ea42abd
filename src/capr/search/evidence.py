"""Evidence sentences: which sentences of a retrieved passage carry the answer, with a score for each.

Lexical scoring is BM25 at sentence level: the index's collection idf (so a rare query term such as
"proteinuria" outweighs "patient"), each sentence's own term frequencies, and length normalisation
against the passage's mean sentence length. Dense scoring is the cosine of the query with each
sentence, encoded by the index's own encoder (only for indexes built with ``--dense``).

A sentence that names the query's entity only to deny it ("No known cardiomyopathy on the mother's side.",
capr.text.negation) keeps its score but is never evidence for the entity.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from capr.records import Passage, Query
from capr.search.highlight import analysed
from capr.text import bm25
from capr.text.negation import Negation, negations

if TYPE_CHECKING:
    from capr.search.query import ParsedQuery
    from capr.store.protocol import Store

# A sentence is evidence when it scores at least this share of the passage's best sentence.
# Dense cosines of unrelated sentences are far from 0, so they need a tighter ratio.
EVIDENCE_RATIO = {"lexical": 0.5, "dense": 0.85}
MAX_EVIDENCE = 3  # at most this many evidence sentences per passage


@dataclass(slots=True)
class SentenceScore:
    text: str
    start: int  # offsets into Document.text, like every span in capr
    end: int
    score: float
    evidence: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "start": self.start, "end": self.end, "score": self.score, "evidence": self.evidence}


def passage_sentences(passage: Passage) -> list[tuple[int, int, str]]:
    """(start, end, text) of each sentence; a passage without sentence spans is one sentence."""
    spans = passage.sentences or [(passage.start, passage.end)]
    out = []
    for a, b in spans:
        text = passage.text[a - passage.start : b - passage.start]
        if text.strip():
            out.append((a, b, text))
    return out or [(passage.start, passage.end, passage.text)]


def _words(s: str) -> list[str]:
    return re.findall(r"\w+", s.lower())


def is_heading_line(text: str, passage: Passage) -> bool:
    """A sentence that is only the section heading ("## Symptoms", "FAMILY HISTORY:")."""
    return bool(passage.heading) and _words(text) == _words(passage.heading)


def _mark_evidence(scores: list[SentenceScore], method: str, denied: Sequence[bool] = ()) -> list[SentenceScore]:
    """Flags the best sentences (up to MAX_EVIDENCE, within EVIDENCE_RATIO of the best); a sentence in ``denied``
    (one flag per sentence: it names the entity only to deny it) is never one, nor the best the others are held to."""
    candidates = [i for i in range(len(scores)) if not (i < len(denied) and denied[i])]
    best = max((scores[i].score for i in candidates), default=0.0)
    if best <= 0:
        return scores
    ranked = sorted(candidates, key=lambda i: -scores[i].score)
    for i in ranked[:MAX_EVIDENCE]:
        if scores[i].score >= EVIDENCE_RATIO[method] * best:
            scores[i].evidence = True
    return scores


def sentence_mentions(passage: Passage, forms: Sequence[Sequence[str]], analyzer: Any) -> Iterator[bool | None]:
    """For each sentence of ``passage`` (as :func:`passage_sentences` gives them), lazily: True where it names the
    entity (every term of one of its ``forms``, analysed as ``analyzer`` reads text) without denying it, False where
    it holds a form only to deny it ("No lymphadenopathy.", capr.text.negation), None where it holds none."""
    wanted = [set(form) for form in forms if form]
    words, terms = analysed(passage.text, analyzer)
    starts = [a for _, a, _ in words]
    for a, b, sentence in passage_sentences(passage):
        lo, hi = a - passage.start, b - passage.start
        i, j = bisect_left(starts, lo), bisect_left(starts, hi)
        first: dict[str, tuple[int, int]] = {}
        for (_, s, e), term in zip(words[i:j], terms[i:j]):
            if term is not None and term not in first:
                first[term] = (s, e)
        found, held = None, False
        for form in wanted:
            if not form <= first.keys():
                continue
            held = True
            start = min(first[t][0] for t in form) - lo
            end = max(first[t][1] for t in form) - lo
            found = negations(sentence) if found is None else found
            if not any(_denies(n, sentence, start, end, form, analyzer) for n in found):
                break
        else:
            yield False if held else None
            continue
        yield True


def _denies(negation: Negation, sentence: str, start: int, end: int, form: set[str], analyzer: Any) -> bool:
    """Whether ``negation`` denies the name found at ``[start, end)`` (from its first word's first place to its last
    word's, which may lie far apart in a sentence): its scope reaches the name, and its trigger is none of the
    name's own words ("lack of appetite" named as the entity is not denied by its "lack of")."""
    (a, b), trigger = negation.scope, sentence[slice(*negation.trigger)]
    return a < end and start < b and not (set(analyzer(trigger)) & form)


def _denied(passage: Passage, forms: Sequence[Sequence[str]] | None, analyzer: Any) -> list[bool]:
    """One flag per sentence: it names the entity only to deny it."""
    return [m is False for m in sentence_mentions(passage, forms, analyzer)] if forms else []


def entity_form(query: "Query | str | ParsedQuery", analyzer: Any) -> list[list[str]]:
    """The query entity's own analysed terms, as the one form :func:`sentence_mentions` reads (none without an entity)."""
    entity = getattr(query, "entity", None)
    terms = list(dict.fromkeys(analyzer(entity))) if entity else []
    return [terms] if terms else []


def _parsed(store: "Store", query: "Query | str | ParsedQuery", expand: bool = True) -> "ParsedQuery":
    from capr.search.query import ParsedQuery, parse_query

    return query if isinstance(query, ParsedQuery) else parse_query(query, store.analyzer, expand)


def _sentence_tokens(passage: Passage, sents: list[tuple[int, int, str]], analyzer: Any) -> list[list[str]]:
    """``analyzer(text)`` of each sentence, read off the passage's analysed words (shared with its highlights and
    snippet) instead of analysing each sentence again. A sentence whose edge cuts a word is analysed on its own:
    only then do its tokens differ from the passage's words inside it."""
    words, terms = analysed(passage.text, analyzer)
    starts = [a for _, a, _ in words]
    out = []
    for a, b, text in sents:
        lo, hi = a - passage.start, b - passage.start
        i = bisect_left(starts, lo)
        j = bisect_left(starts, hi, i)
        cut = (i > 0 and words[i - 1][2] > lo) or (j > i and words[j - 1][2] > hi)
        out.append(analyzer(text) if cut else [t for t in terms[i:j] if t is not None])
    return out


def lexical_sentence_scores(store: "Store", query: "Query | str | ParsedQuery", passage: Passage,
                            expand: bool = True, forms: Sequence[Sequence[str]] | None = None) -> list[SentenceScore]:
    """Sentence-level BM25 with the collection's idf (idf 1 on a store without collection statistics). ``forms``: the
    entity's names as analysed terms (default: the query entity's own) — a sentence that denies it is no evidence."""
    pq = _parsed(store, query, expand)
    sents = passage_sentences(passage)
    analyzer = store.analyzer
    idf = store.term_idf(set(pq.terms))
    token_lists = _sentence_tokens(passage, sents, analyzer)
    avg_len = max(1.0, sum(len(t) for t in token_lists) / len(token_lists))
    out = []
    for (a, e, text), tokens in zip(sents, token_lists):
        norm = bm25.length_norm(len(tokens), avg_len, store.bm25_params)
        tf: dict[str, int] = {}
        for t in tokens:
            if t in idf:
                tf[t] = tf.get(t, 0) + 1
        score = sum(bm25.term_score(idf[t], n, norm) for t, n in tf.items())
        if is_heading_line(text, passage):
            score = 0.0  # a heading restates the aspect asked about; it answers nothing
        out.append(SentenceScore(text, a, e, round(float(score), 4)))
    forms = entity_form(pq, analyzer) if forms is None else forms
    return _mark_evidence(out, "lexical", _denied(passage, forms, analyzer))


def dense_sentence_scores(
    store: "Store", query: "Query | str | ParsedQuery", passages: Sequence[Passage], template: str | None = None,
    forms: Sequence[Sequence[str]] | None = None,
) -> list[list[SentenceScore]]:
    """Cosine of the query with every sentence of every passage, encoded in one batch (``forms``: as for
    :func:`lexical_sentence_scores`)."""
    from capr.search.query import DEFAULT_TEMPLATE

    encoder = store.encoder()
    qvec = encoder.encode_queries([_parsed(store, query).dense_text(template or DEFAULT_TEMPLATE)])[0]
    per_passage = [passage_sentences(p) for p in passages]
    texts = [text for sents in per_passage for _, _, text in sents]
    if not texts:
        return [[] for _ in passages]
    # passage side of the encoder: sentences are passage text (matters for asymmetric models);
    # not through the embedding cache, whose SQLite connection belongs to one thread
    vecs = encoder.passage_side.encode(texts, encoder.config.passage_prefix)
    sims = (vecs @ qvec).astype(np.float32)
    forms = entity_form(_parsed(store, query), store.analyzer) if forms is None else forms
    out, i = [], 0
    for p, sents in zip(passages, per_passage):
        scores = [SentenceScore(text, a, e, 0.0 if is_heading_line(text, p) else round(float(sims[i + j]), 4))
                  for j, (a, e, text) in enumerate(sents)]
        i += len(sents)
        out.append(_mark_evidence(scores, "dense", _denied(p, forms, store.analyzer)))
    return out


def sentence_scores(
    index: "Store", query: Query | str, passage: Passage, method: str = "lexical", expand: bool = True
) -> list[SentenceScore]:
    """Score each sentence of ``passage`` against ``query`` and flag the evidence sentences.

    ``method`` is ``lexical`` (sentence-level BM25 with the index's idf) or ``dense`` (cosine with
    the index's encoder; needs an index built with vectors)."""
    if method == "lexical":
        return lexical_sentence_scores(index, query, passage, expand)
    if method == "dense":
        return dense_sentence_scores(index, query, [passage])[0]
    raise ValueError(f"unknown evidence method {method!r}; choose lexical or dense")


__all__ = ["EVIDENCE_RATIO", "MAX_EVIDENCE", "SentenceScore", "dense_sentence_scores", "entity_form", "is_heading_line",
           "lexical_sentence_scores", "passage_sentences", "sentence_mentions", "sentence_scores"]
