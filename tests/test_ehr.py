"""EHR exports (issue 20): MIMIC-III / MIMIC-IV notes, FHIR R4, C-CDA R2.1 on synthetic fixtures
(tests/fixtures/ehr, written by make_fixtures.py and by hand; no real patient data), coded sections as
aspects, de-identification placeholders, and filters with ranges and sets in the API, CLI, service and
the Milvus expression builder."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from capr.corpus import Format, ReadReport, detect_format, read_documents
from capr.text.aspects import aspect_for_code
from capr.corpus.segment import segment, split_sentences
from capr.errors import BadInputError, QueryError
from capr.filters import FilterClause, column_mask, parse_filter, parse_filters
from capr.index import build_index
from capr.records import Query
from capr.search import search

from conftest import capr_cli

EHR = Path(__file__).resolve().parent / "fixtures" / "ehr"
CCDA = EHR / "ccda_discharge.xml"
BUNDLE = EHR / "fhir_bundle.json"
EXPORT = EHR / "fhir_export"
MIMIC3 = EHR / "NOTEEVENTS.csv"
MIMIC4 = EHR / "discharge.csv"
MIMIC4_RAD = EHR / "radiology.csv"
V3 = "{urn:hl7-org:v3}"


# -- fixtures are what they claim to be -----------------------------------------------------------
def _fhir_resources() -> list[dict]:
    bundle = json.loads(BUNDLE.read_text())
    out = [e["resource"] for e in bundle["entry"]]
    for f in sorted(EXPORT.glob("*.ndjson")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def test_fhir_fixtures_validate_with_fhir_resources():
    from fhir.resources.R4B import get_fhir_model_class
    from fhir.resources.R4B.bundle import Bundle

    Bundle.model_validate(json.loads(BUNDLE.read_text()))
    kinds = set()
    for r in _fhir_resources():
        get_fhir_model_class(r["resourceType"]).model_validate(r)
        kinds.add(r["resourceType"])
    assert {"DocumentReference", "Composition", "DiagnosticReport", "Patient", "PractitionerRole"} <= kinds


def test_ccda_fixture_has_the_real_template_structure():
    root = ET.parse(CCDA).getroot()
    assert root.tag == f"{V3}ClinicalDocument"
    templates = {t.get("root") for t in root.findall(f"{V3}templateId")}
    assert {"2.16.840.1.113883.10.20.22.1.1", "2.16.840.1.113883.10.20.22.1.8"} <= templates  # US Realm header, Discharge Summary
    assert root.find(f"{V3}typeId").get("extension") == "POCD_HD000040"
    sections = root.findall(f".//{V3}section")
    assert len(sections) >= 10
    for s in sections:
        assert s.find(f"{V3}templateId") is not None
        assert s.find(f"{V3}code").get("codeSystem") == "2.16.840.1.113883.6.1"  # LOINC
    assert root.findall(f"{V3}component/{V3}structuredBody/{V3}component/{V3}section/{V3}component/{V3}section")  # nested


def test_formats_are_detected():
    assert detect_format(CCDA) is Format.ccda
    assert detect_format(BUNDLE) is Format.fhir
    assert detect_format(EXPORT) is Format.fhir
    assert detect_format(EXPORT / "DocumentReference.ndjson") is Format.fhir
    assert detect_format(MIMIC3) is Format.mimic3
    assert detect_format(MIMIC4) is Format.mimic4
    assert detect_format(MIMIC4_RAD) is Format.mimic4


def test_ccda_folder_is_detected(tmp_path):
    shutil.copy(CCDA, tmp_path / "a.xml")
    assert detect_format(tmp_path) is Format.ccda


# -- readers --------------------------------------------------------------------------------------
def test_ccda_coded_sections_become_aspects_not_their_titles():
    [doc] = read_documents(CCDA)
    by_heading = {s.heading: s.aspect for s in doc.sections}
    # none of these titles is in the heading table: the LOINC code decides
    assert by_heading["Current Outpatient Prescriptions"] == "medications"
    assert by_heading["Story"] == "history of present illness"
    assert by_heading["Reason for admission"] == "chief complaint"
    assert by_heading["Active Issues"] == "problem list"
    assert by_heading["Summary of Stay"] == "hospital course"
    assert by_heading["Procedures this admission"] == "procedure"  # nested section
    assert by_heading["Labs"] == "laboratory data"
    assert by_heading["Vitals at discharge"] == "vital signs"
    assert by_heading["Plan of Treatment"] == "plan"
    assert "Social History" not in by_heading  # nullFlavor="NI": no information
    meds = next(s for s in doc.sections if s.aspect == "medications")
    text = doc.text[meds.start:meds.end]
    assert "Medication: Lisinopril 10 mg oral tablet; Directions: once daily for hypertension; Status: Active" in text
    problems = next(s for s in doc.sections if s.aspect == "problem list")
    assert "- Essential hypertension" in doc.text[problems.start:problems.end]
    assert doc.metadata["patient"] == "3001" and doc.metadata["encounter"] == "enc-7001"
    assert doc.metadata["date"] == "2015-06-22T10:30:00-05:00"
    assert doc.metadata["note_type"] == "Discharge summary" and doc.metadata["author_role"] == "Hospitalist"
    assert doc.title == "Discharge Summary: community-acquired pneumonia"


def test_aspect_for_code_uses_loinc_then_the_heading():
    assert aspect_for_code("10160-0", "2.16.840.1.113883.6.1", "Whatever") == "medications"
    assert aspect_for_code("10160-0", "http://loinc.org") == "medications"
    assert aspect_for_code("10160-0", "http://snomed.info/sct", "Meds") == "medications"  # not LOINC: the heading
    assert aspect_for_code("99999-9", "http://loinc.org", "Social Hx") == "social history"
    assert aspect_for_code(None, None, "") == ""


def test_fhir_bundle_documents_and_metadata():
    docs = {d.doc_id: d for d in read_documents(BUNDLE)}
    assert set(docs) == {"DocumentReference-docref-progress-1", "DocumentReference-docref-consult-1",
                         "Composition-comp-discharge-1", "DiagnosticReport-dr-cxr-1"}
    comp = docs["Composition-comp-discharge-1"]
    assert [(s.heading, s.aspect) for s in comp.sections] == [
        ("What brought her in", "history of present illness"), ("Her medicines", "medications"),
        ("Stay", "hospital course"), ("Imaging", "imaging"), ("Going home", "plan")]
    assert comp.metadata == {"patient": "pat-1001", "encounter": "enc-501", "date": "2150-03-05T16:00:00+00:00",
                             "note_type": "Discharge summary", "author_role": "Attending physician",
                             "resource_type": "Composition"}
    progress = docs["DocumentReference-docref-progress-1"]
    assert progress.text.startswith("Chief Complaint:")  # base64 text/plain decoded
    assert progress.metadata["encounter"] == "enc-501" and progress.metadata["category"] == "Clinical Note"
    consult = docs["DocumentReference-docref-consult-1"]
    assert "<" not in consult.text and "Apixaban 5 mg twice daily" in consult.text
    # HTML <h2> headings become sections with aspects
    assert {p.aspect for p in segment(consult)} == {"chief complaint", "plan"}
    cxr = docs["DiagnosticReport-dr-cxr-1"]
    assert cxr.metadata["category"] == "Radiology" and "consolidation" in cxr.text


def test_fhir_ndjson_export_folder_streams_documents_only():
    docs = list(read_documents(EXPORT))
    assert [d.doc_id for d in docs] == ["DocumentReference-bulk-1", "DocumentReference-bulk-2", "DocumentReference-bulk-3"]
    assert [d.metadata["patient"] for d in docs] == ["pat-2001", "pat-2001", "pat-2002"]
    assert docs[0].metadata["author_role"] == "Sports medicine physician"  # from PractitionerRole.ndjson


def test_mimic3_skips_iserror_rows_and_keeps_placeholders_whole():
    report = ReadReport()
    docs = {d.doc_id: d for d in read_documents(MIMIC3, report=report)}
    assert set(docs) == {"mimic3-101", "mimic3-102", "mimic3-103", "mimic3-105"}  # 104 has ISERROR=1
    assert report.flagged == 1 and "1 record(s) marked as errors" in report.summary()
    ds = docs["mimic3-101"]
    assert ds.metadata["subject_id"] == "10006" and ds.metadata["hadm_id"] == "142345"
    assert ds.metadata["date"] == "2150-01-09" and "charttime" not in ds.metadata  # discharge summaries: a date only
    assert docs["mimic3-102"].metadata["charttime"] == "2150-01-03T08:10:00"
    passages = segment(ds)
    aspects = {p.aspect for p in passages}
    assert {"allergies", "chief complaint", "history of present illness", "past medical history", "hospital course",
            "discharge medications"} <= aspects
    for p in passages:
        assert "[**" not in p.heading
        for a, b in p.sentences:
            s = ds.text[a:b]
            assert s.count("[**") == s.count("**]"), s  # no sentence ends inside a placeholder
    hpi = next(p for p in passages if p.aspect == "history of present illness")
    assert "Mr. [**Known lastname 1234**] is a 69 yo man seen by Dr. [**Last Name (STitle) 2345**] at [**Hospital1 18**] " \
           "for worsening dyspnea on exertion and orthopnea." in [ds.text[a:b] for a, b in hpi.sentences]


def test_mimic3_as_physionet_ships_it_quoted_and_gzipped(tmp_path):
    """NOTEEVENTS.csv.gz quotes every field, the header included."""
    import csv
    import gzip

    rows = list(csv.reader(MIMIC3.open(encoding="utf-8", newline="")))
    gz = tmp_path / "NOTEEVENTS.csv.gz"
    with gzip.open(gz, "wt", encoding="utf-8", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(rows)
    assert detect_format(gz) is Format.mimic3
    assert [d.doc_id for d in read_documents(gz)] == ["mimic3-101", "mimic3-102", "mimic3-103", "mimic3-105"]


def test_sentence_split_never_ends_inside_a_placeholder():
    text = "Called [**Doctor Last Name. Dr. 123**] who agreed. Then ___. Done."
    sents = [text[a:b] for a, b in split_sentences(text)]
    assert sents[0] == "Called [**Doctor Last Name. Dr. 123**] who agreed."
    assert sents[1:] == ["Then ___.", "Done."]


def test_mimic4_reads_discharge_and_radiology():
    docs = list(read_documents(MIMIC4)) + list(read_documents(MIMIC4_RAD))
    by_id = {d.doc_id: d for d in docs}
    ds = by_id["10000032-DS-21"]
    assert ds.metadata["note_type"] == "DS" and ds.metadata["category"] == "Discharge summary"
    assert ds.metadata["note_seq"] == 21 and ds.metadata["charttime"] == "2180-05-07T00:00:00"
    assert by_id["10000032-RR-14"].metadata["category"] == "Radiology"
    assert {"allergies", "history of present illness", "hospital course", "discharge medications"} <= {p.aspect for p in segment(ds)}


def test_placeholders_never_become_label_entities():
    from capr.labels import LabelConfig, LabelGenerator
    from capr.labels.gazetteer import Gazetteer
    from capr.records import Document

    gaz = Gazetteer({"location": ["Location", "phenotype"], "pneumonia": ["Pneumonia", "disease"],
                     "hospital1": ["Hospital1", "phenotype"]}, drugs=False)
    gen = LabelGenerator(LabelConfig(title_entity=False, abbreviations=False, assertions=False), gazetteer=gaz)
    doc = Document("n1", "Discharge summary", "History of Present Illness:\nSeen at [**Location (un) 620**] and "
                   "[**Hospital1 18**] for pneumonia.\n")
    [label] = list(gen([doc]))
    assert label.aspect == "history of present illness"
    assert label.entities == ["Pneumonia"]


def test_label_generator_uses_the_coded_aspects():
    from capr.labels import LabelConfig, LabelGenerator
    from capr.labels.gazetteer import Gazetteer

    gaz = Gazetteer({"lisinopril": ["Lisinopril", "drug"], "hypertension": ["Hypertension", "disease"]}, drugs=False)
    gen = LabelGenerator(LabelConfig(title_entity=False, abbreviations=False, assertions=False), gazetteer=gaz)
    labels = {(lp.aspect, lp.heading): lp.entities for lp in gen(read_documents(CCDA))}
    assert labels[("medications", "Current Outpatient Prescriptions")] == ["Lisinopril", "Hypertension"]
    assert labels[("problem list", "Active Issues")] == ["Hypertension"]


def test_highlights_on_placeholder_text_point_at_the_words():
    from capr.text.analyzer import Analyzer, AnalyzerConfig
    from capr.search.highlight import term_spans

    an = Analyzer(AnalyzerConfig())
    text = "Mr. [**Known lastname 1234**] was given furosemide on [**2150-1-2**] and ___ furosemide again."
    spans = term_spans(text, set(an("furosemide")), an)
    assert [text[a:b] for a, b in spans] == ["furosemide", "furosemide"]


# -- malformed input ------------------------------------------------------------------------------
def _docref(i: int, **kw) -> dict:
    r = {"resourceType": "DocumentReference", "id": f"d{i}", "status": "current", "subject": {"reference": "Patient/p"},
         "content": [{"attachment": {"contentType": "text/plain", "data": base64.b64encode(b"Plan:\nRest.").decode()}}]}
    r.update(kw)
    return r


def test_malformed_records_name_file_record_and_reason(tmp_path):
    nd = tmp_path / "DocumentReference.ndjson"
    bad = _docref(2)
    del bad["status"]
    pdf = _docref(3, content=[{"attachment": {"contentType": "application/pdf", "data": "JVBERi0="}}])
    nd.write_text("\n".join(json.dumps(r) for r in (_docref(1), bad, pdf, _docref(4))) + "\n")
    with pytest.raises(BadInputError, match=r"DocumentReference\.ndjson \[line 2\]: invalid FHIR DocumentReference: status"):
        list(read_documents(nd))
    report = ReadReport(skip_bad=True)
    assert [d.doc_id for d in read_documents(nd, report=report)] == ["DocumentReference-d1", "DocumentReference-d4"]
    assert [e.record for e in report.skipped] == ["line 2", "line 3"]
    assert "no readable attachment" in report.skipped[1].reason and "application/pdf" in report.skipped[1].reason

    xml = tmp_path / "broken.xml"
    xml.write_text(CCDA.read_text()[:3000])
    with pytest.raises(BadInputError, match=r"broken\.xml \[line \d+, column \d+\]: not well-formed XML"):
        list(read_documents(xml, Format.ccda))

    csv_path = tmp_path / "NOTEEVENTS.csv"
    lines = MIMIC3.read_text().splitlines(keepends=True)
    csv_path.write_text(lines[0] + '999,10006,1,2150-01-01,,,Nursing,x,,,"ok",extra\n' + "".join(lines[1:]))
    with pytest.raises(BadInputError, match=r"NOTEEVENTS\.csv \[line 2\]: 12 fields, the header has 11"):
        list(read_documents(csv_path))
    with pytest.raises(BadInputError, match=r"missing column\(s\) note_id, note_type"):
        list(read_documents(MIMIC3, Format.mimic4))


def test_fhir_patient_references_name_the_patient(tmp_path):
    """A versioned reference ("Patient/bob/_history/3") names bob, not "3"; a Bundle entry's fullUrl ("urn:uuid:...")
    names the resource's id. Either way a patient filter finds bob's notes under bob."""
    bundle = {"resourceType": "Bundle", "type": "collection", "entry": [
        {"fullUrl": "urn:uuid:p-bob", "resource": {"resourceType": "Patient", "id": "bob"}},
        {"fullUrl": "urn:uuid:d-1", "resource": _docref(1, subject={"reference": "Patient/bob/_history/3"})},
        {"fullUrl": "urn:uuid:d-2", "resource": _docref(2, subject={"reference": "urn:uuid:p-bob"})},
        {"fullUrl": "urn:uuid:d-3", "resource": _docref(3, subject={"reference": "Patient/alice"})}]}
    (tmp_path / "bundle.json").write_text(json.dumps(bundle))
    assert [d.metadata["patient"] for d in read_documents(tmp_path / "bundle.json")] == ["bob", "bob", "alice"]


def test_fhir_renditions_are_one_document_and_a_declared_charset_is_read(tmp_path):
    """Repeated content elements are one document in several formats: its plain text is indexed once (not the
    text and the HTML joined, every passage twice). "charset=ISO-8859-1" is decoded as such; an unknown one is named."""
    note = b"Assessment: community-acquired pneumonia. Plan: amoxicillin."
    html = b"<div><p>Assessment: community-acquired pneumonia.</p><p>Plan: amoxicillin.</p></div>"
    twice = _docref(1, content=[{"attachment": {"contentType": "text/html", "data": base64.b64encode(html).decode()}},
                                {"attachment": {"contentType": "text/plain", "data": base64.b64encode(note).decode()}}])
    latin = _docref(2, content=[{"attachment": {"contentType": "text/plain; charset=ISO-8859-1",
                                                "data": base64.b64encode("Ménière's disease.".encode("latin-1")).decode()}}])
    odd = _docref(3, content=[{"attachment": {"contentType": "text/plain; charset=x-unknown",
                                              "data": base64.b64encode(b"x").decode()}}])
    nd = tmp_path / "DocumentReference.ndjson"
    nd.write_text("\n".join(json.dumps(r) for r in (twice, latin, odd)) + "\n")
    report = ReadReport(skip_bad=True)
    first, second = read_documents(nd, report=report)
    assert first.text == note.decode() and second.text == "Ménière's disease."
    assert [e.record for e in report.skipped] == ["line 3"] and "unknown charset 'x-unknown'" in report.skipped[0].reason


def test_ccda_ids_are_root_and_extension_and_never_an_ssn(tmp_path):
    """An HL7 id is unique as root + extension: two systems' DOC-1 are two documents (`capr add` of the second used
    to replace the first patient's note). The patient id passes over an SSN listed first."""
    tree = ET.parse(CCDA)
    root = tree.getroot()
    patient_role = root.find(f"{V3}recordTarget/{V3}patientRole")
    for el in patient_role.findall(f"{V3}id"):
        patient_role.remove(el)
    patient_role.insert(0, ET.Element(f"{V3}id", {"root": "2.16.840.1.113883.4.1", "extension": "111-22-3333"}))
    patient_role.insert(1, ET.Element(f"{V3}id", {"root": "1.2.3.4", "extension": "MRN-2002"}))
    folder = tmp_path / "ccda"
    folder.mkdir()
    for name, id_root in (("a.xml", "2.16.840.1.113883.19.5"), ("b.xml", "1.2.3.4.5")):
        root.find(f"{V3}id").attrib.update({"root": id_root, "extension": "DOC-1"})
        tree.write(folder / name, xml_declaration=True, encoding="utf-8")
    docs = list(read_documents(folder, Format.ccda))
    assert len({d.doc_id for d in docs}) == 2 and all(d.doc_id.endswith("^DOC-1") for d in docs)
    assert {d.metadata["patient"] for d in docs} == {"MRN-2002"} and all(d.metadata["patient_id_root"] == "1.2.3.4" for d in docs)


