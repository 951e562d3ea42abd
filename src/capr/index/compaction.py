"""What a commit makes of the segments: which stay (with their new live masks), which are dropped (fully deleted),
which are merged (the merge policy, or everything for `capr compact`), and the fields the new generation has."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from capr.index.merge import MergePolicy, merge_segments
from capr.index.meta import SegmentMeta
from capr.index.segment import SEGMENTS, Segment

if TYPE_CHECKING:
    from capr.index.index import Index

_MAX_MERGE_ROUNDS = 64


@dataclass
class Entry:
    """One segment of the generation being committed."""

    name: str
    segment: Segment | None  # opened (or adopted from the writer) when something needs it
    live: np.ndarray  # passage live mask
    doc_live: np.ndarray  # document live mask
    unchanged: bool  # masks as in the base generation (linked, not rewritten)

    def opened(self, root: Path) -> Segment:
        if self.segment is None:
            self.segment = Segment(root / SEGMENTS / self.name)
        return self.segment


def base_entries(base: "Index", deleted: set[str]) -> list[Entry]:
    """The base generation's segments with ``deleted`` documents tombstoned, fully deleted segments left out. Only
    segments losing documents get new masks: the work is proportional to the documents deleted, not to the index."""
    entries: list[Entry] = []
    hit = base.segments_with(deleted) if deleted else set()
    for si, (seg, plive, dlive) in enumerate(zip(base.segments, base.seg_live, base.seg_doc_live)):
        if si in hit:
            gone = [r for d in deleted if (r := seg.doc_row(d)) is not None and dlive[r]]
            dlive = dlive.copy()
            dlive[gone] = False
            plive = plive & ~np.isin(seg.passage_doc_rows, gone)
        if not plive.any():
            continue  # fully deleted segments are dropped, and collected after commit
        entries.append(Entry(seg.name, seg, plive, dlive, si not in hit))
    return entries


def new_entry(name: str, segment: Segment | None, n_passages: int, n_documents: int) -> Entry:
    """A segment this write made: every row live."""
    return Entry(name, segment, np.ones(n_passages, dtype=bool), np.ones(n_documents, dtype=bool), False)


def merge_entries(root: Path, entries: list[Entry], policy: MergePolicy | None, compact: bool, hnsw_threshold: int,
                  merged: list[str], note: Callable[[str], None]) -> list[Entry]:
    """Applies the merge policy (or, with ``compact``, merges everything into one) until it asks for nothing more.
    The name of each segment written is appended to ``merged`` as soon as it exists (a failed commit removes them)."""
    rounds = 0
    while entries:
        if compact:
            windows = [(0, len(entries))] if len(entries) > 1 or not entries[0].live.all() else []
        elif policy is not None:
            windows = policy.find_merges([int(np.count_nonzero(e.live)) for e in entries], [len(e.live) for e in entries])
        else:
            windows = []
        if not windows or rounds > _MAX_MERGE_ROUNDS:
            break
        rounds += 1
        for lo, hi in reversed(windows):  # from the end, so earlier windows keep their positions
            note(f"merging {hi - lo} segment(s)")
            parts = [(e.opened(root), e.live, e.doc_live) for e in entries[lo:hi]]
            name = merge_segments(root, parts, hnsw_threshold)
            merged.append(name)
            seg = Segment(root / SEGMENTS / name)
            entries[lo:hi] = [new_entry(name, seg, seg.n_passages, seg.n_documents)]
        if compact:
            break
    return entries


def generation_fields(root: Path, entries: list[Entry],
                      base_dead: dict[str, list[str]] | None) -> tuple[list[str], dict[str, list[str]]]:
    """The filterable fields of the new generation — those a live passage has, as in a rebuild: a field only deleted
    or replaced documents had is not one — and, per segment, its fields no live passage has. Those are kept in the
    manifest, so a commit looks again only at the segments it deletes from (``base_dead`` None, a manifest without
    them: at every segment with deleted passages, once)."""
    fields: set[str] = set()
    dead_fields: dict[str, list[str]] = {}
    for e in entries:
        names = e.segment.fields if e.segment is not None else SegmentMeta.read(root / SEGMENTS / e.name).fields
        if e.live.all():
            dead: list[str] = []
        elif e.unchanged and base_dead is not None:
            dead = list(base_dead.get(e.name, []))
        else:
            dead = sorted(set(names).difference(e.opened(root).live_fields(e.live)))
        if dead:
            dead_fields[e.name] = dead
        fields.update(f for f in names if f not in dead)
    return sorted(fields), dead_fields
