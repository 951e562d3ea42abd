"""Batch jobs: the Ray runner (a real local Ray cluster on 127.0.0.1, Ray Data map_batches over an actor
pool) returns exactly what the local runner returns, for embedding, labels and evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from capr.batch import LocalRunner, RayRunner, embed_texts, evaluate_queries, generate_labels
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
