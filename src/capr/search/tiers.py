"""An ⟨entity, aspect⟩ query's tiers: passages that name the entity rank above those that do not, so the asked
aspect of *another* condition cannot come first. An exhaustive store tiers by row masks (:class:`RowTiers`: the
entity's passages, then the other passages of its documents, then the rest); a store that returns top lists narrows
each list (:class:`ListTiers`). When nothing is about the entity, a notice says so and the closest matches are shown."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from capr.records import Passage, ScoredPassage
from capr.search.config import EntityScope, SearchOptions
from capr.search.mentions import naming_flags
from capr.search.query import ParsedQuery
from capr.store.protocol import Capability, Store


class TierSearcher(Protocol):
    """What the tiers need of a searcher: its store and its first stage with the priors
    (:meth:`capr.search.Searcher.first_stage`)."""

    store: Store

    def first_stage(self, pq: ParsedQuery, k: int, options: SearchOptions, flt: Any = None, keep: Any = None,
                    named: np.ndarray | None = None, forms: list[list[str]] | None = None,
                    names: dict[int, bool] | None = None) -> list[ScoredPassage]: ...


def entity_forms(store: Store, pq: ParsedQuery, synonyms: bool = True) -> list[list[str]]:
    """The analysed terms of each name the entity is written as: its own first, then (with ``synonyms``) its
    synonyms' (capr.labels.synonyms). Empty when the entity has no searchable term."""
    from capr.labels.synonyms import entity_synonyms

    names = [pq.entity or ""]
    if synonyms and pq.entity:
        names += entity_synonyms().forms(pq.entity)
    forms: list[list[str]] = []
    for name in names:
        terms = list(dict.fromkeys(store.analyzer(name)))
        if terms and terms not in forms:
            forms.append(terms)
    return forms