def test_cli_malformed_record_one_line_then_skip_bad(tmp_path):
    src = tmp_path / "export"
    src.mkdir()
    bad = _docref(2)
    del bad["status"]
    (src / "DocumentReference.ndjson").write_text("\n".join(json.dumps(r) for r in (_docref(1), bad)) + "\n")
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    err = [line for line in proc.stderr.splitlines() if line.startswith("error:")]  # (the rest is the progress bar)
    assert len(err) == 1 and "DocumentReference.ndjson [line 2]: invalid FHIR DocumentReference: status" in err[0]
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"), "--skip-bad")
    assert "1 bad record(s) skipped" in proc.stderr and "[line 2]" in proc.stderr


# -- search by ⟨entity, coded aspect⟩ with metadata, through the CLI ----------------------------------
@pytest.mark.parametrize("source, entity, aspect, filters, want", [
    (CCDA, "lisinopril", "medications", [],
     {"heading": "Current Outpatient Prescriptions", "title": "Discharge Summary: community-acquired pneumonia",
      "patient": "3001", "date": "2015-06-22T10:30:00-05:00"}),
    # Two HPI passages in this Bundle: the progress note's, headed "History of Present Illness", wins on the
    # aspect's own words in a 4-document corpus; the discharge summary's is coded 10164-2 under "What brought her in".
    (BUNDLE, "lower lobe pneumonia", "history of present illness", ["note_type=Discharge summary"],
     {"heading": "What brought her in", "title": "Discharge summary", "patient": "pat-1001",
      "date": "2150-03-05T16:00:00+00:00"}),
    (MIMIC3, "furosemide", "discharge medications", [],
     {"heading": "Discharge Medications", "title": "Discharge summary", "patient": "10006", "date": "2150-01-09"}),
    (MIMIC4, "ciprofloxacin", "discharge medications", [],
     {"heading": "Discharge Medications", "title": "Discharge summary", "patient": "10000032",
      "date": "2180-05-07T00:00:00"}),
    (EXPORT, "sumatriptan", "plan", [],
     {"heading": "Plan", "title": "Progress note", "patient": "pat-2002", "date": "2151-07-04T15:30:00+00:00"}),
])
def test_cli_index_and_search_entity_coded_aspect(tmp_path, source, entity, aspect, filters, want):
    out = tmp_path / "idx"
    capr_cli("index", "--lexical-only", str(source), "--out", str(out))
    args = [a for f in filters for a in ("--filter", f)]
    proc = capr_cli("search", str(out), "--entity", entity, "--aspect", aspect, "-k", "3", "--json", *args)
    top = json.loads(proc.stdout)["results"][0]
    assert top["aspect"] == aspect
    assert top["heading"] == want["heading"] and top["title"] == want["title"]
    assert top["metadata"]["patient"] == want["patient"] and top["metadata"]["date"] == want["date"]
    assert entity.split()[-1] in top["text"].lower()


