"""Encoders (torch, ONNX fp32/int8, static), the embedding cache, HNSW with filters, fusion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capr import Query, build_index, read_documents
from capr.errors import CaprError
from capr.index import IndexWriter
from capr.models import Encoder, EncoderConfig
from capr.models.cache import EmbeddingCache
from capr.search.fusion import FusionConfig, FusionMethod, fuse
from capr.search import search

TEXTS = [
    "IgA nephropathy often presents with visible blood in the urine after a sore throat.",
    "Colchicine or an NSAID treats an acute gout flare.",
    "Her father had dilated cardiomyopathy and her brother died suddenly at 36.",
]


@pytest.fixture(scope="module")
def torch_vectors():
    return Encoder(EncoderConfig(), cache=False).encode_passages(TEXTS)


def test_torch_encoder_is_normalized_and_semantic(torch_vectors):
    enc = Encoder(EncoderConfig(), cache=False)
    assert torch_vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(torch_vectors, axis=1), 1.0, rtol=1e-5)
    q = enc.encode_queries(["kidney disease with hematuria", "family history of heart muscle disease"])
    assert list((q @ torch_vectors.T).argmax(1)) == [0, 2]


@pytest.mark.parametrize("backend,min_cos", [("onnx", 0.9999), ("onnx-int8", 0.9)])
def test_onnx_backends_agree_with_torch(torch_vectors, backend, min_cos):
    v = Encoder(EncoderConfig(backend=backend), cache=False).encode_passages(TEXTS)
    assert v.shape == torch_vectors.shape
    assert (v * torch_vectors).sum(1).min() >= min_cos


def test_static_model_distilled_locally_retrieves():
    enc = Encoder(EncoderConfig(backend="static"), cache=False)
    v = enc.encode_passages(TEXTS)
    assert v.shape == (3, 256)
    q = enc.encode_queries(["gout flare treatment"])
    assert int((q @ v.T).argmax()) == 1


def test_static_distillation_writes_no_bar_frames_off_a_terminal(tmp_path, monkeypatch, capfd):
    """The first static encoder distils its model; a pipe or log file gets none of model2vec's bar frames."""
    import model2vec
    import model2vec.distill
    import model2vec.distill.inference as inference

    class Distilled:
        def save_pretrained(self, path):
            Path(path).mkdir(parents=True)
            (Path(path) / "config.json").write_text("{}")

    def distill(model_name, pca_dims):
        for _ in inference.tqdm(range(50), desc="Encoding tokens", mininterval=0):
            pass
        return Distilled()

    monkeypatch.setenv("CAPR_CACHE", str(tmp_path))
    monkeypatch.setattr(model2vec.distill, "distill", distill)
    monkeypatch.setattr(model2vec.StaticModel, "from_pretrained", staticmethod(lambda path: "static model"))
    bar = inference.tqdm
    assert Encoder(EncoderConfig(backend="static"), cache=False).passage_side._load() == "static model"
    assert "Encoding tokens" not in capfd.readouterr().err
    assert inference.tqdm is bar


def test_embedding_cache_skips_unchanged_passages(tmp_path):
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    enc = Encoder(EncoderConfig(), cache=cache)
    first = enc.encode_passages(TEXTS)
    assert (cache.hits, cache.misses) == (0, 3)
    again = enc.encode_passages(TEXTS + ["A new passage about asthma inhalers."])
    assert (cache.hits, cache.misses) == (3, 4)
    np.testing.assert_array_equal(again[:3], first)


def test_unknown_model_is_a_clear_error():
    with pytest.raises(CaprError, match="cannot load encoder '/no/such/model'"):
        Encoder(EncoderConfig(model="/no/such/model"), cache=False).encode_queries(["x"])
    from capr.models.encoder import parse_backend

    with pytest.raises(CaprError, match="unknown encoder backend 'tpu'"):
        parse_backend("tpu")


