from capr.text.aspects import infer_aspect, normalize_aspect
from capr.corpus.segment import SegmenterConfig, count_tokens, detect_sections, segment, split_sentences
from capr.records import Document

NOTE = """# Nephrology consult

CHIEF COMPLAINT:
Blood in urine.

HPI: 34-year-old man seen by Dr. Smith, e.g. for hematuria. He denies pain. The pt. is well. PMH: hypertension.
Past Medical History: asthma.
Family History:
Father with cardiomyopathy.
1. Assessment
IgA nephropathy suspected.
## Plan
Biopsy. Follow up in 2 weeks. A/P: start lisinopril 10 mg daily.
MEDS: lisinopril
"""


def test_heading_styles_are_detected_and_normalized():
    secs = detect_sections(NOTE)
    got = [(s.heading, s.aspect) for s in secs]
    assert got == [
        ("CHIEF COMPLAINT", "chief complaint"),
        ("HPI", "history of present illness"),
        ("PMH", "past medical history"),  # inline after a sentence
        ("Past Medical History", "past medical history"),
        ("Family History", "family history"),
        ("Assessment", "assessment"),  # numbered
        ("Plan", "plan"),  # markdown
        ("A/P", "assessment and plan"),  # inline abbreviation
        ("MEDS", "medications"),
    ]
    for s in secs:  # spans point into the original text
        assert NOTE[s.start:s.end].lstrip("#0123456789. ").startswith(s.heading)


def test_aspect_table_synonyms_and_unknown_headings():
    assert normalize_aspect("ROS:") == "review of systems"
    assert normalize_aspect("Signs and Symptoms") == "symptoms"
    assert normalize_aspect("symptoms and presentation") == "symptoms"
    assert normalize_aspect("HEENT") == "physical examination"
    assert normalize_aspect("OPERATIVE NOTE DETAILS") == "operative note details"
    assert infer_aspect("How is IgA nephropathy treated?") == "treatment"
    # generic wording: the overview (the search favours it only where the corpus has overviews as a convention)
    assert infer_aspect("What is IgA nephropathy?") == "information"
    assert infer_aspect("What is (are) gout ?") == "information"
    assert infer_aspect("What is the outlook for gout?") == "outlook"  # a specific aspect wins over the generic cue
    assert infer_aspect("What are the treatments for gout?") == "treatment"
    assert infer_aspect("Is there anything new? What is it?") is None  # only a question that opens with it
    assert infer_aspect("What are the symptoms of IgA nephropathy?") == "symptoms"
    assert infer_aspect("what research (or clinical trials) is being done for gout ?") == "research"
    assert infer_aspect("Who is at risk for gout?") == "susceptibility"
    assert infer_aspect("What is end-stage renal disease?") == "information"  # "stage" in a name is no staging
    assert infer_aspect("My knee hurts when I walk") is None


def test_sentences_survive_abbreviations():
    text = "Dr. Smith saw the pt. on Monday, e.g. for pain. She was fine. Pts. were told to rest."
    spans = split_sentences(text)
    assert [text[a:b] for a, b in spans] == [
        "Dr. Smith saw the pt. on Monday, e.g. for pain.",
        "She was fine.",
        "Pts. were told to rest.",
    ]


def test_passages_respect_token_limit_offsets_and_overlap():
    body = " ".join(f"Sentence number {i} mentions hematuria and edema." for i in range(40))
    doc = Document("d", "IgA nephropathy", f"SYMPTOMS:\n{body}\n")
    ps = segment(doc, SegmenterConfig(max_tokens=30))
    assert len(ps) > 5
    assert ps[0].text.startswith("SYMPTOMS:\n")
    for p in ps:
        assert count_tokens(p.text.removeprefix("SYMPTOMS:")) <= 30
        assert doc.text[p.start:p.end] == p.text
        assert p.aspect == "symptoms"
        assert all(doc.text[a:b].endswith(".") or doc.text[a:b] == "SYMPTOMS:" for a, b in p.sentences)
    assert len({p.pid for p in ps}) == len(ps)
    overlapped = segment(doc, SegmenterConfig(max_tokens=30, overlap=8))
    assert overlapped[1].sentences[0] == overlapped[0].sentences[-1]  # last sentence repeated
    assert all(count_tokens(p.text.removeprefix("SYMPTOMS:")) <= 30 for p in overlapped)


def test_documents_without_headings_fall_back_to_paragraphs():
    text = "The patient was seen today for follow up.\n\nShe reports mild fatigue and no fever.\n\n\nLabs were stable."
    ps = segment(Document("d", "", text))
    assert [p.text for p in ps] == [
        "The patient was seen today for follow up.",
        "She reports mild fatigue and no fever.",
        "Labs were stable.",
    ]
    assert all(p.aspect is None for p in ps)


def test_overlong_sentence_is_split_at_word_boundaries():
    text = "FINDINGS:\n" + " ".join(["word"] * 95)
    ps = segment(Document("d", "", text), SegmenterConfig(max_tokens=40))
    assert [count_tokens(p.text) for p in ps] == [41, 40, 15]  # heading + 40 words, 40, the rest
    assert ps[0].text.startswith("FINDINGS:\nword")


def test_title_heading_is_not_an_aspect():
    doc = Document("d", "Clinic note", "# Clinic note\nSeen today for review.\n\nPLAN: follow up.")
    assert [(p.heading, p.aspect) for p in segment(doc)] == [("Clinic note", None), ("PLAN", "plan")]


def test_long_lines_are_split_a_window_at_a_time_with_the_same_sentences(monkeypatch, demo_dir):
    """A line longer than SENTENCE_WINDOW (a dump on one line) goes to nupunkt in windows; the sentences equal
    splitting the line in one call, including abbreviations and sentences that straddle a window's edge."""
    import capr.text.sentences as seg
    from capr.corpus import read_documents

    texts = [d.text.replace("\n", " ") for d in read_documents(demo_dir)]
    line = " ".join(texts) + " Dr. Smith saw pts. e.g. at 2 p.m. today. Then left"
    one_call = seg.split_sentences(line)
    assert len(one_call) > 200
    for window in (997, 5_000, 20_011):
        monkeypatch.setattr(seg, "SENTENCE_WINDOW", window)
        assert seg.split_sentences(line) == one_call, window
        # a window with no sentence end at all is taken whole and the line moves on
        words = seg.split_sentences("lorem " * (window // 2))
        assert words and words[0][0] == 0 and words[-1][1] == len("lorem " * (window // 2)) - 1
        assert all(b <= a2 for (_, b), (a2, _) in zip(words, words[1:]))


def test_a_run_on_markdown_line_is_not_a_heading():
    text = "# " + "word " * 100 + "\n\nSymptoms: cough."  # 500 characters after the '#'
    assert [s.heading for s in detect_sections(text)] == ["", "Symptoms"]  # the run-on line is untitled text
    assert [s.heading for s in detect_sections("# Treatment options\nRest.")] == ["Treatment options"]
