"""JSON Lines: one document per line with at least ``text``; other keys become metadata. A ``.json`` file holding one
array of such objects is read the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from capr.corpus.files import json_records
from capr.corpus.report import ReadReport
from capr.records import Document, check_doc_id

ID_KEYS = ("doc_id", "id", "_id", "docid")
# BEIR's corpus names a document by "_id" (an "id" beside it is some other identifier, e.g. a PubMed id)
BEIR_ID_KEYS = ("_id", "doc_id", "id", "docid")
_RESERVED = {"text", "title", "metadata", "sections", *ID_KEYS}


def parse_document_json(obj: object, source: str, record: str, report: ReadReport,
                        id_keys: tuple[str, ...] = ID_KEYS) -> Document | None:
    if not isinstance(obj, dict):
        report.bad(source, f"expected a JSON object, got {type(obj).__name__}", record)
        return None
    text = obj.get("text")
    if not isinstance(text, str):
        report.bad(source, "missing string field 'text'", record)
        return None
    key = next((k for k in id_keys if obj.get(k) not in (None, "")), None)
    if key is None:
        report.bad(source, f"missing document id (one of {', '.join(id_keys)})", record)
        return None
    try:
        doc_id = check_doc_id(obj[key])  # ["x"] used to be stored as the id "['x']"
    except ValueError as e:
        report.bad(source, f"field {key!r}: document id {e}", record)
        return None
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        report.bad(source, "'metadata' must be an object", record)
        return None
    meta = {**{k: v for k, v in obj.items() if k not in _RESERVED}, **meta}
    return Document(doc_id=doc_id, title=str(obj.get("title") or ""), text=text, metadata=meta)


def read_jsonl(path: Path, report: ReadReport, id_keys: tuple[str, ...] = ID_KEYS) -> Iterator[Document]:
    path = Path(path)
    for record, obj in json_records(path, report):
        doc = parse_document_json(obj, str(path), record, report, id_keys)
        if doc is not None:
            report.at(str(path), record)
            yield doc
