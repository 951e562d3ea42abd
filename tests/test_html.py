"""HTML pages read as the text a reader sees: headings open sections, what is not the article is left out, the
declared charset is honoured; indexed and searched as any other document."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import capr_cli, one_line_error

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Gout - Health A to Z</title>
<script>var menu = "<p>not text</p>";</script><style>p { color: red }</style></head>
<body><header><a href="/">Home</a></header><nav><ul><li>Menu item</li><li>Contact us</li></ul></nav>
<main>
<h1>Gout</h1>
<p>Gout is a type of arthritis where your joints become painful &amp; swollen.
<h2>Symptoms of gout</h2>
<p>The main symptom is sudden, severe pain in a joint:
<ul><li>usually the big toe<li>hot, swollen skin</ul>
<h2>Treatment</h2>
<p>Anti-inflammatory painkillers and <b>colchicine</b> during an attack.</p>
<table><tr><th>Drug</th><th>Dose</th></tr><tr><td>Allopurinol</td><td>100 mg</td></tr></table>
<h2>Causes</h2><p>Too much uric acid in the blood.<br>Diet plays a part.</p>
</main>
<footer>Cookies and privacy.</footer><aside>Related: asthma</aside>
</body></html>
"""


def test_a_page_reads_as_its_article_with_headed_sections():
    from capr.corpus.html import html_document
    from capr.corpus.segment import segment

    doc = html_document(PAGE, "gout")
    assert doc.title == "Gout"  # the <h1>, not the <title> with the site's name
    for gone in ("not text", "color", "Home", "Menu item", "Contact us", "Cookies", "Related"):
        assert gone not in doc.text, gone
    assert "painful & swollen" in doc.text  # entities decoded
    sections = {s.aspect: doc.text[s.start:s.end] for s in doc.sections}
    assert list(sections) == ["", "symptoms", "treatment", "causes"]  # "Symptoms of gout", in the article "Gout"
    assert sections["symptoms"] == ("Symptoms of gout\nThe main symptom is sudden, severe pain in a joint:\n"
                                            "- usually the big toe\n- hot, swollen skin")
    assert "colchicine during an attack.\nDrug | Dose\nAllopurinol | 100 mg" in sections["treatment"]
    assert sections["causes"].endswith("Too much uric acid in the blood.\nDiet plays a part.")
    assert [p.aspect for p in segment(doc)] == [None, "symptoms", "treatment", "causes"]


def test_a_page_without_main_or_headings_keeps_its_body_text():
    from capr.corpus.html import html_document

    doc = html_document("<html><head><title>Clinic letter</title></head><body><p>Seen today.</p><p>Plan: review."
                        "</p><nav>Back</nav></body></html>", "letter")
    assert doc.title == "Clinic letter" and doc.text == "Seen today.\n\nPlan: review." and doc.sections is None


@pytest.fixture
def pages(tmp_path):
    folder = tmp_path / "pages"
    folder.mkdir()
    (folder / "gout.html").write_text(PAGE)
    (folder / "asthma.htm").write_bytes(
        b'<html><head><meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1"><title>Asthma</title>'
        b'</head><body><h1>Asthma</h1><p>Asthma causes wheeze; caf\xe9 smoke can set it off.</p><h2>Treatment</h2>'
        b'<p>Inhaled corticosteroids every day and a reliever inhaler for attacks.</p></body></html>')
    (folder / "archive").mkdir()
    (folder / "archive" / "eczema.html.gz").write_bytes(gzip.compress(
        b"<html><body><article><h1>Eczema</h1><h2>Treatment</h2><p>Emollients and topical steroids.</p></article>"
        b"</body></html>"))
    (folder / "note.txt").write_text("Follow-up note\nGout flare settled on colchicine.\n")
    return folder


def test_capr_indexes_and_searches_a_folder_of_pages(pages, tmp_path):
    idx = tmp_path / "idx"
    proc = capr_cli("index", str(pages), "--out", str(idx), "--lexical-only")
    assert "indexed 4 documents" in proc.stderr and "nothing skipped" in proc.stderr, proc.stderr
    out = json.loads(capr_cli("search", str(idx), "-e", "asthma", "-a", "treatment", "-k", "1", "--json").stdout)
    top = out["results"][0]
    assert (top["doc_id"], top["title"], top["aspect"]) == ("asthma", "Asthma", "treatment")
    assert "Inhaled corticosteroids" in top["text"]
    out = json.loads(capr_cli("search", str(idx), "cafe smoke", "-k", "1", "--json").stdout)
    assert out["results"][0]["doc_id"] == "asthma" and "café" in out["results"][0]["text"]  # its declared charset
    out = json.loads(capr_cli("search", str(idx), "-e", "eczema", "-a", "treatment", "-k", "1", "--json").stdout)
    assert out["results"][0]["doc_id"] == "archive/eczema"  # gzip'd, its id the path without .html.gz


def test_a_page_in_an_undeclared_encoding_is_one_line_naming_it(pages, tmp_path):
    bad = pages / "latin.html"
    bad.write_bytes(b"<html><body><h1>Eczema</h1><p>Caf\xe9.</p></body></html>")
    proc = capr_cli("index", str(pages), "--out", str(tmp_path / "idx"), "--lexical-only", check=False)
    one_line_error(proc, f"{bad}: not UTF-8 text (invalid byte at offset 33) and it declares no charset")
    proc = capr_cli("index", str(pages), "--out", str(tmp_path / "idx"), "--lexical-only", "--skip-bad")
    assert "indexed 4 documents" in proc.stderr and "1 bad record(s) skipped" in proc.stderr, proc.stderr


@pytest.mark.parametrize("heading, aspect", [
    ("Symptoms of gout", "symptoms"), ("Treating gout", "treatment"), ("Preventing gout", "prevention"),
    ("How is gout diagnosed?", "exams and tests"), ("What causes gout?", "causes"), ("What is gout?", "information"),
    ("Medications", "medications"), ("Gout and diet", "gout and diet"), ("Things you can do to help",
                                                                        "things you can do to help"),
])
def test_an_articles_heading_that_names_its_subject_has_the_aspect_it_asks_about(heading, aspect):
    from capr.text.aspects import article_heading_aspect

    assert article_heading_aspect(heading, "Gout") == aspect


def test_a_site_header_is_left_out_and_its_name_is_not_the_title():
    """No <main>: the site's <header> (its name as an <h1>, a tagline) is not the article; the article's <h1> is the
    title. A header inside an article is the article's."""
    from capr.corpus.html import html_document

    doc = html_document("<html><body><header><h1>Health Site</h1><p>Advice you can trust</p></header>"
                        "<div><h1>Shingles</h1><h2>Symptoms of shingles</h2><p>A painful rash on one side.</p></div>"
                        "</body></html>", "shingles")
    assert doc.title == "Shingles" and "Health Site" not in doc.text and "Advice" not in doc.text
    assert [s.aspect for s in doc.sections] == ["symptoms"]
    doc = html_document("<html><body><header><h1>Health Site</h1></header><article><header><h1>Shingles</h1>"
                        "<p>Reviewed 2026</p></header><p>A painful rash.</p></article></body></html>", "s")
    assert doc.title == "Shingles" and doc.text == "Reviewed 2026\n\nA painful rash."
    doc = html_document("<html><body><header><h1>Shingles</h1></header><p>A painful rash.</p></body></html>", "s")
    assert doc.title == "Shingles" and doc.text == "A painful rash."  # the only <h1> is the title
