"""C-CDA R2.1 documents (HL7 CDA XML, ``urn:hl7-org:v3``): one file, or a folder of them.

Sections are ``structuredBody/component/section`` with a LOINC ``code``, a ``title`` and a narrative
``text`` block (paragraphs, lists and tables flattened readably by capr.corpus.narrative); nested
``section/component/section`` become sections of their own. A section's aspect comes from its LOINC
code (capr.text.aspects.LOINC_ASPECTS), its title being the fallback.

Metadata: ``patient`` (recordTarget/patientRole/id), ``encounter`` (componentOf/encompassingEncounter/id),
``date`` (effectiveTime as ISO 8601), ``note_type`` (the document code's displayName, e.g. "Discharge
summary"), ``document_code`` (its LOINC code), ``author_role`` (the first author's code or functionCode),
``template_ids`` are not kept (they are structure, not something to filter by).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterator

from capr.text.aspects import aspect_for_code, loinc_document_type
from capr.corpus.files import check_text_file, read_head, wanted_files, xml_declared_encoding
from capr.corpus.narrative import element_text
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document, Section

NS = "urn:hl7-org:v3"
_N = {"v3": NS}
_TS_RE = re.compile(r"^(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?(?:\.\d+)?([+-]\d{4})?$")


def is_ccda_head(head: bytes) -> bool:
    """Whether the first bytes of an XML file open a CDA ClinicalDocument."""
    return b"<ClinicalDocument" in head or b":ClinicalDocument" in head


def hl7_time(value: str | None) -> str:
    """HL7 TS (20150622, 201506221030-0500) as ISO 8601 ("2015-06-22", "2015-06-22T10:30:00-05:00")."""
    m = _TS_RE.match((value or "").strip())
    if not m:
        return (value or "").strip()
    y, mo, d, h, mi, s, tz = m.groups()
    out = y + (f"-{mo}" if mo else "") + (f"-{d}" if d else "")
    if h:
        out += f"T{h}:{mi or '00'}:{s or '00'}"
        if tz:
            out += f"{tz[:3]}:{tz[3:]}"
    return out


def read_ccda(path: Path, report: ReadReport) -> Iterator[Document]:
    path = Path(path)
    if path.is_dir():
        files = wanted_files(path, report, lambda p: p.suffix.lower() == ".xml")
        if not files:
            report.bad(str(path), "no .xml files in this folder")
            return
        for f in files:
            if not is_ccda_head(read_head(f, 4096)):
                report.bad(str(f), "not a C-CDA document (root element is not ClinicalDocument)")
                continue
            doc = _read_file(f, report, f.relative_to(path).as_posix())
            if doc is not None:
                yield doc
    else:
        doc = _read_file(path, report, path.name)
        if doc is not None:
            yield doc


# identifiers that name a person nationally, not a patient record (US SSN): never used as the patient id
_PERSON_ID_ROOTS = {"2.16.840.1.113883.4.1"}


def _id(el: ET.Element | None) -> str:
    if el is None:
        return ""
    return (el.get("extension") or el.get("root") or "").strip()


def _qualified_id(el: ET.Element | None) -> str:
    """An HL7 II is unique only as (root, extension): "1.2.3^DOC-1", so two systems' "DOC-1" stay two documents."""
    if el is None:
        return ""
    root, ext = (el.get("root") or "").strip(), (el.get("extension") or "").strip()
    return f"{root}^{ext}" if root and ext else (ext or root)


def _patient_id(root_el: ET.Element) -> tuple[str, str]:
    """The first record identifier of the patient (its extension, and its root apart), passing over SSNs."""
    for el in root_el.findall("v3:recordTarget/v3:patientRole/v3:id", _N):
        if (el.get("root") or "").strip() not in _PERSON_ID_ROOTS and _id(el):
            return _id(el), (el.get("root") or "").strip() if el.get("extension") else ""
    return "", ""


