"""Tables of strings on disk, memory-mapped, found without loading them: ``NAME.bin`` (UTF-8, one after another),
``NAME.offsets.npy`` and ``NAME.sorted.npy`` (the rows in the byte order of their strings, for bisection). A
segment's vocabulary and its document ids are such tables, so that opening a segment, looking up a term or finding a
document costs a few reads, not a dict of every string."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Iterator

import numpy as np

from capr.index.atomic import write_bytes, write_npy
from capr.index.reading import load_npy, reading


def write_strings(directory: Path, name: str, strings: Sequence[str]) -> None:
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    write_bytes(directory / f"{name}.bin", b"".join(encoded), atomic=False)
    write_npy(directory / f"{name}.offsets.npy", offsets, atomic=False)
    order = np.asarray(sorted(range(len(encoded)), key=encoded.__getitem__), dtype=np.int32).reshape(len(encoded))
    write_npy(directory / f"{name}.sorted.npy", order, atomic=False)


def table_files(name: str) -> tuple[str, ...]:
    return f"{name}.bin", f"{name}.offsets.npy", f"{name}.sorted.npy"


class StringTable(Sequence):
    """A table of strings (see the module): ``table[i]``, ``len``, iteration in row order, ``find(s)`` by bisection."""

    def __init__(self, directory: Path, name: str) -> None:
        # plain views of the maps: a bisection indexes them from Python, where a memmap's indexing costs most
        self.offsets = np.asarray(load_npy(directory / f"{name}.offsets.npy", mmap_mode="r"))
        self.sorted = np.asarray(load_npy(directory / f"{name}.sorted.npy", mmap_mode="r"))
        path = directory / f"{name}.bin"
        with reading(path):
            size = path.stat().st_size
        self._blob = np.asarray(np.memmap(path, dtype=np.uint8, mode="r")) if size else np.zeros(0, np.uint8)

    def _bytes(self, i: int) -> bytes:
        return self._blob[int(self.offsets[i]):int(self.offsets[i + 1])].tobytes()

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._bytes(i).decode("utf-8")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __iter__(self) -> Iterator[str]:
        return iter(self.strings())

    def strings(self) -> list[str]:
        """Every string, in row order (decoded at once)."""
        text = self._blob.tobytes()
        off = self.offsets.tolist()
        return [text[a:b].decode("utf-8") for a, b in zip(off, off[1:])]

    def find(self, s: str) -> int | None:
        """The first row holding ``s`` (None when none does)."""
        key = s.encode("utf-8")
        pos = bisect_left(self.sorted, key, key=lambda i: self._bytes(int(i)))
        if pos < len(self.sorted) and self._bytes(int(self.sorted[pos])) == key:
            return int(self.sorted[pos])
        return None


class TermTable(Mapping):
    """A vocabulary as a read-only mapping term → id (its row in the table)."""

    def __init__(self, table: StringTable) -> None:
        self.table = table

    def get(self, term: str, default: int | None = None) -> int | None:  # type: ignore[override]
        i = self.table.find(term)
        return default if i is None else i

    def __getitem__(self, term: str) -> int:
        i = self.table.find(term)
        if i is None:
            raise KeyError(term)
        return i

    def __contains__(self, term: object) -> bool:
        return isinstance(term, str) and self.table.find(term) is not None

    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self) -> Iterator[str]:
        return iter(self.table.strings())

    def terms(self) -> list[str]:
        return self.table.strings()

    def to_dict(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.table.strings())}
