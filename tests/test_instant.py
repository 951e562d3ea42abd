"""A cold `capr search` loads only what it needs: queries of a torch encoder go through its ONNX export (the same
vectors), no command imports a heavy dependency it does not use, and `capr index` builds the caches a first
search would otherwise build."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import capr_cli, need_data

# never needed by a search or by --help; each is seconds of import (docs/RESULTS.md, instant search)
HEAVY = {"torch", "transformers", "sentence_transformers", "sklearn", "spacy", "medspacy", "scispacy", "pyhpo",
         "drug_named_entity_recognition", "fhir", "pymilvus", "ray", "matplotlib", "model2vec", "fastapi", "uvicorn"}
QUERY_ENCODER = {"onnxruntime", "tokenizers"}  # what a dense search loads instead


def imported(*args: str, env: dict | None = None) -> tuple[set[str], subprocess.CompletedProcess]:
    """Top-level packages a `capr` command imports (python -X importtime), and the finished process."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "capr", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)$", proc.stderr, flags=re.M)
    return {n.split(".")[0] for n in names}, proc


@pytest.fixture(scope="module")
def hybrid_index(tmp_path_factory, demo_dir) -> Path:
    """`capr index` of the demo corpus with vectors (the default), by the real command."""
    out = tmp_path_factory.mktemp("instant") / "idx"
    capr_cli("index", str(demo_dir), "--out", str(out))
    return out


def test_index_exports_the_query_encoder_and_the_synonym_table(hybrid_index):
    from capr.labels.synonyms import EntitySynonyms
    from capr.models.encoder import cache_root

    # the session's cache may hold other exports (an index read at another max length): this index's is at 256
    lengths = [json.loads(m.read_text())["max_length"] for m in (cache_root() / "models").glob("query-onnx-*/meta.json")]
    assert 256 in lengths, lengths
    assert EntitySynonyms.cache_path().is_file()


@pytest.mark.parametrize("args", [
    ("--help",),
    ("search", "{idx}", "how is gout treated", "-r", "bm25"),
    ("search", "{idx}", "how is gout treated"),
    ("search", "{idx}", "--entity", "gout", "--aspect", "treatment"),
], ids=["help", "lexical", "hybrid", "entity-aspect"])
def test_commands_import_no_heavy_dependency(hybrid_index, args):
    mods, proc = imported(*(a.format(idx=hybrid_index) for a in args))
    assert not mods & HEAVY, sorted(mods & HEAVY)
    dense = args[0] == "search" and "bm25" not in args
    assert bool(mods & QUERY_ENCODER) == dense, sorted(mods & QUERY_ENCODER)
    assert "encoded with torch" not in proc.stderr


def test_hybrid_results_equal_the_torch_encoders(hybrid_index, monkeypatch):
    """The same ranking and the same scores with queries encoded by ONNX Runtime as with torch."""
    from capr import Query, load_index
    from capr.search import Searcher

    queries = [Query("q1", "how is gout treated"), Query("q2", entity="IgA nephropathy", aspect="symptoms"),
               Query("q3", "what causes atrial fibrillation"), Query("q4", "inhaler for shortness of breath")]

    def ranked(searcher: Searcher) -> list:
        return [[(h.pid, h.score) for h in searcher.search(q, k=20).hits] for q in queries]

    fast = Searcher(load_index(hybrid_index))
    assert fast.store.encoder().query_side._query_encoder() is not None
    monkeypatch.setenv("CAPR_QUERY_BACKEND", "torch")
    slow = Searcher(load_index(hybrid_index))
    assert slow.store.encoder().query_side._query_encoder() is None
    assert ranked(fast) == ranked(slow)


def test_onnx_query_vectors_equal_torch_on_real_questions():
    """MEDIQA 2019's consumer questions (long, misspelt, cased as people type them) against sentence-transformers
    itself: cosine ≥ 1 − 1e-4 for every one."""
    from sentence_transformers import SentenceTransformer

    from capr.corpus.mediqa import read_task3, task3_path
    from capr.models import Encoder, EncoderConfig
    from capr.models.loading import resolve_model

    data = need_data("mediqa2019").parent
    questions = list(dict.fromkeys(a.question for name in ("mediqa2019", "mediqa2019-train")
                                   for a in read_task3(task3_path(data, name))))
    assert len(questions) > 100
    enc = Encoder(EncoderConfig(), cache=False)
    assert enc.prepare_queries() is None
    assert enc.query_side._query_encoder() is not None  # the ONNX export answers, not torch
    got = enc.encode_queries(questions)
    st = SentenceTransformer(resolve_model("minilm"), device="cpu")
    want = st.encode(questions, normalize_embeddings=True, convert_to_numpy=True)
    assert (got * want).sum(1).min() >= 1 - 1e-4


def test_a_model_without_an_onnx_export_falls_back_to_torch_with_a_note(tmp_path, caplog):
    """Max pooling is not what the export reproduces: its queries stay on torch (same vectors), and say so."""
    from capr.models import Encoder, EncoderConfig
    from capr.models.loading import resolve_model

    source = Path(resolve_model("minilm"))
    model = tmp_path / "max-pooled"
    model.mkdir()
    for f in source.iterdir():
        if f.is_file():
            (model / f.name).symlink_to(f)
    (model / "1_Pooling").mkdir()
    pooling = json.loads((source / "1_Pooling" / "config.json").read_text())
    (model / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "pooling_mode_mean_tokens": False,
                                                                  "pooling_mode_max_tokens": True}))
    enc = Encoder(EncoderConfig(model=str(model)), cache=False)
    assert "pooling" in (enc.prepare_queries() or "")
    with caplog.at_level("WARNING"):
        q = enc.encode_queries(["how is gout treated"])
    assert "encoded with torch" in caplog.text and "pooling" in caplog.text
    np.testing.assert_allclose(q, enc.query_side.encode(["how is gout treated"], ""), atol=1e-6)
