"""FHIR R4 clinical documents: JSON resources, Bundles and NDJSON bulk-export files (a file or a folder).

Read: ``DocumentReference`` (text/plain and text/html attachments with inline base64 ``data``),
``Composition`` (sections with title, LOINC code and XHTML narrative ``text.div``, nested sections) and
``DiagnosticReport`` (``presentedForm`` attachments, else ``conclusion``). Other resource types (Patient,
Encounter, Observation, ...) are not documents and are passed over; inside a Bundle, PractitionerRole
entries give the author's role.

Each resource is validated with the ``fhir.resources`` models (R4B, identical to R4 for these three
resources) before it is read, so a malformed one is reported with the field at fault instead of being
half-read. Composition sections get their aspect from the LOINC code (capr.text.aspects.LOINC_ASPECTS),
their title being the fallback.

Metadata: ``patient`` and ``encounter`` (the referenced ids), ``date`` (ISO 8601), ``note_type`` (the
document type), ``category``, ``author_role``, ``resource_type``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

from capr.text.aspects import aspect_for_code, loinc_document_type
from capr.corpus.files import json_lines, parse_json, read_text, wanted_files
from capr.corpus.narrative import xhtml_text
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document, Section

DOCUMENT_TYPES = ("DocumentReference", "Composition", "DiagnosticReport")
_SUFFIXES = (".json", ".json.gz", ".ndjson", ".ndjson.gz", ".jsonl", ".jsonl.gz")
_TEXT_TYPES = {"", "text/plain", "text/markdown"}
_HTML_TYPES = {"text/html", "application/xhtml+xml"}


def is_fhir_file(name: str) -> bool:
    return name.lower().endswith(_SUFFIXES)


def read_fhir(path: Path, report: ReadReport) -> Iterator[Document]:
    path = Path(path)
    if path.is_dir():
        files = wanted_files(path, report, lambda p: is_fhir_file(p.name))
        if not files:
            report.bad(str(path), "no FHIR .json or .ndjson files in this folder")
            return
        context = export_roles(files)
        for f in files:
            yield from read_fhir_file(f, report, context)
    else:
        yield from read_fhir_file(path, report)


def export_roles(files: list[Path]) -> dict[str, dict]:
    """A bulk export keeps each resource type in its own file: PractitionerRole (small) is read first
    so documents in the other files can name their author's role."""
    ctx: dict[str, dict] = {}
    for f in files:
        if f.name.startswith("PractitionerRole") and f.name.lower().endswith((".ndjson", ".ndjson.gz")):
            for _, obj in json_lines(f, ReadReport(skip_bad=True)):  # its own errors are reported when it is read
                if isinstance(obj, dict) and obj.get("resourceType") == "PractitionerRole" and obj.get("id"):
                    ctx[f"PractitionerRole/{obj['id']}"] = obj
    return ctx


def read_fhir_file(path: Path, report: ReadReport, context: dict[str, dict] | None = None) -> Iterator[Document]:
    name = path.name.lower()
    if name.endswith((".ndjson", ".ndjson.gz", ".jsonl", ".jsonl.gz")):
        # bulk export: one resource per line, streamed
        for record, obj in json_lines(path, report):
            yield from _resource(obj, path, record, report, context or {})
        return
    try:
        obj = parse_json(read_text(path))
    except ValueError as e:
        report.bad(str(path), str(e))
        return
    except BadInputError as e:
        report.bad(e.source, e.reason, e.record)
        return
    if isinstance(obj, dict) and obj.get("resourceType") == "Bundle":
        entries = obj.get("entry") or []
        if not isinstance(entries, list):
            report.bad(str(path), "Bundle.entry must be a list")
            return
        context = _bundle_context(entries)
        for i, entry in enumerate(entries, 1):
            res = entry.get("resource") if isinstance(entry, dict) else None
            where = f"entry {i}"
            if isinstance(res, dict) and res.get("resourceType"):
                where += f" ({res.get('resourceType')}/{res.get('id', '?')})"
            if res is None:
                report.bad(str(path), "Bundle entry without a resource", where)
                continue
            yield from _resource(res, path, where, report, context)
        return
    record = f"{obj.get('resourceType')}/{obj.get('id', '?')}" if isinstance(obj, dict) else None
    yield from _resource(obj, path, record, report, {})


def _bundle_context(entries: list) -> dict[str, dict]:
    """Resources a document may reference, by "Type/id" and by fullUrl."""
    ctx: dict[str, dict] = {}
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("resource"), dict):
            continue
        r = e["resource"]
        if r.get("resourceType") and r.get("id"):
            ctx[f"{r['resourceType']}/{r['id']}"] = r
        if e.get("fullUrl"):
            ctx[str(e["fullUrl"])] = r
    return ctx


