"""Record stores: JSON Lines plus a memory-mapped offsets array for O(1) random access."""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np

from capr.filters import column_lookup, value_key
from capr.index.atomic import write_npy
from capr.index.reading import damaged, load_npy, read_json, reading


class RecordStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = load_npy(path.with_suffix(".offsets.npy"), mmap_mode="r")
        with reading(path):
            self._fh = open(path, "rb")
        size = os.fstat(self._fh.fileno()).st_size
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        # a store cut short (a copy that stopped part-way) would hand out garbled records: refuse it now
        if len(self.offsets) == 0 or int(self.offsets[-1]) > size:
            self._fh.close()
            raise damaged(path, f"holds {size} bytes, its offsets file expects "
                                f"{int(self.offsets[-1]) if len(self.offsets) else 'an entry'}")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def get(self, i: int) -> dict[str, Any]:
        try:
            return json.loads(self.raw(i))
        except ValueError as e:  # the bytes at this record's offsets are not what the writer put there
            raise damaged(self.path, f"record {i}: {e}") from None

    def raw(self, i: int) -> bytes:
        """Record ``i`` as stored: one JSON line, newline included (segment merges copy it unparsed)."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        assert self._mm is not None
        return self._mm[a:b]

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
        self._fh.close()


class Column:
    """A categorical column (one value per passage) for metadata filters: codes + value table."""

    def __init__(self, values: list[Any], codes: np.ndarray) -> None:
        self.values = values
        self.codes = codes
        # missing values (None) are never matched by a filter
        self._lookup = column_lookup(values)

    @staticmethod
    def _key(v: Any) -> str:
        # exact: values differing only in case (patients abC1 and ABc1) are two values (capr.filters.value_key)
        return value_key(v)

    @classmethod
    def build(cls, raw: list[Any]) -> "Column":
        values: list[Any] = []
        index: dict[str, int] = {}
        seen: dict[str, int] = {}  # a string value → its code (most values of a column repeat: its key once)
        codes: list[int] = []
        for v in raw:
            is_str = type(v) is str
            c = seen.get(v) if is_str else None
            if c is None:
                k = cls._key(v) if v is not None else "\x00missing"
                c = index.get(k)
                if c is None:
                    c = index[k] = len(values)
                    values.append(v)
                if is_str:
                    seen[v] = c
            codes.append(c)
        return cls(values, np.asarray(codes, dtype=np.int32).reshape(len(raw)))

    def mask(self, wanted: Any) -> np.ndarray:
        code = self._lookup.get(self._key(wanted))
        if code is None:
            return np.zeros(len(self.codes), dtype=bool)
        return np.asarray(self.codes) == code

    def save(self, directory: Path, name: str, atomic: bool = True) -> None:
        from capr.index.atomic import write_json

        write_json(directory / f"{name}.values.json", self.values, atomic)
        write_npy(directory / f"{name}.codes.npy", self.codes, atomic)

    @classmethod
    def load(cls, directory: Path, name: str) -> "Column":
        values = read_json(directory / f"{name}.values.json")
        return cls(values, load_npy(directory / f"{name}.codes.npy", mmap_mode="r"))
