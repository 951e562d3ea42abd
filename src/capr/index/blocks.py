"""Compressed block files: a byte stream cut into blocks of ``BLOCK_BYTES`` logical bytes, each compressed on its own
with zstd (``NAME.zst``, the compressed blocks one after another, and ``NAME.blocks.npy``, where each block starts).
Any byte range is read by decompressing only the blocks it touches: a passage or a document header is one or two
small decompressions, never its neighbours' whole file."""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import numpy as np

from capr.errors import CaprError
from capr.index.atomic import write_npy
from capr.index.reading import damaged, load_npy, reading

try:
    import zstandard
except ImportError:  # pragma: no cover - a dependency of capr; said clearly if a broken install lacks it
    zstandard = None

BLOCK_BYTES = 1 << 16
LEVEL = 3  # zstd's default: ~3× on clinical text at several hundred MB/s
_CACHED_BLOCKS = 32


def _zstd():
    if zstandard is None:
        raise CaprError("capr's index needs the zstandard package: pip install zstandard")
    return zstandard


class BlockWriter:
    """Appends bytes to a block file; ``close`` writes the last (short) block and the block index."""

    def __init__(self, path: Path, block_bytes: int = BLOCK_BYTES) -> None:
        self.path = Path(path)
        self.block_bytes = block_bytes
        self._fh = open(self.path, "wb")
        self._buf = bytearray()
        self._starts = [0]
        self._compress = _zstd().ZstdCompressor(level=LEVEL).compress
        self.size = 0  # logical bytes written so far

    def write(self, data: bytes) -> int:
        """Appends ``data``; returns the logical offset where it starts."""
        at = self.size
        self._buf += data
        self.size += len(data)
        if len(self._buf) >= self.block_bytes:
            self._spill()
        return at

    def _spill(self, final: bool = False) -> None:
        b = self.block_bytes
        buf = self._buf
        done = 0
        while len(buf) - done >= b or (final and done < len(buf)):
            self._fh.write(self._compress(bytes(buf[done:done + b])))
            self._starts.append(self._fh.tell())
            done += b
        del buf[:done]

    def close(self) -> None:
        """Writes what is buffered and the block index, and fsyncs both (the folder is renamed into place later)."""
        self._spill(final=True)
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        write_npy(self.path.with_suffix(".blocks.npy"), np.asarray(self._starts, dtype=np.int64), atomic=False)

    def abort(self) -> None:
        if not self._fh.closed:
            try:
                self._fh.close()
            except OSError:  # flushing the buffer fails again on a full disk; the file is closed anyway
                pass


class BlockReader:
    """Reads logical byte ranges of a block file (memory-mapped; a few decompressed blocks kept)."""

    def __init__(self, path: Path, size: int, block_bytes: int = BLOCK_BYTES) -> None:
        """``size``: the logical bytes the file holds (its writer's ``size``), which its block index must match."""
        self.path = Path(path)
        self.block_bytes = block_bytes
        self.size = size
        self.starts = load_npy(self.path.with_suffix(".blocks.npy"))
        with reading(self.path):
            self._fh = open(self.path, "rb")
        on_disk = os.fstat(self._fh.fileno()).st_size
        blocks = -(-size // block_bytes)
        if len(self.starts) != blocks + 1 or int(self.starts[-1]) != on_disk:
            self._fh.close()
            raise damaged(self.path, f"holds {on_disk} bytes in {len(self.starts) - 1} blocks, expected {blocks} "
                                     f"blocks ending at byte {int(self.starts[-1]) if len(self.starts) else 0}")
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if on_disk else None
        self._cache: dict[int, bytes] = {}
        self._local = threading.local()  # a zstd decompressor per thread (they are not shared between threads)

    def _block(self, i: int) -> bytes:
        data = self._cache.get(i)
        if data is None:
            dctx = getattr(self._local, "dctx", None)
            if dctx is None:
                dctx = self._local.dctx = _zstd().ZstdDecompressor()
            try:
                data = dctx.decompress(self._mm[int(self.starts[i]):int(self.starts[i + 1])])
            except (_zstd().ZstdError, TypeError) as e:
                raise damaged(self.path, f"block {i}: {e}") from None
            if len(self._cache) >= _CACHED_BLOCKS:
                self._cache.clear()
            self._cache[i] = data
        return data

    def read(self, start: int, end: int) -> bytes:
        """Logical bytes [start, end)."""
        if end <= start:
            return b""
        if start < 0 or end > self.size:
            raise damaged(self.path, f"bytes {start}..{end} asked of {self.size}")
        b = self.block_bytes
        first, last = start // b, (end - 1) // b
        if first == last:
            off = start - first * b
            return self._block(first)[off:off + end - start]
        data = b"".join(self._block(i) for i in range(first, last + 1))
        off = start - first * b
        return data[off:off + end - start]

    def release(self) -> None:
        """Unmaps the pages read so far (they stay in the page cache): a merge that reads whole streams once does not
        keep them resident."""
        if self._mm is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._mm.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
        self._fh.close()
