"""The pipelined passage encoder (capr.models.pipelined) returns sentence-transformers' ``encode()`` vectors: equal
bits in float32 (same order, batches and tokeniser settings, tokenised by worker threads), cosine ≥ 0.999 in
float16 autocast (what a GPU runs)."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def minilm():
    from sentence_transformers import SentenceTransformer

    from capr.models.loading import resolve_model

    model = SentenceTransformer(resolve_model("minilm"), device="cpu")
    model.max_seq_length = 128
    return model


def _texts(n: int) -> list[str]:
    rng = random.Random(5)
    words = ("patient denies chest pain shortness of breath metoprolol atrial fibrillation history of "
             "hypertension diabetes the was with and for left right lower lobe consolidation").split()
    texts = [" ".join(rng.choices(words, k=rng.randint(1, 60))) for _ in range(n)]
    texts += ["same length a", "same length b", "same length c"]  # ties in length keep encode()'s order
    texts.append(" ".join(rng.choices(words, k=400)))  # longer than max_seq_length: truncated alike
    return texts


def test_pipelined_vectors_equal_encode_bit_for_bit(minilm):
    from capr.models.pipelined import PipelinedEncoder

    texts = _texts(90)
    expected = minilm.encode(texts, batch_size=8, convert_to_numpy=True)
    got = PipelinedEncoder(minilm, batch_size=8, threads=3).encode(texts)
    assert got.shape == expected.shape
    assert np.array_equal(got, expected)


def test_half_precision_stays_within_cosine_0999(minilm):
    from capr.models.pipelined import PipelinedEncoder

    texts = _texts(40)
    expected = minilm.encode(texts, batch_size=16, convert_to_numpy=True)
    try:
        got = PipelinedEncoder(minilm, batch_size=16, half=True).encode(texts)
    except (RuntimeError, TypeError) as e:  # a torch without float16 autocast on the CPU
        pytest.skip(f"float16 autocast on the CPU: {e}")
    cos = (got * expected).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    assert not np.array_equal(got, expected)  # the half-precision path did run
    assert cos.min() >= 0.999, cos.min()


def test_no_texts_no_vectors(minilm):
    from capr.models.pipelined import PipelinedEncoder

    assert PipelinedEncoder(minilm).encode([]).shape == (0, 384)
