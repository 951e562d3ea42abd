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

    def bad(self, source: str, reason: str, record: str | None = None) -> None:
        err = BadInputError(source, reason, record)
        if not self.skip_bad:
            raise err
        self.skipped.append(err)

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
