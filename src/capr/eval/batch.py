"""Batch jobs over large corpora — label generation, embedding, evaluation — as plain functions over
batches, run by a runner: :class:`LocalRunner` (default: in this process, batch after batch) or
:class:`RayRunner` (Ray Data ``map_batches`` over a pool of actors, on a local or remote Ray cluster).

Each job is a callable class: ``__init__`` loads what is expensive once per worker (an encoder, the label
dictionaries, an index), ``__call__`` maps one batch (a list) to one result per item. The runners only
differ in where the batches run; the output is the same list in the same order either way (tested).

    vectors = embed_texts(texts, EncoderConfig())                                        # local
    vectors = embed_texts(texts, EncoderConfig(), runner=RayRunner(address="auto", actors=8))
    labels  = generate_labels(documents, LabelConfig(), runner=RayRunner(...))
    metrics, run = evaluate_queries("idx/notes", queries, qrels, runner=RayRunner(...))

Ray is imported only by RayRunner (``pip install 'capr[ray]'``).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Sequence

import numpy as np

from capr.errors import CaprError
from capr.records import Document, Qrel, Query, Run, ScoredPassage, qrels_as_dict

if TYPE_CHECKING:
    from capr.labels import LabelConfig, LabeledPassage
    from capr.models.encoder import EncoderConfig


class Runner(Protocol):
    def map_batches(self, job: type, items: Sequence[Any], batch_size: int, job_args: tuple = ()) -> list[Any]:
        """``job(*job_args)`` once per worker, then ``worker(batch) -> list`` over the items, in order."""


class LocalRunner:
    """In this process, one batch after another (the default)."""

    def map_batches(self, job: type, items: Sequence[Any], batch_size: int, job_args: tuple = ()) -> list[Any]:
        worker = job(*job_args)
        out: list[Any] = []
        for i in range(0, len(items), batch_size):
            out.extend(worker(list(items[i : i + batch_size])))
        return out


class _Pickled:
    """Adapts a job to Ray Data batches: items travel as pickled bytes in one object column, so any
    Python value (a Document, a float32 vector) comes back exactly as the local runner returns it."""

    def __init__(self, job: type, job_args: tuple) -> None:
        self.worker = job(*job_args)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        items = [pickle.loads(b) for b in batch["item"]]
        results = self.worker(items)
        if len(results) != len(items):
            raise CaprError(f"batch job returned {len(results)} results for {len(items)} items")
        out = np.empty(len(results), dtype=object)
        out[:] = [pickle.dumps(r) for r in results]
        return {"item": out}


class RayRunner:
    """Ray Data ``map_batches`` with an actor pool. ``address``: ``None``/"local" starts a Ray instance
    in this process (bound to 127.0.0.1), "auto" or "ray://host:10001" joins a running cluster."""

    def __init__(self, address: str | None = None, actors: int = 2, cpus_per_actor: float = 1.0,
                 init_kwargs: dict[str, Any] | None = None) -> None:
        if actors < 1:
            raise CaprError("a Ray actor pool needs at least one actor")
        self.address = address
        self.actors = actors
        self.cpus_per_actor = cpus_per_actor
        self.init_kwargs = init_kwargs or {}

    def _ray(self):
        try:
            import ray
            import ray.data
        except ImportError:
            raise CaprError("the Ray runner needs Ray: pip install 'capr[ray]'") from None
        if not ray.is_initialized():
            kwargs = dict(self.init_kwargs)
            local = self.address in (None, "local")
            if local:
                kwargs.setdefault("include_dashboard", False)
                kwargs.setdefault("_node_ip_address", "127.0.0.1")  # a local instance stays on loopback
            try:
                ray.init(address=self.address or "local", **kwargs)
            except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception for this
                # The first local start after installing Ray (cold file cache, every module read from disk) can
                # outlast Ray's node start-up wait on a small machine; the second start finds a warm cache.
                if not (local and "timed out during startup" in str(e)):
                    raise
                ray.shutdown()
                ray.init(address=self.address or "local", **kwargs)
        return ray

    def map_batches(self, job: type, items: Sequence[Any], batch_size: int, job_args: tuple = ()) -> list[Any]:
        ray = self._ray()
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # results line up with the items, as locally
        ds = ray.data.from_items([{"item": pickle.dumps(x)} for x in items])
        ds = ds.map_batches(_Pickled, fn_constructor_args=(job, job_args), batch_size=batch_size,
                            batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=self.actors),
                            num_cpus=self.cpus_per_actor)
        return [pickle.loads(row["item"]) for row in ds.iter_rows()]


def _runner(runner: Runner | None) -> Runner:
    return runner if runner is not None else LocalRunner()


# ------------------------------------------------------------------------------ embedding
class EmbedJob:
    def __init__(self, encoder: dict[str, Any], cache: bool = True) -> None:
        from capr.models.encoder import Encoder, EncoderConfig

        self.encoder = Encoder(EncoderConfig.from_dict(encoder), cache=cache)

    def __call__(self, texts: list[str]) -> list[np.ndarray]:
        return list(self.encoder.encode_passages(texts))


def embed_texts(texts: Sequence[str], encoder: "EncoderConfig", runner: Runner | None = None, batch_size: int = 256,
                cache: bool = True) -> np.ndarray:
    """Passage vectors (float32, L2-normalised), one row per text."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    rows = _runner(runner).map_batches(EmbedJob, list(texts), batch_size, (encoder.to_dict(), cache))
    return np.stack(rows).astype(np.float32)


