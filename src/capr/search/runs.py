"""Many questions through one :class:`~capr.search.searcher.Searcher` as a run (``capr search --queries``, batch
jobs, ``capr eval``'s own questions)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Sequence

from capr.errors import QueryError
from capr.index import compiled
from capr.records import Query, Run, ScoredPassage
from capr.search.config import GroupBy, SearchOptions
from capr.search.searcher import Searcher


def search_each(searcher: Searcher, queries: Sequence[Query], options: SearchOptions,
                progress: Callable[[Sequence[Query]], Iterable[Query]] | None = None,
                name: str = "capr") -> tuple[Run, dict[str, str]]:
    """Every query through ``searcher`` as one run: passage ids, or document ids when ``options`` groups by
    document. A question the pipeline cannot search (only stopwords) gets an empty ranking and its reason under its
    id, as `capr eval` scores it; any other refusal (a bad filter) ends the run, naming the question."""
    if len(queries) * searcher.store.row_count() >= _COMPILE_AT:
        compiled.enable()  # a few hundred milliseconds once, against tens per question at millions of passages
    run = Run(name=name)
    unsearchable: dict[str, str] = {}
    ids_only = replace(options, highlights=False)
    by_doc = options.group_by is GroupBy.doc
    for q in (progress(queries) if progress is not None else queries):
        try:
            hits = searcher.search(q, ids_only).hits
        except QueryError as e:
            if e.field != "text":
                raise QueryError(f"question {q.qid!r}: {e}", e.field) from None
            unsearchable[q.qid] = str(e)
            hits = []
        run.results[q.qid] = [ScoredPassage(pid=h.passage.doc_id if by_doc else h.pid, score=h.score, rank=h.rank)
                              for h in hits]
    return run, unsearchable


_COMPILE_AT = 50_000_000  # questions × passages: 50 questions over a million passages


__all__ = ["search_each"]
