"""MTS-Dialog: each row is one labelled clinical-note section paired with a dialogue."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterator

from capr.text.aspects import normalize_aspect
from capr.corpus.files import csv_header, guard_reads, open_text
from capr.corpus.report import ReadReport
from capr.records import Document, Section

_SPLITS = {
    "TrainingSet": "train",
    "ValidationSet": "validation",
    "TestSet-1": "test1",
    "TestSet-2": "test2",
}


def _split_name(path: Path) -> str:
    return next((v for k, v in _SPLITS.items() if k in path.name), path.stem)


def read_mts_dialog(source: Path, report: ReadReport) -> Iterator[Document]:
    source = Path(source)
    files = sorted(source.glob("MTS-Dialog-*.csv*")) if source.is_dir() else [source]
    for path in files:
        split = _split_name(path)
        with open_text(path) as fh:
            reader = csv.DictReader(fh)
            need = {"section_header", "section_text"}
            if not need <= set(csv_header(path, reader)):
                report.bad(str(path), f"not an MTS-Dialog CSV: needs columns {sorted(need)}")
                continue
            for rowno, row in enumerate(guard_reads(path, reader, lambda: f"line {reader.line_num + 1}"), 2):
                text = (row.get("section_text") or "").strip()
                header = (row.get("section_header") or "").strip()
                if not text:
                    report.empty += 1
                    continue
                rid = (row.get("ID") or str(rowno)).strip()
                yield Document(
                    doc_id=f"mtsdialog-{split}-{rid}",
                    title=header,
                    text=text,
                    metadata={"split": split, "section_header": header, "dialogue": row.get("dialogue") or ""},
                    sections=[Section(heading=header, aspect=normalize_aspect(header), start=0, end=len(text))],
                )
