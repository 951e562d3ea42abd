"""MedQuAD: the full XML collection (tarball, directory or single file) and the CDV test split."""

from __future__ import annotations

import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterator

from capr.text.aspects import normalize_aspect
from capr.corpus.files import READ_ERRORS, json_lines, read_error_reason, wanted_files
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document, Qrel, Query, Section

SEPARATOR = "\n\n"


def _compose(doc_id: str, title: str, parts: list[tuple[str, str, str, str]], metadata: dict) -> Document:
    """parts: (section_id, heading, aspect, text) → one document whose sections are the answers."""
    chunks, sections, pos = [], [], 0
    for sid, heading, aspect, text in parts:
        if chunks:
            chunks.append(SEPARATOR)
            pos += len(SEPARATOR)
        chunks.append(text)
        sections.append(Section(heading=heading, aspect=aspect, start=pos, end=pos + len(text), section_id=sid))
        pos += len(text)
    return Document(doc_id=doc_id, title=title, text="".join(chunks), metadata=metadata, sections=sections)


def _find(el: ET.Element, *names: str) -> ET.Element | None:
    wanted = {n.lower() for n in names}
    return next((c for c in el.iter() if c.tag.lower() in wanted), None)


def _text(el: ET.Element | None) -> str:
    return (el.text or "").strip() if el is not None else ""


def parse_medquad_xml(data: bytes, source: str, report: ReadReport, subset: str = "") -> Document | None:
    """All MedQuAD schemas: <Document>/<DiseaseFile> with <QAPairs><QAPair>, and <doc><qaPairs><pair> (NINDS)."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        report.bad(source, f"invalid XML: {e}")
        return None
    if _find(root, "QAPairs", "qaPairs") is None:
        report.bad(source, f"not a MedQuAD document (<{root.tag}> has no QAPairs)")
        return None
    src = root.get("source") or root.get("corpus") or subset or "MedQuAD"
    doc_id = f"{src}_{root.get('id') or root.get('docid') or root.get('fid')}"
    focus = _text(_find(root, "Focus", "doctitle-focus"))
    parts = []
    for qa in (c for c in root.iter() if c.tag.lower() in ("qapair", "pair")):
        q = _find(qa, "Question")
        answer = _text(_find(qa, "Answer"))
        if q is None or not answer:
            continue
        qtype = q.get("qtype") or "information"
        parts.append((f"{src}_{q.get('qid')}", _text(q), normalize_aspect(qtype), answer))
    if not parts:
        report.empty += 1
        return None
    meta = {
        "source": src,
        "url": root.get("url", ""),
        "focus": focus,
        "subset": subset,
        "file": source,
        "semantic_group": _text(_find(root, "SemanticGroup")),
        "cuis": [c.text for c in root.iter() if c.tag.lower() == "cui" and c.text],
        # the focus' other names (GARD, GHR, MedlinePlus): the aliases of a disease profile (capr.cases.profiles)
        "synonyms": [c.text.strip() for c in root.iter() if c.tag.lower() == "synonym" and c.text and c.text.strip()],
    }
    report.at(source, None)
    return _compose(doc_id, focus, parts, meta)


def read_medquad_file(path: Path, report: ReadReport, subset: str = "") -> Document | None:
    """One MedQuAD XML file (None: a bad or empty one, reported)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        report.bad(str(path), read_error_reason(e))
        return None
    return parse_medquad_xml(data, str(path), report, subset=subset)


def read_medquad(source: Path, report: ReadReport) -> Iterator[Document]:
    source = Path(source)
    if source.is_dir():
        for path in wanted_files(source, report, lambda p: p.suffix.lower() == ".xml"):
            doc = read_medquad_file(path, report, subset=path.parent.name)
            if doc is not None:
                yield doc
        return
    if source.suffix.lower() == ".xml":
        doc = read_medquad_file(source, report)
        if doc is not None:
            yield doc
        return
    try:
        tar = tarfile.open(source, "r:*")
    except tarfile.TarError:
        # tarfile's message lists every compression it tried, one per line: say it in one
        raise BadInputError(str(source), "not a readable tar archive (plain, gzip, bzip2 or xz)") from None
    except READ_ERRORS as e:
        raise BadInputError(str(source), read_error_reason(e)) from None
    with tar:
        members = iter(tar)  # streaming: members are read in archive order
        while True:
            member = None
            try:
                member = next(members, None)
                if member is None:
                    break
                if not (member.isfile() and member.name.endswith(".xml")):
                    continue
                fh = tar.extractfile(member)
                data = fh.read() if fh else b""
            except READ_ERRORS as e:  # a cut or damaged archive: fatal, like a damaged gzip stream
                where = f"member {member.name}" if member is not None else None
                raise BadInputError(str(source), read_error_reason(e), where) from None
            subset = Path(member.name).parent.name
            doc = parse_medquad_xml(data, f"{source}:{member.name}", report, subset=subset)
            if doc is not None:
                yield doc


# --- CDV test split --------------------------------------------------------------------


def _cdv_files(source: Path) -> tuple[Path, Path | None]:
    if source.is_dir():
        return source / "passages.jsonl.gz", (source / "queries.jsonl.gz")
    return source, None


def read_medquad_cdv(source: Path, report: ReadReport) -> Iterator[Document]:
    """Documents of the CDV MedQuAD test split, each answer a section whose id is the benchmark pid."""
    passages, _ = _cdv_files(Path(source))
    current: str | None = None
    parts: list[tuple[str, str, str, str]] = []
    first: dict = {}
    seen: set[str] = set()
    for record, rec in json_lines(passages, report):
        try:
            pid, doc_id, text = rec["pid"], rec["doc_id"], rec["text"]
        except (KeyError, TypeError) as e:
            report.bad(str(passages), f"invalid passage record: missing {e}", record)
            continue
        if doc_id != current:
            if parts:
                yield _cdv_document(first, parts)
            if doc_id in seen:
                report.bad(str(passages), f"document {doc_id} is not contiguous in the file", record)
            seen.add(doc_id)
            current, parts, first = doc_id, [], rec
        qtype = rec.get("medquad_qtype") or rec.get("aspect") or "information"
        parts.append((pid, qtype, normalize_aspect(rec.get("aspect") or qtype), text))
    if parts:
        yield _cdv_document(first, parts)


def _cdv_document(rec: dict, parts: list[tuple[str, str, str, str]]) -> Document:
    meta = {k: rec.get(k, "") for k in ("entity", "entity_id", "source_subset", "url", "medquad_file")}
    return _compose(rec["doc_id"], rec.get("doc_title") or rec.get("entity", ""), parts, meta)


def read_medquad_cdv_queries(source: Path) -> tuple[list[Query], list[Qrel], dict[str, dict]]:
    """Queries (text = natural question, entity + aspect heading = tuple), qrels, and raw records by qid."""
    _, qpath = _cdv_files(Path(source))
    if qpath is None:
        qpath = Path(source).with_name("queries.jsonl.gz")
    queries, qrels, raw = [], [], {}
    for record, rec in json_lines(qpath):
        try:
            q = Query(qid=rec["qid"], text=rec["question"], entity=rec["entity"], aspect=rec["aspect_heading"])
            rel = list(rec["relevant_pids"])
        except (KeyError, TypeError, ValueError) as e:
            raise BadInputError(str(qpath), f"invalid query record: {e}", record) from None
        queries.append(q)
        raw[q.qid] = rec
        qrels.extend(Qrel(q.qid, pid, 1) for pid in rel)
    return queries, qrels, raw