# ------------------------------------------------------------------------------ labels
class LabelJob:
    def __init__(self, config: Any) -> None:
        from capr.labels import LabelGenerator

        self.generator = LabelGenerator(config)

    def __call__(self, docs: list[Document]) -> list[list[Any]]:
        return [list(self.generator.document(d)) for d in docs]  # one result (its labels) per document


def generate_labels(documents: Iterable[Document], config: "LabelConfig | None" = None, runner: Runner | None = None,
                    batch_size: int = 32) -> list["LabeledPassage"]:
    """``capr labels`` over a corpus: the LabeledPassage records of every document, in document order."""
    from capr.labels import LabelConfig

    per_doc = _runner(runner).map_batches(LabelJob, list(documents), batch_size, (config or LabelConfig(),))
    return [lp for labels in per_doc for lp in labels]


# ------------------------------------------------------------------------------ evaluation
class SearchJob:
    def __init__(self, index_dir: str, k: int, retriever: str | None, search_kwargs: dict[str, Any]) -> None:
        from capr.index import Index

        self.index = Index.load(index_dir)
        self.k, self.retriever, self.kwargs = k, retriever, search_kwargs

    def __call__(self, queries: list[Query]) -> list[list[tuple[str, float]]]:
        from capr.errors import QueryError
        from capr.search import SearchOptions, Searcher

        searcher = Searcher.open(self.index)  # the index's profile: a second stage it records re-ranks here too
        options = SearchOptions(k=self.k, retriever=self.retriever, highlights=False, **self.kwargs)
        out = []
        for q in queries:
            try:
                out.append([(h.pid, h.score) for h in searcher.search(q, options).hits])
            except QueryError as e:  # which of thousands of queries cannot be answered
                raise QueryError(f"query {q.qid!r}: {e}", e.field) from None
        return out


def search_queries(index_dir: str | Path, queries: Sequence[Query], k: int = 100, retriever: str | None = None,
                   runner: Runner | None = None, batch_size: int = 64, **search_kwargs: Any) -> Run:
    """Top-k for every query (the index is opened once per worker; on a cluster it must be on a path
    every worker can read). ``retriever``: None searches as `capr search` does (the index's profile: hybrid
    with vectors, else bm25). Query ids must be unique (a run holds one ranking per id)."""
    seen: set[str] = set()
    for q in queries:
        if q.qid in seen:
            raise CaprError(f"query id {q.qid!r} is given twice: a run holds one ranking per query id")
        seen.add(q.qid)
    name = None if retriever is None else str(getattr(retriever, "value", retriever))
    results = _runner(runner).map_batches(SearchJob, list(queries), batch_size, (str(index_dir), k, name, search_kwargs))
    run = Run(name=f"capr-{name or 'default'}")
    for q, hits in zip(queries, results):
        run.results[q.qid] = [ScoredPassage(pid=p, score=s, rank=i + 1) for i, (p, s) in enumerate(hits)]
    return run


def evaluate_queries(index_dir: str | Path, queries: Sequence[Query], qrels: Sequence[Qrel], k: int = 100,
                     retriever: str | None = None, runner: Runner | None = None, batch_size: int = 64,
                     **search_kwargs: Any) -> tuple[dict[str, float], Run]:
    """Metrics (R@1/5/10, MAP, MRR@10, nDCG@10) of a retriever over a query set, searched in batches."""
    from capr.eval.metrics import evaluate

    run = search_queries(index_dir, queries, k, retriever, runner, batch_size, **search_kwargs)
    return evaluate(run.as_scores(), qrels_as_dict(list(qrels))), run