class RowTiers:
    """The entity's tiers on an exhaustive store, as row masks: passages that name the entity (in their text or
    their document's title, by any of its forms), then the other passages of their documents, then the rest; each
    tier ranked by the searcher's first stage (``entity_scope`` document: the first two tiers are one, a passage
    that names the entity scored ×(1 + mention_boost)). A passage that holds the entity's words but names it in no
    sentence, or only to deny it ("No lymphadenopathy."), gets no bonus, and under ``entity_scope`` passage ranks
    after those that name it."""

    def __init__(self, searcher: TierSearcher) -> None:
        self.searcher = searcher

    def rank(self, pq: ParsedQuery, k: int, options: SearchOptions, flt: Any, notices: list[str],
             tiers: dict[str, tuple[int, bool]] | None, scope: Any, forms: list[list[str]]) -> list[ScoredPassage]:
        searcher, store = self.searcher, self.searcher.store
        mention = self._mention_mask(forms, scope)
        if mention is None:
            closest = searcher.first_stage(pq, k, options, flt)
            notices.append(_entity_notice(pq.entity, filtered=flt is not None, shown=bool(closest)))
            return closest
        # tiers: the passage (or its title) names the entity; another passage of its document does; the rest
        in_document = store.document_rows(mention) & ~mention
        mentioned = mention  # whether a document names the entity is read in all its passages, filtered or not
        none_named = False
        if flt is not None:
            mention = mention & flt
            in_document &= flt
            none_named = not (mention | in_document).any()
        if options.entity_scope is EntityScope.passage:
            levels = [(mention, None), (in_document, None), (flt, None)]
        else:
            levels = [(mention | in_document, mention if options.mention_boost else None), (flt, None)]
        # the tier of a document's other passages holds only documents that name the entity, not only deny it
        document_level = 1 if options.entity_scope is EntityScope.passage else 0
        verdicts: dict[str, bool] = {}
        verdict_of_row: dict[int, bool] = {}  # whether a passage names the entity, by row: each read once a search
        hits: list[ScoredPassage] = []
        for level, (tier, named) in enumerate(levels):
            if len(hits) >= k:
                break
            seen = {h.pid for h in hits}

            def ranked(tier: Any, named: np.ndarray | None) -> list[ScoredPassage]:
                return [h for h in searcher.first_stage(pq, k, options, tier, named=named, forms=forms,
                                                          names=verdict_of_row)
                        if h.pid not in seen][: k - len(hits)]

            found = ranked(tier, named)
            if level == document_level:
                found = self._naming_documents(found, tier, named, mentioned, forms, verdicts, ranked,
                                               verdict_of_row)
                if level == 0 and verdicts and not any(verdicts.values()) and not found:
                    notices.append(_denied_notice(pq.entity, filtered=flt is not None))
            demote = level == 0 and options.entity_scope is EntityScope.passage
            if not found or (tiers is None and not demote):
                hits += found  # only a second stage, or the passage scope, reads which hits name the entity
                continue
            names = mention[store.keys_of([h.pid for h in found])]
            if names.any():
                names[names] = naming_flags([h.passage for h, n in zip(found, names) if n], forms, store.analyzer)
            if demote:
                # a passage that only denies the entity, or scatters its words, ranks after those that name it
                found = [h for h, n in zip(found, names) if n] + [h for h, n in zip(found, names) if not n]
                names = np.sort(names)[::-1]
            if tiers is not None:
                tiers.update((h.pid, (level, bool(n))) for h, n in zip(found, names))
            hits += found
        if none_named:
            notices.append(_entity_notice(pq.entity, filtered=True, shown=bool(hits)))
        return hits

    def _naming_documents(self, found: list[ScoredPassage], tier: np.ndarray, named: np.ndarray | None,
                          mention: np.ndarray, forms: list[list[str]], verdicts: dict[str, bool],
                          ranked: Any, names: dict[int, bool]) -> list[ScoredPassage]:
        """``found`` (ranked from ``tier``) with the passages of documents that hold the entity's words but never
        name it (every mention denies it, "No lymphadenopathy.", or scatters its words) taken out of the tier and
        the tier ranked again; such documents rank with the rest. ``verdicts`` keeps each document read."""
        store = self.searcher.store
        for round_ in range(_DOCUMENT_ROUNDS):
            self._read_documents([h for h in found if h.passage.doc_id not in verdicts], mention, forms, verdicts, names)
            silent = [h.pid for h in found if not verdicts[h.passage.doc_id]]
            if not silent or round_ == _DOCUMENT_ROUNDS - 1:
                break
            rows = np.zeros(store.row_count(), dtype=bool)
            rows[store.document_keys(store.keys_of(silent))] = True
            tier = tier & ~rows
            named = None if named is None else named & ~rows
            found = ranked(tier, named) if tier.any() else []
        return [h for h in found if verdicts[h.passage.doc_id]]  # after the last round, the rest rank lower

    def _read_documents(self, hits: list[ScoredPassage], mention: np.ndarray, forms: list[list[str]],
                        verdicts: dict[str, bool], names: dict[int, bool]) -> None:
        """Whether each document of ``hits`` names the entity in one of its passages (rows of ``mention`` hold its
        words), into ``verdicts``. A document's own hit usually names it, and the first stage has read it (``names``);
        the other passages of a document are read one at a time, until one names it."""
        store = self.searcher.store

        def naming(rows: list[int], passages: list[Passage] | None = None) -> list[bool]:
            todo = [i for i, row in enumerate(rows) if row not in names]
            if todo:
                read = [passages[i] for i in todo] if passages is not None else \
                    store.passages(np.asarray([rows[i] for i in todo], dtype=np.int64))
                names.update(zip([rows[i] for i in todo], naming_flags(read, forms, store.analyzer).tolist()))
            return [names[row] for row in rows]

        keys = store.keys_of([h.pid for h in hits]).tolist() if hits else []
        held = [(h, key) for h, key in zip(hits, keys) if mention[key]]
        for (h, _), n in zip(held, naming([key for _, key in held], [h.passage for h, _ in held])):
            if n:
                verdicts[h.passage.doc_id] = True
        for h, key in zip(hits, keys):
            doc_id = h.passage.doc_id
            if doc_id in verdicts:
                continue
            rows = store.document_keys(np.asarray([key], dtype=np.int64))
            verdicts[doc_id] = any(naming([row])[0] for row in rows[mention[rows]].tolist())

    def _mention_mask(self, forms: list[list[str]], flt: Any) -> np.ndarray | None:
        """Live rows passing the filter whose indexed text has every term of at least one of ``forms``; None when
        no row has."""
        store = self.searcher.store
        live = np.ones(store.row_count(), dtype=bool) if flt is None else flt  # deleted rows score 0 below
        has: dict[str, np.ndarray] = {}
        mask = np.zeros(store.row_count(), dtype=bool)
        for terms in forms:
            rows = live.copy()
            for t in terms:
                if t not in has:
                    has[t] = np.zeros(store.row_count(), dtype=bool)
                    has[t][store.term_rows(t)] = True
                rows &= has[t]
                if not rows.any():
                    break
            mask |= rows
        return mask if mask.any() else None


