"""BEIR layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterator

from capr.corpus.files import open_text
from capr.corpus.jsonl import parse_document_json
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document, Qrel, Query


def _find(root: Path, stem: str) -> Path:
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (root / name).exists():
            return root / name
    raise BadInputError(str(root), f"BEIR layout needs {stem}.jsonl")


def read_beir_corpus(root: Path, report: ReadReport) -> Iterator[Document]:
    path = _find(Path(root), "corpus")
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                report.bad(str(path), f"invalid JSON: {e.msg}", f"line {lineno}")
                continue
            doc = parse_document_json(obj, str(path), f"line {lineno}", report)
            if doc is not None:
                yield doc


def read_beir_queries(root: Path) -> Iterator[Query]:
    path = _find(Path(root), "queries")
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                yield Query(qid=str(obj["_id"]), text=obj["text"])
            except (json.JSONDecodeError, KeyError, ValueError) as e:
                raise BadInputError(str(path), f"invalid query: {e}", f"line {lineno}") from None


def read_beir_qrels(root: Path, split: str = "test") -> list[Qrel]:
    path = Path(root) / "qrels" / f"{split}.tsv"
    if not path.exists():
        raise BadInputError(str(path), "no such qrels file")
    out = []
    with open_text(path) as fh:
        rows = csv.reader(fh, delimiter="\t")
        for lineno, row in enumerate(rows, 1):
            if lineno == 1 and row and row[0] == "query-id":
                continue
            if not row:
                continue
            try:
                out.append(Qrel(row[0], row[1], int(float(row[2]))))
            except (IndexError, ValueError):
                raise BadInputError(str(path), f"expected 'query-id<TAB>corpus-id<TAB>score', got {row!r}", f"line {lineno}") from None
    return out
