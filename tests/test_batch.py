"""Batch jobs: the Ray runner (a real local Ray cluster on 127.0.0.1, Ray Data map_batches over an actor
pool) returns exactly what the local runner returns, for embedding, labels and evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from capr.eval.batch import LocalRunner, RayRunner, embed_texts, evaluate_queries, generate_labels, search_queries
from capr.corpus import Format, read_documents
from capr.errors import CaprError
from capr.index import build_index
from capr.labels import LabelConfig
from capr.models.encoder import EncoderConfig
from capr.records import Qrel, Query

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'capr[ray]'; make test installs it)")


@pytest.fixture(scope="module")
def ray_runner():
    if ray.is_initialized():
        ray.shutdown()
    # a private local cluster: 2 CPUs, loopback, no dashboard, workers see the test's CAPR_CACHE
    runner = RayRunner(address="local", actors=2, init_kwargs=dict(
        num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
        runtime_env={"env_vars": {k: v for k, v in __import__("os").environ.items() if k in ("CAPR_CACHE", "HF_HUB_OFFLINE")}},
    ))
    runner._ray()
    yield runner
    ray.shutdown()


@pytest.fixture(scope="module")
def docs(demo_dir):
    return list(read_documents(demo_dir, Format.text))


def test_embedding_on_ray_equals_local(ray_runner, docs):
    texts = [d.text[:500] for d in docs]
    enc = EncoderConfig()
    local = embed_texts(texts, enc, runner=LocalRunner(), batch_size=8, cache=False)
    remote = embed_texts(texts, enc, runner=ray_runner, batch_size=8, cache=False)
    assert local.shape == (36, 384) and remote.dtype == np.float32
    np.testing.assert_allclose(remote, local, atol=1e-5)  # same model, same batches; different processes


def test_labels_on_ray_equal_local(ray_runner, docs):
    config = LabelConfig(ner=False)  # title entities and heading aspects: the full NER loads HPO per actor
    local = generate_labels(docs, config, runner=LocalRunner(), batch_size=5)
    remote = generate_labels(docs, config, runner=ray_runner, batch_size=5)
    assert len(local) > 100
    assert [lp.to_dict() for lp in remote] == [lp.to_dict() for lp in local]


def test_evaluation_on_ray_equals_local(ray_runner, docs, tmp_path):
    index = build_index(docs, tmp_path / "idx")
    rows = index.pid_rows()
    queries = [Query(f"q{i}", entity=d.title, aspect="treatment") for i, d in enumerate(docs[:12])]
    qrels = [Qrel(q.qid, pid) for q, d in zip(queries, docs) for pid in rows if pid.startswith(d.doc_id + "#")]
    local_m, local_run = evaluate_queries(tmp_path / "idx", queries, qrels, k=20, runner=LocalRunner(), batch_size=4)
    ray_m, ray_run = evaluate_queries(tmp_path / "idx", queries, qrels, k=20, runner=ray_runner, batch_size=4)
    assert ray_m == local_m and local_m["R@10"] > 0
    assert ray_run.as_scores() == local_run.as_scores()


def test_runner_errors():
    with pytest.raises(CaprError, match="at least one actor"):
        RayRunner(actors=0)


def test_search_queries_searches_as_capr_search_and_refuses_repeated_ids(tmp_path, demo_dir):
    """A batch search with no retriever named returns what `capr search` returns (the index's profile: hybrid on an
    index with vectors); two queries under one id would leave one ranking in the run, so they are refused; a query
    that cannot be answered is named by its id."""
    from capr.errors import QueryError
    from capr.index import load_index
    from capr.search import SearchOptions, Searcher

    from service_support import build_dense_demo_index

    idx = build_dense_demo_index(demo_dir, tmp_path / "idx")
    queries = [Query("q1", text="chest pain"), Query("q2", entity="asthma", aspect="treatment")]
    run = search_queries(idx, queries, k=5, runner=LocalRunner())
    searcher = Searcher.open(load_index(idx))
    for q in queries:
        result = searcher.search(q, SearchOptions(k=5, highlights=False))
        assert result.retriever == "hybrid"
        assert [(p.pid, p.score) for p in run.results[q.qid]] == [(h.pid, h.score) for h in result.hits]
    assert run.name == "capr-default" and search_queries(idx, queries[:1], k=5, retriever="bm25").name == "capr-bm25"
    with pytest.raises(CaprError, match="'q1' is given twice"):
        search_queries(idx, [queries[0], Query("q1", text="insulin dose")], k=5)
    with pytest.raises(QueryError, match="query 'bad': query has no searchable terms"):
        search_queries(idx, [queries[0], Query("bad", text="the of")], k=5)
