"""Filter columns: one categorical value per passage (codes + a table of distinct values)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from capr.filters import column_lookup, value_key
from capr.index.atomic import write_json, write_npy
from capr.index.reading import load_npy, read_json


class Column:
    """A categorical column (one value per passage) for metadata filters: codes + value table."""

    def __init__(self, values: list[Any], codes: np.ndarray) -> None:
        self.values = values
        self.codes = codes

    @cached_property
    def _lookup(self) -> "ValueCodes":
        """Filter key → code (a column of document ids has as many values as documents); missing values (None) are
        never matched by a filter."""
        return ValueCodes(self.values)

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
        """Codes are stored in the smallest unsigned type that holds them (a column of a few aspects: one byte a row)."""
        write_json(directory / f"{name}.values.json", self.values, atomic)
        n = len(self.values)
        small = np.uint8 if n <= 1 << 8 else np.uint16 if n <= 1 << 16 else np.int32
        write_npy(directory / f"{name}.codes.npy", np.asarray(self.codes).astype(small, copy=False), atomic)

    @classmethod
    def load(cls, directory: Path, name: str) -> "Column":
        values = read_json(directory / f"{name}.values.json")
        return cls(values, load_npy(directory / f"{name}.codes.npy", mmap_mode="r"))


class ValueCodes:
    """A column's filter key → code, as :func:`capr.filters.column_lookup`'s dict gives it. The first few text keys
    are found by scanning the values (one C-speed pass, exact: text equals only the same text), so that a cold
    one-patient search does not hash every patient id of every segment; from then on the dict is built and kept."""

    SCANS = 2

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self._codes: dict[str, int] | None = None
        self._scanned = 0

    def get(self, key: str, default: int | None = None) -> int | None:
        if self._codes is None:
            if key.startswith("s:") and self._scanned < self.SCANS:
                self._scanned += 1
                try:
                    return self.values.index(key[2:])
                except ValueError:
                    return default
            self._codes = column_lookup(self.values)
        return self._codes.get(key, default)