# -- filters with ranges and sets -------------------------------------------------------------------
@pytest.fixture(scope="module")
def ehr_index(tmp_path_factory):
    docs = itertools.chain(*(read_documents(p) for p in (CCDA, BUNDLE, EXPORT, MIMIC3, MIMIC4, MIMIC4_RAD)))
    out = tmp_path_factory.mktemp("ehr") / "idx"
    index = build_index(docs, out)
    yield out, index
    index.close()


def _docs(hits) -> set[str]:
    return {h.passage.doc_id for h in hits}


def test_api_filters_equality_range_and_set(ehr_index):
    _, index = ehr_index
    q = "dyspnea"
    hits = search(index, q, k=50, filters={"subject_id": "10006"})  # the old dict form: equality
    assert hits and {h.passage.metadata["subject_id"] for h in hits} == {"10006"}
    assert search(index, q, k=50, filters=["subject_id=10006"])[0].pid == hits[0].pid
    q2 = "dyspnea pulmonary edema diuresis effusions"
    ranged = search(index, q2, k=50, filters=["subject_id=10006", "charttime>=2150-01-04"])
    assert _docs(ranged) == {"mimic3-103"}  # the radiology note (01-03) and the summary (no charttime) are out
    day = search(index, q2, k=50, filters=["charttime<=2150-01-03"])  # a date bound covers its whole day
    assert _docs(day) == {"mimic3-102"}
    assert _docs(search(index, q2, k=50, filters=["charttime=2150-01-03"])) == {"mimic3-102"}
    both = search(index, "dyspnea chest", k=50, filters=["category in (Discharge summary, Radiology)"])
    assert {h.passage.metadata["category"] for h in both} == {"Discharge summary", "Radiology"}
    assert "mimic3-101" in _docs(both) and "10000084-DS-17" in _docs(both)  # MIMIC-III and MIMIC-IV alike
    not_rad = search(index, "pain chest", k=50, filters=["category not in (Radiology)", "source=mimic-iv"])
    assert _docs(not_rad) and all(d.endswith(("DS-21", "DS-17")) for d in _docs(not_rad))
    seq = search(index, "pain", k=50, filters=["note_seq>20"])  # numbers compare as numbers: 21 > 20, 17 and 14 not
    assert _docs(seq) == {"10000032-DS-21"}
    fhir = search(index, "amoxicillin", k=50, filters=["date>=2150-03", "date<2150-04", "patient=pat-1001"])
    assert _docs(fhir) == {"DocumentReference-docref-progress-1", "Composition-comp-discharge-1"}
    assert search(index, "knee", k=5, filters=["date>2999-01-01"]) == []  # an empty range is an answer, not an error
    assert _docs(search(index, "knee", k=50, filters=["patient!=pat-2002"])) == {"DocumentReference-bulk-1", "DocumentReference-bulk-2"}
    assert search(index, "plan", k=5, filters=[FilterClause("aspect", "in", ("Plan", "meds"))])  # aspects normalized
    with pytest.raises(QueryError, match="unknown filter field 'charttim'"):
        search(index, "x", filters=["charttim>=2150"])
    with pytest.raises(QueryError, match="no passage has category='Radiolgy'"):
        search(index, "x", filters=["category in (Radiolgy)"])
    with pytest.raises(QueryError, match="bad filter 'charttime>>2150'|bad filter 'charttime ~ 2150'"):
        search(index, "x", filters=["charttime ~ 2150"])


