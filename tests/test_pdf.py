"""PDF files read by their text layer: running headers and page numbers left out, words hyphenated across lines
joined, sections found as a plain-text note's are; a PDF with no text, a damaged one or one locked by a password is
one line naming it."""

from __future__ import annotations

import json

import pytest

from conftest import capr_cli, one_line_error
from pdf_support import write_pdf

HEADER = "Royal Infirmary - confidential"
REFERRAL = [
    [HEADER, "REFERRAL LETTER", "HISTORY OF PRESENT ILLNESS:", "Three days of productive cough and fe-",
     "ver after a stay in a café.", "Page 1 of 3"],
    [HEADER, "MEDICATIONS:", "Amoxicillin 500 mg three times daily.", "Salbutamol inhaler as needed.", "Page 2 of 3"],
    [HEADER, "PLAN:", "Review in clinic in two weeks with a chest X-ray.", "Page 3 of 3"],
]


def test_a_pdf_reads_as_its_text_without_running_headers(tmp_path):
    from capr.corpus.pdf import pdf_text

    text, title = pdf_text(write_pdf(tmp_path / "referral.pdf", REFERRAL, title="Referral – J. Smith"))
    assert title == "Referral – J. Smith"
    assert HEADER not in text and "Page" not in text
    assert "productive cough and fever after a stay in a café." in text  # the hyphenated word joined
    assert text.index("MEDICATIONS:") < text.index("PLAN:")


@pytest.fixture
def referrals(tmp_path):
    folder = tmp_path / "referrals"
    folder.mkdir()
    write_pdf(folder / "smith.pdf", REFERRAL, title="Referral – J. Smith")
    write_pdf(folder / "jones.pdf", [["HISTORY OF PRESENT ILLNESS:", "Painful swollen big toe overnight."],
                                     ["MEDICATIONS:", "Colchicine 500 micrograms twice daily."]])
    (folder / "note.txt").write_text("Follow-up note\nCough settled.\n")
    return folder


def test_capr_indexes_and_searches_a_folder_of_pdfs(referrals, tmp_path):
    idx = tmp_path / "idx"
    proc = capr_cli("index", str(referrals), "--out", str(idx), "--lexical-only")
    assert "indexed 3 documents" in proc.stderr and "nothing skipped" in proc.stderr, proc.stderr
    out = json.loads(capr_cli("search", str(idx), "-e", "colchicine", "-a", "medications", "-k", "1", "--json").stdout)
    top = out["results"][0]
    assert (top["doc_id"], top["title"], top["aspect"]) == ("jones", "jones", "medications")
    out = json.loads(capr_cli("search", str(idx), "-e", "amoxicillin", "-a", "medications", "-k", "1", "--json").stdout)
    top = out["results"][0]
    assert (top["doc_id"], top["title"], top["aspect"]) == ("smith", "Referral – J. Smith", "medications")


def test_a_pdf_without_text_damaged_or_locked_is_one_line_naming_it(referrals, tmp_path):
    from pypdf import PdfWriter

    scanned = write_pdf(referrals / "scanned.pdf", [[], []])
    proc = capr_cli("index", str(referrals), "--out", str(tmp_path / "idx"), "--lexical-only", check=False)
    one_line_error(proc, f"{scanned}: PDF without a text layer (2 pages; a scanned image?): run OCR on it first")
    scanned.unlink()
    damaged = referrals / "damaged.pdf"
    damaged.write_bytes(b"%PDF-1.4\n")
    proc = capr_cli("index", str(damaged), "--out", str(tmp_path / "idx"), "--lexical-only", check=False)
    one_line_error(proc, f"{damaged}: not a readable PDF")
    assert "EOF marker not found" not in proc.stderr  # pypdf's repair log is not shown beside the one line
    damaged.unlink()
    locked = referrals / "locked.pdf"
    writer = PdfWriter(clone_from=referrals / "jones.pdf")
    writer.encrypt("secret", algorithm="RC4-128")
    writer.write(locked)
    proc = capr_cli("index", str(referrals), "--out", str(tmp_path / "idx"), "--lexical-only", check=False)
    one_line_error(proc, f"{locked}: encrypted PDF that needs a password: save an unencrypted copy")
    proc = capr_cli("index", str(referrals), "--out", str(tmp_path / "idx"), "--lexical-only", "--skip-bad")
    assert "indexed 3 documents" in proc.stderr and "1 bad record(s) skipped" in proc.stderr, proc.stderr