def test_hnsw_search_with_filters_matches_exact(tmp_path, demo_dir):
    docs = list(read_documents(demo_dir))
    exact = build_index(docs, tmp_path / "exact", dense=EncoderConfig())
    with IndexWriter(tmp_path / "hnsw", dense=EncoderConfig(), hnsw_threshold=50) as w:
        for d in docs:
            w.add(d)
    from capr.index import load_index

    hnsw = load_index(tmp_path / "hnsw")
    assert (hnsw.segments[0].path / "hnsw.faiss").exists() and not (exact.segments[0].path / "hnsw.faiss").exists()
    for q in ["anticoagulation for atrial fibrillation", Query("q", entity="asthma", aspect="treatment")]:
        a = [h.pid for h in search(exact, q, k=10, retriever="dense", aspect_boost=0)]
        b = [h.pid for h in search(hnsw, q, k=10, retriever="dense", aspect_boost=0)]
        assert len(set(a) & set(b)) >= 9
        f = search(hnsw, q, k=5, retriever="dense", filters={"aspect": "treatment"})
        assert len(f) == 5 and all(h.passage.aspect == "treatment" for h in f)


def test_hnsw_under_a_narrow_filter_is_exact_at_its_rows(tmp_path):
    """A filter keeping a few rows (one patient's notes) gets the exact best of those rows, not what a graph walk
    that mostly meets other rows happens to pass; a wide filter still walks the graph."""
    from capr.index.vectors import SegmentVectors, save_vectors

    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((12000, 16)).astype(np.float32)  # the walk alone finds 7 of these 10 (measured)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    save_vectors(tmp_path, vecs, hnsw_threshold=100)
    sv = SegmentVectors.load(tmp_path)
    assert sv.hnsw is not None
    q = vecs[7] + 0.1 * rng.standard_normal(16).astype(np.float32)
    q /= np.linalg.norm(q)
    allowed = np.zeros(len(vecs), dtype=bool)
    allowed[rng.choice(len(vecs), 12, replace=False)] = True
    rows, scores = sv.search(q, 10, allowed)
    assert len(rows) == 10
    kept = np.flatnonzero(allowed)
    best = kept[np.argsort(-(vecs[kept] @ q))[:10]]
    assert sorted(rows.tolist()) == sorted(best.tolist())
    np.testing.assert_allclose(np.sort(scores), np.sort(vecs[best] @ q), rtol=1e-6)
    wide = np.ones(len(vecs), dtype=bool)
    rows, _ = sv.search(q, 10, wide)
    assert 7 in rows.tolist() and len(rows) == 10


def test_rrf_and_weighted_fusion():
    bm25 = (np.array([1, 2, 3]), np.array([9.0, 5.0, 1.0]))
    dense = (np.array([3, 1, 4]), np.array([0.9, 0.8, 0.1]))
    rows, scores = fuse([bm25, dense], FusionConfig(method=FusionMethod.rrf, rrf_k=60))
    ranked = rows[np.argsort(-scores)].tolist()
    assert ranked[0] == 1  # 1st and 2nd beats 3rd and 1st
    assert set(rows.tolist()) == {1, 2, 3, 4}
    rows, scores = fuse([bm25, dense], FusionConfig(method=FusionMethod.weighted, weights=(0.5, 0.5)))
    got = dict(zip(rows.tolist(), scores.round(4).tolist()))
    assert got == {1: 0.5 + 0.5 * 0.875, 2: 0.25, 3: 0.5, 4: 0.0}


def test_local_path_and_separate_query_model(torch_vectors):
    from capr.models.encoder import resolve_model

    path = resolve_model("minilm")
    assert path != "minilm" and (__import__("pathlib").Path(path) / "config.json").exists()
    enc = Encoder(EncoderConfig(model=path, query_model="minilm"), cache=False)
    assert enc.query_side is not enc.passage_side and enc.query_side.key != enc.passage_side.key
    np.testing.assert_allclose(enc.encode_passages(TEXTS), torch_vectors, atol=1e-5)
    q = enc.encode_queries(["acute gout flare"])
    assert int((q @ torch_vectors.T).argmax()) == 1


def test_encoder_config_records_local_model_folders_absolutely(tmp_path, monkeypatch):
    # an index stores its encoder; a relative folder must still resolve when the index is used from elsewhere
    (tmp_path / "models" / "enc").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    cfg = EncoderConfig(model="models/enc", query_model="minilm")
    assert cfg.model == str(tmp_path / "models" / "enc") and cfg.query_model == "minilm"
    assert EncoderConfig.from_dict(cfg.to_dict()).model == cfg.model
    assert EncoderConfig(model="org/not-a-local-folder").model == "org/not-a-local-folder"  # hub ids untouched