def _read_file(path: Path, report: ReadReport, shown: str) -> Document | None:
    """``shown``: the file's path under the folder read (its name when a file was read), as plain-text notes keep
    theirs: the server's own path to it never reaches a client with the note's metadata."""
    try:
        # XML says its own encoding (ISO-8859-1 from older EHR exports): the parser honours the
        # declaration, so the text check must too; without one, XML is UTF-8
        check_text_file(path, xml_declared_encoding(read_head(path, 256)) or "utf-8")
        root = ET.parse(path).getroot()
    except BadInputError as e:
        report.bad(e.source, e.reason, e.record)
        return None
    except (ValueError, LookupError) as e:  # a declared encoding expat cannot read (multi-byte ones)
        report.bad(str(path), f"cannot read the declared XML encoding: {e}")
        return None
    except ET.ParseError as e:
        line, col = e.position
        report.bad(str(path), f"not well-formed XML: {str(e).split(':')[0]}", f"line {line}, column {col}")
        return None
    if root.tag != f"{{{NS}}}ClinicalDocument":
        report.bad(str(path), f"not a C-CDA document: root element is {root.tag!r}, expected ClinicalDocument in {NS}")
        return None
    body = root.find("v3:component/v3:structuredBody", _N)
    if body is None:
        why = "nonXMLBody is not read" if root.find("v3:component/v3:nonXMLBody", _N) is not None else "no component/structuredBody"
        report.bad(str(path), f"C-CDA document without a structured body ({why})")
        return None
    parts: list[str] = []
    sections: list[Section] = []
    pos = 0

    def add(sec: ET.Element) -> None:
        nonlocal pos
        code_el = sec.find("v3:code", _N)
        code = code_el.get("code") if code_el is not None else None
        system = code_el.get("codeSystem") if code_el is not None else None
        title_el = sec.find("v3:title", _N)
        title = " ".join("".join(title_el.itertext()).split()) if title_el is not None else ""
        if not title and code_el is not None:
            title = (code_el.get("displayName") or "").strip()
        text_el = sec.find("v3:text", _N)
        body_text = element_text(text_el).strip() if text_el is not None else ""
        if sec.get("nullFlavor") is None and body_text:
            chunk = f"{title}\n{body_text}" if title else body_text
            start = pos
            parts.append(chunk)
            pos += len(chunk) + 2
            sections.append(Section(heading=title, aspect=aspect_for_code(code, system, title), start=start,
                                    end=start + len(chunk), section_id=None))
        for sub in sec.findall("v3:component/v3:section", _N):
            add(sub)

    for sec in body.findall("v3:component/v3:section", _N):
        add(sec)
    if not sections:
        report.bad(str(path), "C-CDA structuredBody has no section with narrative text")
        return None
    doc_code = root.find("v3:code", _N)
    author_code = root.find("v3:author/v3:assignedAuthor/v3:code", _N)
    if author_code is None:
        author_code = root.find("v3:author/v3:functionCode", _N)
    title_el = root.find("v3:title", _N)
    effective = root.find("v3:effectiveTime", _N)
    note_type = ((doc_code.get("displayName") or "").strip() or loinc_document_type(doc_code.get("code"), doc_code.get("codeSystem"))
                 if doc_code is not None else "")
    doc_id = _qualified_id(root.find("v3:id", _N)) or path.stem
    patient, patient_root = _patient_id(root)
    meta = {
        "patient": patient,
        "patient_id_root": patient_root,
        "encounter": _id(root.find("v3:componentOf/v3:encompassingEncounter/v3:id", _N)),
        "date": hl7_time(effective.get("value") if effective is not None else None),
        "note_type": note_type,
        "document_code": (doc_code.get("code") or "") if doc_code is not None else "",
        "author_role": ((author_code.get("displayName") or author_code.get("code") or "").strip()
                        if author_code is not None else ""),
        "path": shown,
    }
    return Document(
        doc_id=f"ccda-{doc_id}",
        title=" ".join("".join(title_el.itertext()).split()) if title_el is not None else note_type,
        text="\n\n".join(parts),
        sections=sections,
        metadata={k: v for k, v in meta.items() if v},
    )
