"""A file of questions, as users and benchmarks keep them: JSON lines or one JSON array (BEIR's ``queries.jsonl``:
``_id`` and ``text``; also ``id``/``qid``/``query_id`` and ``query``/``question``, with optional ``entity`` and
``aspect`` for ⟨entity, aspect⟩ questions), tab-separated lines ``QUERY-ID<TAB>TEXT`` (ir_datasets' and MS MARCO's
layout; a header line naming the columns is skipped), or TREC topics (classic ``<top>`` SGML or ``<topic>`` XML,
:mod:`capr.corpus.topics`). Gzip'd files are read as they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from capr.corpus.files import json_records, numbered_lines, open_text
from capr.corpus.topics import read_topics, topics_format
from capr.errors import BadInputError, CaprError
from capr.records import Query

QUERY_ID_KEYS = ("_id", "id", "qid", "query_id", "query-id")
QUERY_TEXT_KEYS = ("text", "query", "question")
_TSV_NAMES = (".tsv", ".tsv.gz", ".txt", ".txt.gz")


def _record_query(rec: Any) -> Query:
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    key = next((k for k in QUERY_ID_KEYS if rec.get(k) not in (None, "")), None)
    if key is None or not isinstance(rec[key], (str, int)) or isinstance(rec[key], bool):
        raise ValueError(f"a question needs an id ({', '.join(QUERY_ID_KEYS)}) as a string or number")
    parts: dict[str, str | None] = {}
    for name, keys in (("text", QUERY_TEXT_KEYS), ("entity", ("entity",)), ("aspect", ("aspect",))):
        value = next((rec[k] for k in keys if rec.get(k) not in (None, "")), None)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"field {name!r} must be a string, got {type(value).__name__}")
        parts[name] = " ".join(value.split()) if value else None
    if not any(parts.values()):
        raise ValueError(f"question {rec[key]!r} has no text ({', '.join(QUERY_TEXT_KEYS)}), entity or aspect")
    return Query(str(rec[key]), **parts)


def _tsv_queries(path: Path) -> Iterator[tuple[str, Query]]:
    with open_text(path) as fh:
        for lineno, line in numbered_lines(path, fh):
            if not line.strip():
                continue
            cells = line.rstrip("\r\n").split("\t")
            if lineno == 1 and cells[0].strip().lower() in QUERY_ID_KEYS + ("query", "topic") and len(cells) == 2 \
                    and cells[1].strip().lower() in QUERY_TEXT_KEYS + ("title",):
                continue  # a header line
            if len(cells) != 2 or not cells[0].strip() or not cells[1].strip():
                raise BadInputError(str(path), f"a line holds a question id and its text, separated by one tab; found "
                                    f"{len(cells)} column(s)" + (" with an empty one" if len(cells) == 2 else ""),
                                    f"line {lineno}")
            yield f"line {lineno}", Query(cells[0].strip(), text=" ".join(cells[1].split()))


def _json_queries(path: Path) -> Iterator[tuple[str, Query]]:
    for where, rec in json_records(path):
        try:
            yield where, _record_query(rec)
        except ValueError as e:
            raise BadInputError(str(path), str(e), where) from None


def read_queries(path: str | Path, topic_field: str | None = None, notes: list[str] | None = None) -> list[Query]:
    """The questions of ``path`` in file order. A question id given twice is refused (a run holds one ranking per
    id), naming both places. ``topic_field``: for TREC topics, the field whose text is the question (``desc``), or
    several joined by commas (``title,desc``); by default the first of title, summary and query a topic has, else all
    its fields (Precision Medicine's disease, gene, …; Clinical Trials' text). A topic with only some of the named
    fields is searched by those, one with none of them by its default question, said in ``notes``; a field no topic
    has is refused."""
    path = Path(path)
    if not path.is_file():
        raise CaprError(f"{path}: no such questions file")
    chosen = None
    if topic_field is not None:
        chosen = tuple(name.strip().lower() for name in topic_field.split(","))
        if not all(chosen):
            raise CaprError(f"topic field {topic_field!r}: name a field (desc) or several joined by commas "
                            "(title,desc)")
    kind = topics_format(path)
    if kind is None and chosen is not None:
        raise BadInputError(str(path), f"a topic field ({topic_field}) chooses the text of TREC topics (<top> or "
                            "<topic> elements); this file holds JSON or tab-separated questions")
    if kind is not None:
        questions = read_topics(path, kind, chosen, notes)
    else:
        questions = (_tsv_queries if path.name.lower().endswith(_TSV_NAMES) else _json_queries)(path)
    out: list[Query] = []
    seen: dict[str, str] = {}
    for where, q in questions:
        if q.qid in seen:
            raise BadInputError(str(path), f"question id {q.qid!r} is given again (first at {seen[q.qid]}): a run holds "
                                "one ranking per id", where)
        seen[q.qid] = where
        out.append(q)
    if not out:
        raise BadInputError(str(path), "no questions")
    return out


__all__ = ["QUERY_ID_KEYS", "QUERY_TEXT_KEYS", "read_queries"]
