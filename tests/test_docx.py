"""Word documents (.docx) read with the standard library: heading styles (by name, in any language Word writes
their ids in) open sections, list paragraphs and table rows are lines, the Title paragraph is the title; indexed and
searched as any other document, and a legacy .doc or a broken file is one line naming it."""

from __future__ import annotations

import json
import zipfile

import pytest

from conftest import capr_cli, one_line_error

W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def paragraph(text: str, style: str | None = None, numbered: bool = False) -> str:
    ppr = (f'<w:pStyle w:val="{style}"/>' if style else "") + ('<w:numPr><w:numId w:val="1"/></w:numPr>' if numbered else "")
    runs = "".join(f'<w:r><w:t xml:space="preserve">{part}</w:t></w:r>' for part in text.split("|"))
    return f"<w:p>{f'<w:pPr>{ppr}</w:pPr>' if ppr else ''}{runs}</w:p>"


def write_docx(path, body: str, core_title: str | None = None) -> None:
    # a German Word's style ids ("Titel", "berschrift1"), named as Word names them inside
    styles = (f'<w:styles {W}><w:style w:type="paragraph" w:styleId="Titel"><w:name w:val="Title"/></w:style>'
              '<w:style w:type="paragraph" w:styleId="berschrift1"><w:name w:val="heading 1"/></w:style>'
              '<w:style w:type="paragraph" w:styleId="berschrift2"><w:name w:val="heading 2"/></w:style>'
              '<w:style w:type="paragraph" w:styleId="Aufzhlungszeichen"><w:name w:val="List Bullet"/></w:style>'
              '</w:styles>')
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("word/document.xml", f'<?xml version="1.0" encoding="UTF-8"?><w:document {W}><w:body>{body}'
                                        "</w:body></w:document>")
        z.writestr("word/styles.xml", styles)
        if core_title is not None:
            z.writestr("docProps/core.xml", '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/'
                       '2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/">'
                       f"<dc:title>{core_title}</dc:title></cp:coreProperties>")


LETTER = "".join([
    paragraph("Discharge letter – Ward 7", "Titel"),
    paragraph("Patient seen on the respiratory ward."),
    paragraph("History of present illness", "berschrift1"),
    paragraph("Three days of productive cough |and fever."),
    '<w:p><w:r><w:t>Deleted </w:t></w:r><w:del><w:r><w:delText>wrongly typed </w:delText></w:r></w:del>'
    '<w:r><w:t>words</w:t></w:r></w:p>',
    paragraph("Medications", "berschrift1"),
    paragraph("Amoxicillin 500 mg three times daily", "Aufzhlungszeichen"),
    paragraph("Salbutamol inhaler as needed", numbered=True),
    "<w:tbl><w:tr><w:tc>" + paragraph("Drug") + "</w:tc><w:tc>" + paragraph("Dose") + "</w:tc></w:tr>"
    "<w:tr><w:tc>" + paragraph("Prednisolone") + "</w:tc><w:tc>" + paragraph("30 mg") + "</w:tc></w:tr></w:tbl>",
    paragraph("Plan", "berschrift2"),
    paragraph("Review in clinic in two weeks."),
])


def test_a_word_document_reads_as_its_headed_sections(tmp_path):
    from capr.corpus.docx import docx_document

    write_docx(tmp_path / "letter.docx", LETTER, core_title="Properties title")
    doc = docx_document(tmp_path / "letter.docx", "letter")
    assert doc.title == "Discharge letter – Ward 7"  # the Title paragraph, before the file's properties
    sections = {s.aspect: doc.text[s.start:s.end] for s in doc.sections}
    assert list(sections) == ["", "history of present illness", "medications", "plan"]
    assert sections["history of present illness"] == ("History of present illness\nThree days of productive cough "
                                                      "and fever.\n\nDeleted words")  # a tracked deletion left out
    assert sections["medications"] == ("Medications\n- Amoxicillin 500 mg three times daily\n- Salbutamol inhaler as "
                                       "needed\n\nDrug | Dose\nPrednisolone | 30 mg")
    write_docx(tmp_path / "untitled.docx", paragraph("Seen today."), core_title="Clinic letter")
    assert docx_document(tmp_path / "untitled.docx", "u").title == "Clinic letter"


@pytest.fixture
def letters(tmp_path):
    folder = tmp_path / "letters"
    folder.mkdir()
    write_docx(folder / "pneumonia.docx", LETTER)
    write_docx(folder / "gout.docx", paragraph("Gout clinic letter", "Titel") + paragraph("Medications", "berschrift1")
               + paragraph("Colchicine 500 micrograms twice daily during the flare.", "Aufzhlungszeichen"))
    (folder / "note.txt").write_text("Follow-up note\nCough settled.\n")
    return folder


def test_capr_indexes_and_searches_a_folder_of_word_documents(letters, tmp_path):
    idx = tmp_path / "idx"
    proc = capr_cli("index", str(letters), "--out", str(idx), "--lexical-only")
    assert "indexed 3 documents" in proc.stderr and "nothing skipped" in proc.stderr, proc.stderr
    out = json.loads(capr_cli("search", str(idx), "-e", "colchicine", "-a", "medications", "-k", "1", "--json").stdout)
    top = out["results"][0]
    assert (top["doc_id"], top["title"], top["aspect"]) == ("gout", "Gout clinic letter", "medications")
    out = json.loads(capr_cli("search", str(idx), "-e", "amoxicillin", "-a", "meds", "-k", "1", "--json").stdout)
    assert out["results"][0]["doc_id"] == "pneumonia" and "Amoxicillin 500 mg" in out["results"][0]["text"]


def test_a_legacy_doc_or_a_broken_docx_is_one_line_naming_it(letters, tmp_path):
    old = letters / "old.doc"
    old.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512)  # an OLE2 compound file, as Word 97 wrote
    proc = capr_cli("index", str(letters), "--out", str(tmp_path / "idx"), "--lexical-only", check=False)
    one_line_error(proc, f"{old}: a Word 97-2003 .doc, which capr does not read: save it as .docx")
    old.unlink()
    broken = letters / "broken.docx"
    broken.write_bytes(b"not a zip at all")
    proc = capr_cli("index", str(broken), "--out", str(tmp_path / "idx"), "--lexical-only", check=False)
    one_line_error(proc, f"{broken}: not a .docx (Office Open XML) file: not a zip archive")
    proc = capr_cli("index", str(letters), "--out", str(tmp_path / "idx"), "--lexical-only", "--skip-bad")
    assert "indexed 3 documents" in proc.stderr and "1 bad record(s) skipped" in proc.stderr, proc.stderr
