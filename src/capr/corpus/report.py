"""What a read skipped, and the one place that decides between failing and skipping."""

from __future__ import annotations

from dataclasses import dataclass, field

from capr.errors import BadInputError


@dataclass
class ReadReport:
    skip_bad: bool = False
    max_doc_chars: int | None = None  # a longer document text is a bad record (named by file and document id)
    skipped: list[BadInputError] = field(default_factory=list)
    empty: int = 0  # records with no text (e.g. MedQuAD answers removed for copyright)
    duplicates: int = 0
    flagged: int = 0  # records the source itself marks as erroneous (MIMIC-III ISERROR)
    # Where the document last handed on by read_documents was read: (doc_id, file, record or None). The
    # index writer finds some bad records itself (a duplicate document id) and names them by it, as the
    # readers name theirs. ``_at``: what a reader that knows the record (a JSONL line, a FHIR entry) says
    # about the document it is about to yield (see ``at``).
    location: tuple[str, str, str | None] | None = None
    _at: tuple[str, str | None] | None = field(default=None, repr=False)
    # metadata fields some documents give a value no filter can match (a list, an object, a long text): field →
    # [the first such document's id, what its value is, how many documents]. Only those documents lack the field.
    unfilterable: dict[str, list] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # files of a folder passed over, and why

    def bad(self, source: str, reason: str, record: str | None = None) -> None:
        err = BadInputError(source, reason, record)
        if not self.skip_bad:
            raise err
        self.skipped.append(err)

    def note(self, message: str) -> None:
        """A file of a folder passed over as no part of the corpus (said to the user, not an error)."""
        self.notes.append(message)

    def at(self, source: str, record: str | None) -> None:
        """Called by a reader just before it yields a document: the file and record it came from."""
        self._at = (source, record)

    def take_location(self, doc_id: str, default_source: str) -> tuple[str, str | None]:
        """The file and record of a document just read (what its reader said with ``at``, else
        ``default_source``), remembered as ``location``; read_documents calls it once per document."""
        source, record = self._at if self._at is not None else (default_source, None)
        self._at = None
        self.location = (doc_id, source, record)
        return source, record

    def where(self, doc_id: str) -> tuple[str, str | None] | None:
        """The file and record of the document with this id if it is the one last read, else None."""
        if self.location is not None and self.location[0] == doc_id:
            return self.location[1], self.location[2]
        return None

    def unfilterable_value(self, field_name: str, doc_id: str, why: str) -> None:
        """A document's metadata value that was left out of the filters (the index writer calls it)."""
        seen = self.unfilterable.get(field_name)
        if seen is None:
            self.unfilterable[field_name] = [doc_id, why, 1]
        else:
            seen[2] += 1

    def unfilterable_notes(self) -> list[str]:
        """One line per metadata field left out of some documents' filters."""
        notes = []
        for name, (doc_id, why, n) in self.unfilterable.items():
            if n == 1:
                notes.append(f"field {name!r} of document {doc_id!r} is {why}, not a filterable value: left out of "
                             "that document's filters (the other documents keep the field)")
            else:
                notes.append(f"field {name!r} holds no filterable value in {n} documents (the first, {doc_id!r}, has "
                             f"{why}): left out of their filters (the other documents keep the field)")
        return notes

    def counts(self) -> tuple[int, int, int, int]:
        """(skipped, empty, flagged, duplicates) so far: a read's own share is the difference (one report
        can serve several reads)."""
        return len(self.skipped), self.empty, self.flagged, self.duplicates

    def summary(self) -> str:
        parts = []
        if self.skipped:
            parts.append(f"{len(self.skipped)} bad record(s) skipped")
        if self.empty:
            parts.append(f"{self.empty} empty record(s) ignored")
        if self.flagged:
            parts.append(f"{self.flagged} record(s) marked as errors in the source skipped")
        if self.duplicates:
            parts.append(f"{self.duplicates} duplicate(s) merged")
        return ", ".join(parts) or "nothing skipped"