def test_filter_parsing():
    assert parse_filter("category in (Discharge summary, 'a, b')") == FilterClause("category", "in", ("Discharge summary", "a, b"))
    assert parse_filter(" subject_id = 10006 ") == FilterClause("subject_id", "=", "10006")
    assert parse_filter("note_seq>=2") == FilterClause("note_seq", ">=", "2")
    assert parse_filter("x==y") == FilterClause("x", "=", "y")
    assert parse_filter("path=/a=b") == FilterClause("path", "=", "/a=b")  # the value may hold "="
    assert str(parse_filter("c not in (a, b)")) == "c not in (a, b)"
    for bad, why in [("x", "use FIELD=VALUE"), ("x in (a,,b)", "empty value"), ("x in ('a)", "unclosed quote"),
                     ("x>=", "must be non-empty"), ("=3", "use FIELD=VALUE")]:
        with pytest.raises(QueryError, match=why):
            parse_filters([bad])


def test_range_over_the_value_table():
    values = ["2150-01-01T08:00:00", "2149-12-31T23:00:00", "2150-01-02", None, 7, "12"]
    codes = np.array([0, 1, 2, 3, 4, 5, 0])
    m = lambda f: column_mask(parse_filter(f), values, codes).astype(int).tolist()  # noqa: E731
    assert m("t<=2150-01-01") == [1, 1, 0, 0, 0, 0, 1]
    assert m("t>2150-01-01") == [0, 0, 1, 0, 0, 0, 0]
    assert m("t>=2150") == [1, 0, 1, 0, 0, 0, 1]
    assert m("t>=8") == [0, 0, 0, 0, 0, 1, 0]  # 12 >= 8 as numbers ("12" < "8" as strings)
    assert m("t!=7") == [1, 1, 1, 0, 0, 1, 1]  # a missing value never passes, not even !=


