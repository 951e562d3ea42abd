"""BEIR layout: corpus.jsonl, queries.jsonl (each may be gzip'd: .jsonl.gz), qrels/<split>.tsv (``query-id corpus-id
score`` under a header line, graded). One reader of each file for `capr index` (the corpus) and `capr eval --benchmark
beir:PATH` (capr.eval.beir: queries and judgements); bad records are refused naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

from capr.corpus.files import numbered_lines, open_text
from capr.corpus.jsonl import BEIR_ID_KEYS, read_jsonl
from capr.corpus.report import ReadReport
from capr.errors import BadInputError, CaprError
from capr.records import Document, PairRepeats, Qrel, Query


def beir_file(root: str | Path, stem: str) -> Path | None:
    """``stem``.jsonl or ``stem``.jsonl.gz in ``root``, or None."""
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (Path(root) / name).exists():
            return Path(root) / name
    return None


def beir_folder(path: str | Path) -> Path:
    """``path`` when it holds a corpus, queries and a qrels folder; else one clear error naming what is missing."""
    folder = Path(path)
    if not folder.is_dir():
        raise CaprError(f"{folder}: not a BEIR folder: " + ("it is a file (a BEIR folder holds corpus.jsonl, "
                                                            "queries.jsonl, qrels/)" if folder.exists() else "no such folder"))
    missing = [f"{stem}.jsonl" for stem in ("corpus", "queries") if beir_file(folder, stem) is None]
    missing += [] if (folder / "qrels").is_dir() else ["qrels/"]
    if missing:
        raise CaprError(f"{folder}: not a BEIR folder (missing {', '.join(missing)})")
    return folder


def _need(root: Path, stem: str) -> Path:
    path = beir_file(root, stem)
    if path is None:
        raise BadInputError(str(root), f"BEIR layout needs {stem}.jsonl")
    return path


def beir_records(path: Path) -> Iterator[tuple[int, dict]]:
    """The JSON records of a corpus or queries file with their line numbers: each an object with a non-empty
    ``_id`` and string ``text`` / ``title``."""
    with open_text(path) as fh:
        for lineno, line in numbered_lines(path, fh):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInputError(str(path), f"not JSON: {e.msg}", f"line {lineno}") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("_id"), (str, int)) or str(rec["_id"]) == "":
                raise BadInputError(str(path), "a record needs a non-empty \"_id\"", f"line {lineno}")
            if not isinstance(rec.get("text", ""), str) or not isinstance(rec.get("title", ""), str):
                raise BadInputError(str(path), "\"text\" and \"title\" must be strings", f"line {lineno}")
            yield lineno, rec


def read_beir_corpus(root: Path, report: ReadReport) -> Iterator[Document]:
    """The corpus as `capr index` reads any JSONL documents file (ids from ``_id``). BEIR reads a document as title +
    text, so a record that is only a title (TREC-COVID papers without an abstract) is searchable by it."""
    for doc in read_jsonl(_need(Path(root), "corpus"), report, BEIR_ID_KEYS):
        if doc.title.strip() and not doc.text.strip():
            doc.text = doc.title
        yield doc


def read_beir_queries(root: str | Path, qids: set[str] | None = None) -> list[Query]:
    """The queries (only ``qids`` when given); a query without text is refused."""
    path = _need(Path(root), "queries")
    out = []
    seen: dict[str, tuple[int, str]] = {}
    for lineno, rec in beir_records(path):
        qid = str(rec["_id"])
        if qids is not None and qid not in qids:
            continue
        if not (rec.get("text") or "").strip():
            raise BadInputError(str(path), f"query {qid!r} has no text", f"line {lineno}")
        text = " ".join(rec["text"].split())
        if qid in seen:  # a repeated line is harmless; two texts under one id: which one were the judgements for?
            if seen[qid][1] != text:
                raise BadInputError(str(path), f"query id {qid!r} has another text on line {seen[qid][0]}",
                                    f"line {lineno}")
            continue
        seen[qid] = (lineno, text)
        out.append(Query(qid, text=text))
    return out


def beir_splits(root: str | Path) -> list[str]:
    """The judgement splits of a BEIR folder: the names of its qrels/*.tsv files."""
    return sorted(p.stem for p in (Path(root) / "qrels").glob("*.tsv"))


def read_beir_qrels(root: str | Path, split: str = "test", warn: Callable[[str], None] | None = None) -> list[Qrel]:
    """qrels/``split``.tsv: one judgement per line (tab-separated, else space-separated; BEIR's three columns or
    TREC's four), the header line skipped;
    a pair judged twice with different grades is refused, a repeat of the same grade counted once and said through
    ``warn`` (see PairRepeats)."""
    file = Path(root) / "qrels" / f"{split}.tsv"
    if not file.exists():
        raise CaprError(f"{file}: no such split; available: {', '.join(beir_splits(root)) or 'none'}")
    return read_qrels_file(file, warn)


def read_qrels_file(file: Path, warn: Callable[[str], None] | None = None) -> list[Qrel]:
    """A judgements file in BEIR's layout (query-id, corpus-id, score; tab-separated, else space-separated; a
    header line skipped) or TREC's (query-id, iteration, corpus-id, score), plain or gzip'd; a pair judged twice
    with different grades is refused, a repeat of the same grade counted once and said through ``warn``."""
    out = []
    repeats = PairRepeats(file, "grade", "an earlier judgement")
    with open_text(file) as fh:
        for lineno, line in numbered_lines(file, fh):
            # BEIR writes qrels tab-separated (ids may hold spaces: "doc 1"); a file without tabs splits on blanks
            parts = [p.strip() for p in line.rstrip("\r\n").split("\t")] if "\t" in line else line.split()
            if parts and not parts[-1]:
                parts.pop()  # a trailing tab
            if not any(parts) or (lineno == 1 and not parts[-1].lstrip("-").replace(".", "", 1).isdigit()):
                continue  # the header line
            if len(parts) == 4:  # TREC's layout (query-id iteration corpus-id score), as trec_eval reads it
                parts = [parts[0], parts[2], parts[3]]
            if len(parts) != 3:
                raise BadInputError(str(file), f"qrels lines have 3 columns (query-id corpus-id score) or TREC's 4 "
                                    f"(query-id iteration corpus-id score), found {len(parts)}", f"line {lineno}")
            try:
                score = float(parts[2])
                if not score.is_integer():
                    raise ValueError
            except ValueError:
                raise BadInputError(str(file), f"score must be an integer: {parts[2]!r}", f"line {lineno}") from None
            if repeats.is_new(parts[0], parts[1], int(score), lineno):
                out.append(Qrel(parts[0], parts[1], int(score)))
    if not out:
        raise BadInputError(str(file), "no judgements (a qrels file needs query-id corpus-id score lines under its "
                            "header)")
    if not any(q.relevance > 0 for q in out):
        raise BadInputError(str(file), "no judgement marks a document relevant (every score is 0 or less)")
    repeats.report(warn)
    return out


__all__ = ["beir_file", "beir_folder", "beir_records", "beir_splits", "read_beir_corpus", "read_beir_qrels", "read_beir_queries", "read_qrels_file"]
