"""BEIR layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterator

from capr.corpus.files import json_lines, open_text
from capr.corpus.jsonl import read_jsonl
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document, Qrel, Query


def _find(root: Path, stem: str) -> Path:
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (root / name).exists():
            return root / name
    raise BadInputError(str(root), f"BEIR layout needs {stem}.jsonl")


def read_beir_corpus(root: Path, report: ReadReport) -> Iterator[Document]:
    return read_jsonl(_find(Path(root), "corpus"), report)


def read_beir_queries(root: Path) -> Iterator[Query]:
    path = _find(Path(root), "queries")
    for record, obj in json_lines(path):
        try:
            yield Query(qid=str(obj["_id"]), text=obj["text"])
        except (KeyError, TypeError, ValueError) as e:
            raise BadInputError(str(path), f"invalid query: {e}", record) from None


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
