"""On-disk embedding cache keyed by (model key, hash of text): re-indexing unchanged passages is free."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path
from typing import Sequence

import numpy as np


def _h(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class EmbeddingCache:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS emb (model TEXT, h BLOB, dim INTEGER, vec BLOB, PRIMARY KEY (model, h))")
        self._db.commit()
        self.hits = 0
        self.misses = 0

    def get_many(self, model: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        keys = [_h(t) for t in texts]
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            for lo in range(0, len(keys), 500):
                chunk = keys[lo : lo + 500]
                q = f"SELECT h, vec FROM emb WHERE model = ? AND h IN ({','.join('?' * len(chunk))})"
                for h, vec in self._db.execute(q, [model, *chunk]):
                    found[h] = np.frombuffer(vec, dtype=np.float32)
        out = [found.get(k) for k in keys]
        n_hit = sum(v is not None for v in out)
        self.hits += n_hit
        self.misses += len(out) - n_hit
        return out

    def put_many(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        rows = [(model, _h(t), int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes()) for t, v in zip(texts, vectors)]
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?, ?, ?)", rows)
            self._db.commit()

    def close(self) -> None:
        self._db.close()
