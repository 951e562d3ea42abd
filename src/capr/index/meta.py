"""The typed on-disk meta of an index: a generation's ``manifest.json`` (:class:`IndexMeta`) and a segment's
``segment.json`` (:class:`SegmentMeta`), read and written through these dataclasses only (as tantivy's
``IndexMeta``). The index interprets every field but ``dense``: the application's payload (the encoder, and what
`capr adapt` records beside it: fusion, re-ranker), stored and handed back as it was given.
``tests/test_index_meta.py`` pins both files against golden JSON."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from capr._version import __version__
from capr.corpus.segment import SegmenterConfig
from capr.errors import CaprError, IndexError_
from capr.index.atomic import write_json
from capr.index.reading import damaged, read_json
from capr.text.analyzer import AnalyzerConfig
from capr.text.bm25 import BM25Params

FORMAT_VERSION = 3
MANIFEST = "manifest.json"
SEGMENT_META = "segment.json"


@dataclass
class IndexMeta:
    """One generation: its settings, the segments it names, and counts of its live documents and passages."""

    generation: str
    analyzer: AnalyzerConfig
    bm25: BM25Params
    segmenter: SegmenterConfig
    segments: list[str]
    counts: dict[str, int]  # {"documents": live documents, "passages": live passages}
    fields: list[str]  # filterable fields a live passage has
    # per segment, its fields no live passage has (None: not recorded, by a manifest written before it was)
    dead_fields: dict[str, list[str]] | None = None
    dense: dict[str, Any] | None = None  # the application's payload: {"encoder": ..., "dim": ...} and what it adds
    hnsw_threshold: int | None = None
    format_version: int = FORMAT_VERSION
    capr_version: str = __version__
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    write_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The manifest as JSON, keys in the order capr has always written them."""
        return {
            "format_version": self.format_version,
            "capr_version": self.capr_version,
            "generation": self.generation,
            "created": self.created,
            "analyzer": self.analyzer.to_dict(),
            "bm25": asdict(self.bm25),
            "segmenter": asdict(self.segmenter),
            "dense": self.dense,
            "hnsw_threshold": self.hnsw_threshold,
            "segments": list(self.segments),
            "counts": dict(self.counts),
            "fields": list(self.fields),
            "dead_fields": self.dead_fields,
            "write_seconds": self.write_seconds,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "IndexMeta":
        """Raises KeyError, TypeError or ValueError for JSON that is not a capr manifest, and CaprError for settings
        this capr cannot read (see AnalyzerConfig.from_dict)."""
        counts = d["counts"]
        return cls(
            generation=str(d["generation"]),
            analyzer=AnalyzerConfig.from_dict(d["analyzer"]),
            bm25=BM25Params(**d["bm25"]),
            segmenter=SegmenterConfig(**d["segmenter"]),
            segments=[str(n) for n in d["segments"]],
            counts={"documents": int(counts["documents"]), "passages": int(counts["passages"])},
            fields=[str(f) for f in d["fields"]],
            dead_fields=d.get("dead_fields"),
            dense=d.get("dense"),
            hnsw_threshold=d.get("hnsw_threshold"),
            format_version=int(d["format_version"]),
            capr_version=str(d.get("capr_version", "")),
            created=str(d.get("created", "")),
            write_seconds=d.get("write_seconds"),
        )

    def write(self, gen_dir: Path) -> None:
        """Into a generation folder still being prepared (it becomes visible by its own rename)."""
        write_json(gen_dir / MANIFEST, self.to_dict(), atomic=False)

    @classmethod
    def read(cls, gen_dir: Path, root: Path) -> "IndexMeta":
        """The manifest of ``gen_dir``: a DamagedIndexError when it is not one, an IndexError_ naming ``root`` when it
        is of another format or holds settings this capr cannot read."""
        path = gen_dir / MANIFEST
        raw = read_json(path)
        if not isinstance(raw, dict):
            raise damaged(path, f"not a JSON object (a {type(raw).__name__})")
        if raw.get("format_version") != FORMAT_VERSION:
            raise IndexError_(f"{root}: index format {raw.get('format_version')} is not supported "
                              f"(this capr reads format {FORMAT_VERSION}); rebuild it with `capr index`")
        try:  # valid JSON that lacks a setting capr wrote is as damaged as invalid JSON
            return cls.from_dict(raw)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise damaged(path, f"not a capr manifest ({type(e).__name__}: {e})") from None
        except CaprError as e:
            raise IndexError_(f"{root}: {e}") from None


@dataclass
class SegmentMeta:
    """One immutable segment: its rows and the filter columns it holds."""

    documents: int
    passages: int
    fields: list[str]
    streams: dict[str, int]  # logical bytes of each compressed stream of the document store (capr.index.docstore)
    block_bytes: int  # logical bytes per compressed block
    # the rows' summed lengths (BM25's average length), so that opening an index does not read every length array;
    # None in segments written before it was recorded
    total_len: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"documents": self.documents, "passages": self.passages, "fields": list(self.fields),
             "streams": dict(self.streams), "block_bytes": self.block_bytes}
        if self.total_len is not None:
            d["total_len"] = self.total_len
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SegmentMeta":
        total = d.get("total_len")
        return cls(documents=int(d["documents"]), passages=int(d["passages"]), fields=list(d["fields"]),
                   streams={str(k): int(v) for k, v in d["streams"].items()}, block_bytes=int(d["block_bytes"]),
                   total_len=float(total) if total is not None else None)

    def write(self, seg_dir: Path) -> None:
        write_json(seg_dir / SEGMENT_META, self.to_dict(), atomic=False)

    @classmethod
    def read(cls, seg_dir: Path) -> "SegmentMeta":
        path = seg_dir / SEGMENT_META
        try:
            return cls.from_dict(read_json(path))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise damaged(path, f"not a segment description ({type(e).__name__}: {e})") from None


__all__ = ["FORMAT_VERSION", "IndexMeta", "SegmentMeta"]