def _validate(obj: dict, rtype: str):
    from fhir.resources.R4B import get_fhir_model_class
    from pydantic import ValidationError

    try:
        return get_fhir_model_class(rtype).model_validate(obj), None
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "__root__")
        msg = str(err.get("msg", "invalid")).splitlines()[0]
        return None, f"invalid FHIR {rtype}: {loc + ': ' if loc else ''}{msg}"
    except (ValueError, TypeError) as e:  # fhir.resources raises these for some malformed inputs
        return None, f"invalid FHIR {rtype}: {str(e).splitlines()[0]}"


def _resource(obj: Any, path: Path, record: str | None, report: ReadReport, ctx: dict[str, dict]) -> Iterator[Document]:
    if not isinstance(obj, dict) or not isinstance(obj.get("resourceType"), str):
        report.bad(str(path), "not a FHIR resource (no resourceType)", record)
        return
    rtype = obj["resourceType"]
    if rtype not in DOCUMENT_TYPES:
        return  # Patient, Encounter, Observation, ...: not documents
    res, error = _validate(obj, rtype)
    if error:
        report.bad(str(path), error, record)
        return
    if not res.id:
        report.bad(str(path), f"{rtype} has no id", record)
        return
    record = record or f"{rtype}/{res.id}"
    reader = {"DocumentReference": _document_reference, "Composition": _composition, "DiagnosticReport": _diagnostic_report}[rtype]
    try:
        doc = reader(res, ctx)
    except _Unreadable as e:
        report.bad(str(path), str(e), record)
        return
    doc.metadata = {k: v for k, v in doc.metadata.items() if v not in (None, "")}
    doc.metadata["resource_type"] = rtype
    report.at(str(path), record)
    yield doc


class _Unreadable(Exception):
    pass


# -- values ---------------------------------------------------------------------------------------
def _ref_id(ref: Any, ctx: dict[str, dict] | None = None) -> str:
    """"Patient/123" → "123"; "Patient/123/_history/2" → "123"; a Bundle entry's fullUrl ("urn:uuid:abc") → the id
    of the resource it names, else "abc"."""
    r = getattr(ref, "reference", None) if ref is not None else None
    if not r:
        return ""
    r = str(r)
    target = (ctx or {}).get(r)
    if isinstance(target, dict) and target.get("id"):
        return str(target["id"])
    if r.startswith("urn:uuid:"):
        return r[9:]
    parts = r.rstrip("/").split("/")
    if "_history" in parts[1:]:  # a versioned reference: the id is before "_history", not the version after it
        parts = parts[: parts.index("_history", 1)]
    return parts[-1]


def _iso(v: Any) -> str:
    if v is None:
        return ""
    return v.isoformat() if hasattr(v, "isoformat") else str(v)


def _concept_text(cc: Any, names: Callable[[str | None, str | None], str] | None = None) -> str:
    """A CodeableConcept as text: its text, else its first coding's display, else (``names``: the name of a code, as
    capr.text.aspects.loinc_document_type gives it) the code's name, else the code."""
    if cc is None:
        return ""
    if getattr(cc, "text", None):
        return str(cc.text)
    for c in getattr(cc, "coding", None) or []:
        if c.display or c.code:
            return str(c.display or (names(c.code, c.system) if names else "") or c.code)
    return ""


def _note_type(cc: Any) -> str:
    """A note's type: a LOINC document code without its display is named as LOINC names it ("18842-5" is
    "Discharge summary"), on a Composition as on a DocumentReference."""
    return _concept_text(cc, loinc_document_type)


def _author_role(authors: Any, ctx: dict[str, dict]) -> str:
    """The role of the first author that is a PractitionerRole found in the same Bundle."""
    for a in authors or []:
        ref = str(getattr(a, "reference", "") or "")
        role = ctx.get(ref)
        if role and role.get("resourceType") == "PractitionerRole":
            for code in role.get("code") or []:
                if code.get("text"):
                    return str(code["text"])
                for c in code.get("coding") or []:
                    if c.get("display") or c.get("code"):
                        return str(c.get("display") or c.get("code"))
    return ""


def _attachment_text(att: Any, what: str) -> str | None:
    """Decoded text of a text/plain or text/html attachment with inline data; None for other kinds."""
    ctype = (att.contentType or "").split(";")[0].strip().lower()
    if att.data is None or (ctype not in _TEXT_TYPES and ctype not in _HTML_TYPES):
        return None
    raw = att.data if isinstance(att.data, bytes) else str(att.data).encode("utf-8")
    charset = "utf-8"  # the contentType's charset parameter ("text/plain; charset=ISO-8859-1"), else UTF-8
    for param in (att.contentType or "").split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip().strip('"'):
            charset = value.strip().strip('"')
    try:
        text = raw.decode(charset)
    except LookupError:
        raise _Unreadable(f"{what} declares an unknown charset {charset!r}") from None
    except UnicodeDecodeError as e:
        raise _Unreadable(f"{what} is not {charset} text (invalid byte at offset {e.start})") from None
    return xhtml_text(text) if ctype in _HTML_TYPES else text