def test_value_table_ranges_equal_the_per_value_rule():
    """The bisection/vectorised path (ValueTable, the column's lookup) and the per-value rule (value_matches) agree
    everywhere: on a field read as dates, an identifier, and one of capr's own text fields."""
    import random

    from capr.filters import ValueTable, column_lookup, value_key, value_matches

    rng = random.Random(7)
    values: list = [None, "Radiology", "radiology", "Discharge summary", "12", "012", 7, 7.0, 3.5, "2150", "2150-01",
                    "x-ray", True, "true", "abC1", "ABc1", "é", "É", "2150-06-15T12:00:00Z", "2150-06"]
    for _ in range(300):
        y, mo, d = rng.choice([2149, 2150, 2151]), rng.randint(1, 12), rng.randint(1, 28)
        values.append(rng.choice([f"{y}-{mo:02d}-{d:02d}", f"{y}-{mo:02d}-{d:02d}T{rng.randint(0, 23):02d}:00:00",
                                  f"{y}-{mo:02d}-{d:02d} {rng.randint(0, 23):02d}:30:00", str(rng.randint(0, 300)),
                                  rng.randint(0, 300)]))
    seen: set = set()  # a column's value table holds each value once (by its filter key: 7 and 7.0 are one)
    values = [v for v in values if (k := value_key(v)) not in seen and not seen.add(k)]
    codes = np.arange(len(values))
    table = ValueTable(values)
    bounds = ["2150", "2150-06", "2150-06-15", "2150-06-15T12", "2150-06-15 12:00:00", "150", "7", "7.0", "3.5",
              "radiology", "Discharge summary", "m", "2149-12-31T23:59:59", "true", "abC1", "É", "012"]
    for field in ("f", "patient", "title"):
        for op in (">=", "<=", ">", "<", "=", "!=", "in", "not in"):
            for b in bounds:
                c = FilterClause(field, op, (b, "2151-02") if op in ("in", "not in") else b)
                slow = np.array([value_matches(c, v) for v in values])
                fast = column_mask(c, values, codes, lookup=column_lookup(values), table=lambda: table, check=False)
                assert (fast == slow).all(), (field, op, b, [values[i] for i in np.flatnonzero(fast != slow)][:5])


