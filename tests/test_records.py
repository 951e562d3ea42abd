from capr.records import Document, Passage, Query, Section

import pytest


def test_document_and_passage_round_trip():
    d = Document("d1", "T", "HPI: cough.", {"ward": "3B"}, [Section("HPI", "history of present illness", 0, 11, "s1")])
    assert Document.from_dict(d.to_dict()) == d
    p = Passage("p1", "d1", "cough.", "history of present illness", 5, 11, [(5, 11)], "T", "HPI", {"ward": "3B"})
    assert Passage.from_dict(p.to_dict()) == p
    assert p.sentence_texts() == ["cough."]


def test_query_needs_text_or_entity_or_aspect():
    assert Query("q", entity="gout").entity == "gout"
    with pytest.raises(ValueError, match="'q' is empty"):
        Query("q", text="  ")