def _attachments_text(atts: list, what: str) -> str:
    """The text of one rendition: FHIR's repeated content / presentedForm elements are the same document in
    different formats, so they are not joined (that would index every passage twice); plain text is preferred."""
    texts, kinds = [], []
    for i, att in enumerate(atts, 1):
        t = _attachment_text(att, f"{what} {i}")
        kinds.append((att.contentType or "no contentType") + ("" if att.data is not None else " without inline data"))
        if t is not None and t.strip():
            html = (att.contentType or "").split(";")[0].strip().lower() in _HTML_TYPES
            texts.append((html, t.strip()))
    if not texts and atts:
        raise _Unreadable(f"no readable {what}: need text/plain or text/html with inline data, found {', '.join(kinds)}")
    return min(texts, key=lambda ht: ht[0])[1] if texts else ""


# -- resources ------------------------------------------------------------------------------------
def _document_reference(res: Any, ctx: dict[str, dict]) -> Document:
    text = _attachments_text([c.attachment for c in res.content or []], "attachment")
    context = res.context
    encounter = _ref_id(context.encounter[0], ctx) if context is not None and context.encounter else ""
    period_start = _iso(context.period.start) if context is not None and context.period is not None else ""
    note_type = _note_type(res.type)
    return Document(
        doc_id=f"DocumentReference-{res.id}",
        title=str(res.description or note_type or "Clinical note"),
        text=text,
        metadata={
            "patient": _ref_id(res.subject, ctx),
            "encounter": encounter,
            "date": _iso(res.date) or period_start,
            "note_type": note_type,
            "category": _concept_text(res.category[0]) if res.category else "",
            "author_role": _author_role(res.author, ctx),
        },
    )


def _composition(res: Any, ctx: dict[str, dict]) -> Document:
    parts: list[str] = []
    sections: list[Section] = []
    pos = 0

    def add(sec: Any, depth: int) -> None:
        nonlocal pos
        code = None
        system = None
        for c in (sec.code.coding if sec.code is not None and sec.code.coding else []):
            code, system = c.code, c.system
            break
        heading = str(sec.title or _concept_text(sec.code) or "").strip()
        body = xhtml_text(sec.text.div).strip() if sec.text is not None and sec.text.div else ""
        if body:
            chunk = f"{heading}\n{body}" if heading else body
            start = pos
            parts.append(chunk)
            pos += len(chunk) + 2  # the "\n\n" that joins the parts
            sections.append(Section(heading=heading, aspect=aspect_for_code(code, system, heading), start=start,
                                    end=start + len(chunk)))
        for sub in sec.section or []:
            add(sub, depth + 1)

    for sec in res.section or []:
        add(sec, 0)
    if not sections:
        raise _Unreadable("Composition has no section with narrative text (section.text.div)")
    note_type = _note_type(res.type)
    return Document(
        doc_id=f"Composition-{res.id}",
        title=str(res.title or note_type),
        text="\n\n".join(parts),
        sections=sections,
        metadata={
            "patient": _ref_id(res.subject, ctx),
            "encounter": _ref_id(res.encounter, ctx),
            "date": _iso(res.date),
            "note_type": note_type,
            "category": _concept_text(res.category[0]) if res.category else "",
            "author_role": _author_role(res.author, ctx),
        },
    )


def _diagnostic_report(res: Any, ctx: dict[str, dict]) -> Document:
    text = _attachments_text(res.presentedForm or [], "presentedForm") if res.presentedForm else ""
    if not text.strip() and res.conclusion:
        text = str(res.conclusion)
    if not text.strip():
        raise _Unreadable("DiagnosticReport has no presentedForm text and no conclusion")
    note_type = _note_type(res.code)
    date = _iso(res.effectiveDateTime) or (_iso(res.effectivePeriod.start) if res.effectivePeriod is not None else "") or _iso(res.issued)
    return Document(
        doc_id=f"DiagnosticReport-{res.id}",
        title=note_type or "Diagnostic report",
        text=text,
        metadata={
            "patient": _ref_id(res.subject, ctx),
            "encounter": _ref_id(res.encounter, ctx),
            "date": date,
            "note_type": note_type,
            "category": _concept_text(res.category[0]) if res.category else "",
            "author_role": _author_role(list(res.resultsInterpreter or []) + list(res.performer or []), ctx),
        },
    )