class ListTiers:
    """The entity's tiers on a store that returns top lists: each list is narrowed to the passages that name the
    entity (read from the passages themselves), then to the others; no document tier (that would need every
    passage)."""

    def __init__(self, searcher: TierSearcher) -> None:
        self.searcher = searcher

    def rank(self, pq: ParsedQuery, k: int, options: SearchOptions, flt: Any, notices: list[str],
             tiers: dict[str, tuple[int, bool]] | None, scope: Any, forms: list[list[str]]) -> list[ScoredPassage]:
        searcher, store = self.searcher, self.searcher.store
        wanted, holds_words = [set(terms) for terms in forms], {}

        def mentions(keys: np.ndarray) -> np.ndarray:
            todo = [int(x) for x in keys if int(x) not in holds_words]
            for key, p in zip(todo, store.passages(np.asarray(todo, dtype=np.int64))):
                words = set(store.analyzer(f"{p.title} {p.text}"))
                holds_words[key] = any(form <= words for form in wanted)
            return np.asarray([holds_words[int(x)] for x in keys], dtype=bool)

        hits = searcher.first_stage(pq, k, options, flt, keep=mentions)
        # as RowTiers ranks them: a passage that only denies the entity, or scatters its words, after those that name it
        named = {h.pid for h, n in zip(hits, naming_flags([h.passage for h in hits], forms, store.analyzer)) if n}
        hits = [h for h in hits if h.pid in named] + [h for h in hits if h.pid not in named]
        about: set[str] = set()
        if not hits and options.filters:
            # the filter may drop every passage that names the entity and keep other passages of its documents
            about = {h.passage.doc_id for h in searcher.first_stage(pq, k, options, scope, keep=mentions)}
            if about:
                hits = searcher.first_stage(pq, k, options, flt, keep=lambda keys: np.asarray(
                    [p.doc_id in about for p in store.passages(keys)], dtype=bool))
        if not hits:
            closest = searcher.first_stage(pq, k, options, flt)
            notices.append(_entity_notice(pq.entity, filtered=bool(options.filters), shown=bool(closest)))
            return closest
        seen = {h.pid for h in hits}
        rest = [h for h in searcher.first_stage(pq, k, options, flt, keep=lambda keys: ~mentions(keys))
                if h.pid not in seen][: k - len(hits)] if len(hits) < k else []
        if tiers is not None:
            tiers.update([(h.pid, (0, h.pid in named)) for h in hits] + [(h.pid, (1, False)) for h in rest])
        return hits + rest


def entity_tiers(searcher: TierSearcher) -> RowTiers | ListTiers:
    """How this searcher's store tiers an entity's passages: row masks on an exhaustive store, else narrowed lists."""
    return (RowTiers if Capability.exhaustive in searcher.store.capabilities else ListTiers)(searcher)


def tiered_first_stage(searcher: TierSearcher, pq: ParsedQuery, k: int, options: SearchOptions, flt: Any,
                       notices: list[str], tiers: dict[str, tuple[int, bool]] | None = None,
                       scope: Any = None) -> list[ScoredPassage]:
    """The first stage where the entity counts: passages that mention every term of the entity (in their text, or
    the document title indexed with them) first, then the other passages of documents that mention it, then the
    rest; each tier ranked by the retriever and the aspect prior, and narrowed by the filter ``flt`` only after the
    entity's documents are known (``scope``: the passages that may count, None for all). When nothing mentions the
    entity, a notice says so and the closest matches are shown. ``tiers`` receives each hit's (tier, names the
    entity), which a second stage keeps."""
    forms = entity_forms(searcher.store, pq, options.entity_synonyms)
    if not forms:
        return searcher.first_stage(pq, k, options, flt)
    hits = entity_tiers(searcher).rank(pq, k, options, flt, notices, tiers, scope, forms)
    return [ScoredPassage(pid=h.pid, score=h.score, rank=i + 1, passage=h.passage) for i, h in enumerate(hits)]


def _entity_notice(entity: str | None, filtered: bool, shown: bool = True) -> str:
    """What a user is told when no result is about the entity. Under a filter it speaks of what the filter keeps
    only: whether passages it drops (another patient's notes) name the entity is not the client's to learn.
    ``shown``: whether any closest match is shown (none may match at all)."""
    if filtered:
        said = f"no passage that passes the filter mentions {entity!r}"
        return said + ("; showing the closest matches that pass it" if shown else "")
    return f"no passage mentions {entity!r}" + ("; showing the closest matches" if shown else "")


def _denied_notice(entity: str | None, filtered: bool) -> str:
    """What a user is told when every document that holds the entity's words denies it (or scatters them)."""
    where = "that passes the filter " if filtered else ""
    return (f"no passage {where}names {entity!r} other than to deny it; showing the closest matches")


_DOCUMENT_ROUNDS = 4  # rankings of the document tier, each without the documents that never name the entity


__all__ = ["ListTiers", "RowTiers", "TierSearcher", "entity_forms", "entity_tiers", "tiered_first_stage"]
