"""Passage encoding that keeps the model busy: batches are tokenised by worker threads while the model encodes the
batch before them, copied from pinned memory, and run in half precision on a GPU.

sentence-transformers' ``encode()`` tokenises a batch, then encodes it, then tokenises the next: on a GPU the model
waits on the host most of the time. This encoder takes the same steps — the same order of passages (longest first,
by characters), the same batches, the same tokeniser settings — so on the CPU its vectors equal ``encode()``'s bit
for bit; it only overlaps them. On a GPU it also uses larger batches and float16 autocast (cosine ≥ 0.999 with
``encode()``'s float32 vectors; tests/test_pipelined_encoder.py checks both on the CPU, bench/bench_encode.py times
them side by side).
"""

from __future__ import annotations

import copy
import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

GPU_BATCH = 1024  # length-sorted batches this large keep a GPU busy on MiniLM-sized encoders


class PipelinedEncoder:
    """Encodes texts with a loaded SentenceTransformer ``model`` (what ``model.encode`` would return, unnormalised).

    ``batch_size``: texts per batch (on a GPU at least :data:`GPU_BATCH`); ``threads``: tokenising threads (default:
    the cores the model leaves, at least one); ``half``: float16 autocast (default: on a GPU)."""

    def __init__(self, model: Any, batch_size: int = 32, threads: int | None = None, half: bool | None = None) -> None:
        self.model = model
        self.device = model.device
        on_gpu = self.device.type == "cuda"
        self.batch_size = max(batch_size, GPU_BATCH) if on_gpu else batch_size
        self.threads = threads or max(1, min(8, (os.cpu_count() or 2) - 1))
        self.half = on_gpu if half is None else half
        self._local = threading.local()
        self._tokenizer = model.tokenizer
        self._max_length = model.max_seq_length

    def _tokenize(self, texts: list[str]) -> dict[str, Any]:
        """``model.preprocess(texts)``'s features, from this thread's own copy of the tokeniser (a fast tokeniser
        refuses concurrent use: "Already borrowed"), pinned for an asynchronous copy to the GPU."""
        tok = getattr(self._local, "tokenizer", None)
        if tok is None:
            tok = self._local.tokenizer = copy.deepcopy(self._tokenizer)
        features = dict(tok(texts, padding=True, truncation="longest_first", max_length=self._max_length,
                            return_tensors="pt"))
        if self.device.type == "cuda":
            features = {k: v.pin_memory() for k, v in features.items()}
        return features

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        texts = list(texts)
        if not texts:
            dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
            return np.zeros((0, dim() or 0), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts])  # encode()'s order, ties included
        batches = [order[lo:lo + self.batch_size] for lo in range(0, len(texts), self.batch_size)]
        out: np.ndarray | None = None
        self.model.eval()
        with ThreadPoolExecutor(self.threads, thread_name_prefix="capr-tokenize") as pool, torch.inference_mode():
            pending: deque = deque()
            ahead = iter(batches)
            for b in ahead:
                pending.append((b, pool.submit(self._tokenize, [texts[i] for i in b])))
                if len(pending) >= 2 * self.threads:
                    break
            while pending:
                rows, future = pending.popleft()
                nxt = next(ahead, None)
                if nxt is not None:
                    pending.append((nxt, pool.submit(self._tokenize, [texts[i] for i in nxt])))
                features = {k: v.to(self.device, non_blocking=True) for k, v in future.result().items()}
                with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.half):
                    emb = self.model(features)["sentence_embedding"]
                emb = emb.float().cpu().numpy()
                if out is None:
                    out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
                out[rows] = emb
        assert out is not None
        return out


__all__ = ["GPU_BATCH", "PipelinedEncoder"]