def test_milvus_expressions_keep_the_built_in_fields_and_quote_their_literals():
    from capr.store.milvus_filters import milvus_expr

    expr = milvus_expr(parse_filters(["aspect=plan", "aspect!=plan", "doc_id in (a, b)", "title>=M"]))
    assert expr.split(" and ") == ['aspect == "plan"', 'aspect != "plan"', 'doc_id in ["a", "b"]', 'title >= "M"']
    assert milvus_expr(parse_filters(['title=a "quoted" \\ one'])) == 'title == "a \\"quoted\\" \\\\ one"'
    assert milvus_expr([FilterClause("doc_id", "=", 17)]) == 'doc_id == "17"'  # VARCHAR column: a string literal
    expr = milvus_expr(parse_filters(["subject_id=10006", "charttime<=2150-01-01", "category not in (Echo)",
                                      "patient!=p1", "note_seq>=2"]))
    assert "not (" not in expr  # Milvus Lite 2.5 cannot run not(...) on JSON paths


class _MilvusValue:
    """A JSON value as a Milvus expression compares it: with a literal of its own type only (text with text, a number
    with a number, a boolean with a boolean); a missing key compares with nothing."""

    def __init__(self, value, present=True):
        self.value, self.present = value, present

    def _same_type(self, other) -> bool:
        a = self.value
        if not self.present:
            return False
        if isinstance(a, bool) or isinstance(other, bool):
            return isinstance(a, bool) and isinstance(other, bool)
        return isinstance(a, str) == isinstance(other, str)

    __hash__ = None
    __eq__ = lambda self, o: self._same_type(o) and self.value == o  # noqa: E731
    __ne__ = lambda self, o: self._same_type(o) and self.value != o  # noqa: E731
    __lt__ = lambda self, o: self._same_type(o) and self.value < o  # noqa: E731
    __le__ = lambda self, o: self._same_type(o) and self.value <= o  # noqa: E731
    __gt__ = lambda self, o: self._same_type(o) and self.value > o  # noqa: E731
    __ge__ = lambda self, o: self._same_type(o) and self.value >= o  # noqa: E731


def _milvus_passes(expr: str, metadata: dict) -> bool:
    """``expr`` run as Python over one metadata row as the Milvus backend writes it (with its filter keys): its
    comparisons, ``in`` lists and and/or read the same."""
    import re

    from capr.store.milvus_filters import filter_keys

    row = {**metadata, **filter_keys(metadata)}
    get = lambda k: _MilvusValue(row[k]) if row.get(k) is not None else _MilvusValue(None, False)  # noqa: E731
    py = re.sub(r'metadata\["((?:[^"\\]|\\.)*)"\]', lambda m: f"get({m.group(0)[9:-1]})", expr)
    return eval(py, {"get": get, "true": True, "false": False})


def test_milvus_expressions_mean_what_the_embedded_index_means():
    """Every clause's Milvus expression, read as Milvus reads it, passes exactly the values value_matches passes:
    case kept, JSON numbers and numbers written as text, dates at the precision both sides have, missing values."""
    from capr.filters import value_matches
    from capr.store.milvus_filters import milvus_expr

    values = ["abC1", "ABc1", 7, "7", 7.5, True, False, "true", "2150-01-05", "2150-01-05 08:00:00", "2150-01", "x", "",
              "é", "É", None, "07", 2150, "2150", "2150-01-05T08:00:00Z", "2150-01-05T08:00:00.25+01:00", "2150-01-030"]
    clauses = ["=abC1", "!=abC1", "=7", "!=7", "=7.0", "!=7.0", "=true", "!=true", "=2150-01-05T00:00",
               "!=2150-01-05T00:00", "=2150-01-05T08", "<2150-01-05T12:00", "<=2150-01-05T12:00", ">=2150-01-05T12:00",
               ">2150-01-05T12:00", ">=7", "<x", ">=2150", "<2150", " in (abC1, 7.5)", " not in (abC1, 2150-01)", ">=É",
               "<é", ">07", "=2150-01-03", "!=2150-01-05"]
    for field in ("f", "patient", "birth_date"):
        for text in clauses:
            clause = parse_filter(field + text)
            expr = milvus_expr([clause])
            for v in values:
                got = _milvus_passes(expr, {} if v is None else {field: v})
                assert got == value_matches(clause, v), (str(clause), v, expr)


def test_an_identifier_shaped_like_a_date_is_matched_exactly(tmp_path):
    """patient=2041 is that patient, not also 2041-17 and 2041-17-03 (the whole-day rule is for dates only); a
    charttime filter keeps it. A patient id with no match gets no "close" ids of other patients in the message."""
    from capr.errors import QueryError
    from capr.index import build_index, load_index
    from capr.records import Document
    from capr.search import search

    docs = [Document(f"n{i}", "Clinic note", f"Assessment: asthma, visit {i}.",
                     metadata={"patient": p, "charttime": t})
            for i, (p, t) in enumerate([("2041", "2150-01-03T08:00:00"), ("2041-17", "2150-01-04"),
                                        ("2041-17-03", "2150-01-03 10:00"), ("10020", "2150-02")])]
    build_index(docs, tmp_path / "idx")
    index = load_index(tmp_path / "idx")

    def found(*filters: str) -> set[str]:
        return {h.passage.doc_id for h in search(index, "asthma", k=10, filters=parse_filters(list(filters)))}

    assert found("patient=2041") == {"n0"} and found("patient=2041-17") == {"n1"}
    assert found("patient in (2041, 10020)") == {"n0", "n3"} and found("patient!=2041") == {"n1", "n2", "n3"}
    assert found("charttime=2150-01-03") == {"n0", "n2"} and found("charttime=2150-01") == {"n0", "n1", "n2"}
    assert found("charttime=2150") == {"n0", "n1", "n2", "n3"}  # a month-only date (FHIR allows them) is in its year
    with pytest.raises(QueryError) as e:
        found("patient=10021")
    assert "10020" not in str(e.value) and "close" not in str(e.value)


def test_a_csv_patient_column_gets_no_close_ids_of_other_patients(tmp_path):
    """A CSV export's PatientID column (read as "patientid") and a patient_name column identify patients as the
    patient field does: a value with no match names no other patient's id or name; a word field still gets its
    close spellings."""
    from capr.corpus import Format, ReadReport, read_documents
    from capr.index import load_index
    from capr.store.embedded import EmbeddedStore

    (tmp_path / "notes.csv").write_text(
        "id,title,text,PatientID,patient_name,category\n"
        "n1,Asthma note,HPI: wheeze and cough for two days.,P-1001,John Smith,Radiology\n"
        "n2,CHF note,HPI: dyspnea and ankle edema.,P-1002,Joan Smyth,Nursing\n")
    build_index(read_documents(tmp_path / "notes.csv", Format.auto, ReadReport()), tmp_path / "idx")
    store = EmbeddedStore.of(load_index(tmp_path / "idx"))
    for clause, others in [("patientid=P-1003", ("P-1001", "P-1002")), ("patient_name=John Smit", ("John Smith", "Joan Smyth"))]:
        with pytest.raises(QueryError) as e:
            store.compile_filter([clause])
        assert "close" not in str(e.value) and not any(o in str(e.value) for o in others), str(e.value)
    with pytest.raises(QueryError, match=r"close: Radiology"):
        store.compile_filter(["category=Radiolgy"])
    # the column as the CSV names it: read as the field it is stored as
    assert store.compile_filter(["PatientID=P-1001"]).sum() == store.compile_filter(["patientid=P-1001"]).sum() > 0
    with pytest.raises(QueryError, match="unknown filter field 'PatientIDs'"):
        store.compile_filter(["PatientIDs=P-1001"])


def test_milvus_store_filter_expr_checks_fields_and_normalizes_aspects():
    from capr.store.milvus_backend import MilvusStore
    from capr.store.milvus_filters import milvus_expr

    store = MilvusStore.__new__(MilvusStore)  # only filter_expr: no server needed
    store.meta = {"fields": ["aspect", "doc_id", "subject_id", "charttime"]}
    assert store.filter_expr(["aspect in (Meds, HPI)", "charttime>=2150"]) == \
        milvus_expr(parse_filters(["aspect in (medications, history of present illness)", "charttime>=2150"]))
    assert store.filter_expr({"subject_id": "10006"}) == milvus_expr([FilterClause("subject_id", "=", "10006")])
    with pytest.raises(QueryError, match="unknown filter field 'category'"):
        store.filter_expr(["category=Radiology"])


def test_cli_filters(ehr_index):
    out, _ = ehr_index
    proc = capr_cli("search", str(out), "edema effusions dyspnea", "--json", "-k", "20",
                    "--filter", "category in (Discharge summary, Radiology)", "--filter", "date>=2150-01-03",
                    "--filter", "subject_id=10006")
    data = json.loads(proc.stdout)
    assert data["filters"] == ["category in (Discharge summary, Radiology)", "date>=2150-01-03", "subject_id=10006"]
    assert {r["doc_id"] for r in data["results"]} == {"mimic3-101", "mimic3-102"}
    bad = capr_cli("search", str(out), "x", "--filter", "date>>2150", check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "unknown filter field 'date>'" in bad.stderr or "bad filter" in bad.stderr


def test_service_filters_list_and_dict(ehr_index):
    from fastapi.testclient import TestClient

    from capr.service import ServiceConfig, create_app

    out, _ = ehr_index
    client = TestClient(create_app(out, ServiceConfig()))
    r = client.post("/search", json={"entity": "furosemide", "aspect": "medications", "k": 10,
                                     "filters": ["subject_id=10006", "date<=2150-01-09", "category in (Discharge summary)"]})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert res and {x["doc_id"] for x in res} == {"mimic3-101"}
    assert res[0]["aspect"] == "discharge medications"
    r = client.post("/search", json={"text": "knee", "filters": {"patient": "pat-2001"}})
    assert r.status_code == 200 and {x["metadata"]["patient"] for x in r.json()["results"]} == {"pat-2001"}
    r = client.post("/search", json={"text": "knee", "filters": ["patient ~ x"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "filters"]
    r = client.post("/search", json={"text": "knee", "filters": ["charttim>=2150"]})
    assert r.status_code == 400 and "unknown filter field 'charttim'" in r.text


def test_milvus_lite_range_and_set_filters_match_embedded(tmp_path):
    """The same clauses on a real Milvus Lite server (skipped without .venv-milvus / $CAPR_MILVUS_PYTHON)."""
    from milvus_support import start_or_skip

    from capr.store import create_store

    docs = [d for p in (MIMIC3, MIMIC4, MIMIC4_RAD, EXPORT) for d in read_documents(p)]
    server = start_or_skip("lite", tmp_path / "lite")
    try:
        ref = create_store(tmp_path / "emb", "embedded")
        st = create_store("ehr", "milvus", uri=server.uri)
        if not getattr(st, "has_lexical", True):
            pytest.skip("this Milvus has no BM25 function")
        assert ref.add(docs) == st.add(docs)
        q = Query("q", text="pain dyspnea edema diuresis knee headache fever chest hydronephrosis")
        for filters in (["subject_id=10006", "charttime>=2150-01-04"], ["category in (Discharge summary, Radiology)"],
                        ["charttime<=2150-01-03"], ["charttime=2150-01-03"], ["note_seq>20"], ["date>=2151-07", "patient!=pat-2001"],
                        ["category not in (Radiology)", "source=mimic-iv"], {"subject_id": "10006"}):
            got = {h.pid for h in search(st, q, k=50, filters=filters, aspect_boost=0)}
            want = {h.pid for h in search(ref, q, k=50, filters=filters, aspect_boost=0)}
            assert got == want and want, filters
        with pytest.raises(QueryError, match="no passage has category='Radiolgy'"):
            search(st, q, k=5, filters=["category in (Radiolgy)"])
    finally:
        server.stop()


def test_a_ccda_note_keeps_its_path_under_the_folder_not_the_servers(tmp_path):
    folder = tmp_path / "home" / "dr-jones" / "exports"
    (folder / "2024").mkdir(parents=True)
    shutil.copy(CCDA, folder / "2024" / "a.xml")
    [doc] = list(read_documents(folder, Format.ccda))
    assert doc.metadata["path"] == "2024/a.xml"
    [doc] = list(read_documents(folder / "2024" / "a.xml", Format.ccda))
    assert doc.metadata["path"] == "a.xml"


def test_a_loinc_document_code_without_its_display_is_named_on_every_resource(tmp_path):
    """A Composition coded 18842-5 with no display (FHIR requires only the code) is a "Discharge summary", as a
    DocumentReference with the display is; a C-CDA document code without displayName too. Not "18842-5"."""
    loinc = "http://loinc.org"
    div = '<div xmlns="http://www.w3.org/1999/xhtml">Rest and fluids.</div>'
    text = base64.b64encode(b"Plan: rest and fluids.").decode()
    bundle = {"resourceType": "Bundle", "type": "collection", "entry": [
        {"resource": {"resourceType": "Composition", "id": "c1", "status": "final", "title": "Summary",
                      "type": {"coding": [{"system": loinc, "code": "18842-5"}]}, "subject": {"reference": "Patient/p1"},
                      "date": "2150-03-05T16:00:00Z", "author": [{"reference": "Practitioner/x"}],
                      "section": [{"title": "Plan", "text": {"status": "generated", "div": div}}]}},
        {"resource": {"resourceType": "DocumentReference", "id": "d1", "status": "current",
                      "type": {"coding": [{"system": loinc, "code": "18842-5", "display": "Discharge summary"}]},
                      "subject": {"reference": "Patient/p1"},
                      "content": [{"attachment": {"contentType": "text/plain", "data": text}}]}},
        {"resource": {"resourceType": "DocumentReference", "id": "d2", "status": "current",
                      "type": {"coding": [{"system": "http://example.org/local", "code": "18842-5"}]},
                      "subject": {"reference": "Patient/p1"},
                      "content": [{"attachment": {"contentType": "text/plain", "data": text}}]}}]}
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle))
    types = {d.doc_id: d.metadata["note_type"] for d in read_documents(path, Format.fhir)}
    # a code of another system is not LOINC's: kept as given
    assert types == {"Composition-c1": "Discharge summary", "DocumentReference-d1": "Discharge summary",
                     "DocumentReference-d2": "18842-5"}
    ccda = tmp_path / "cda.xml"
    ccda.write_text(CCDA.read_text(encoding="utf-8").replace(' displayName="Discharge summary"/>', '/>', 1), encoding="utf-8")
    assert [d.metadata["note_type"] for d in read_documents(ccda, Format.ccda)] == ["Discharge summary"]
