"""A passage that names an entity only to deny it ("Neck: supple. No lymphadenopathy.") is not about it: ConText's
negation (capr.text.negation, checked against medspaCy's on real notes) keeps it from outranking the passages that
name the entity. Nor is one that holds the words of a name in different sentences ("heart rate", "renal
failure" for heart failure)."""

from __future__ import annotations

import pytest

from capr.text.negation import is_negated, negations
from conftest import DATA_DIR, capr_cli, index_of_documents, need_data


def _negated(sentence: str, mention: str) -> bool:
    start = sentence.index(mention)
    return is_negated(sentence, start, start + len(mention))


@pytest.mark.parametrize("sentence, mention, negated", [
    ("Neck: supple. No lymphadenopathy.", "lymphadenopathy", True),
    ("Patient denies chest pain or palpitations.", "palpitations", True),
    ("Pneumonia was ruled out.", "Pneumonia", True),  # a trigger after the mention
    ("Pneumonia not ruled out.", "Pneumonia", False),  # possible, not negated: "not" inside a longer trigger
    ("No nausea or vomiting, but persistent anorexia.", "anorexia", False),  # "but" ends the scope
    ("No nausea or vomiting, but persistent anorexia.", "vomiting", True),
    ("She presents with acute myocardial infarction.", "myocardial infarction", False),
    ("He cannot tolerate aspirin.", "aspirin", True),  # "cannot" is "can not", as spaCy splits it
    ("SKIN: No petechiae or ecchymosis.", "ecchymosis", True),  # medspaCy's ": no" would swallow the "no"
    ("Fever: none.", "Fever", True),
    ("Acute appendicitis.", "appendicitis", False),
])
def test_negation_as_context_reads_it(sentence, mention, negated):
    assert _negated(sentence, mention) is negated


def test_a_scope_runs_from_its_trigger_to_the_end_of_the_sentence():
    assert negations("") == []
    assert negations("no") == []  # a trigger with nothing after it negates nothing
    sentence = "Without fever or chills, but with a cough."
    (negation,) = negations(sentence)
    assert sentence[slice(*negation.trigger)] == "Without"
    assert sentence[slice(*negation.scope)] == "fever or chills,"


def test_a_trigger_inside_the_mention_does_not_negate_it():
    """ConText: a modifier that overlaps its target does not modify it ("lack of appetite" is the entity)."""
    assert not _negated("Lack of appetite for two weeks.", "Lack of appetite")
    assert _negated("Lack of appetite for two weeks.", "appetite")


def test_negation_agrees_with_medspacy_context_on_real_notes():
    """The reference: medspaCy's ConText (what `capr labels` runs) on the gazetteer's mentions in 60 MTSamples
    notes, one sentence at a time. The rules are ConText's own; the one intended difference is ": no" swallowing the
    "no" after a heading (above)."""
    data = need_data("mtsamples")
    pytest.importorskip("medspacy")
    from capr.corpus.mtsamples import read_mtsamples
    from capr.corpus.report import ReadReport
    from capr.corpus.segment import segment
    from capr.labels.context import AssertionFilter
    from capr.labels.gazetteer import Gazetteer

    gazetteer, reference = Gazetteer.load(), AssertionFilter()
    agree, differ = 0, []
    for n, doc in enumerate(read_mtsamples(data / "mtsamples.csv.gz", ReadReport())):
        if n == 60:
            break
        for p in segment(doc):
            found = gazetteer.find(p.text)
            for s, e in [(a - p.start, b - p.start) for a, b in p.sentences]:
                inside = [m for m in found if s <= m.start < e]
                sentence = p.text[s:e]
                for m, why in zip(inside, reference.reasons(sentence, inside, offset=s)):
                    if (why == "negated") == is_negated(sentence, m.start - s, m.end - s):
                        agree += 1
                    else:
                        differ.append((m.text, why, sentence))
    assert agree > 500
    assert len(differ) / (agree + len(differ)) < 0.01, differ[:20]


SENTENCES = ["He cannot walk unaided.", "She didn't take her insulin.", "Pneumonia was ruled out.",
             "Denies chest pain.", "Free of pain since Monday.", "The patient is not febrile.",
             "Heart rate 80, blood pressure 120/80.", "Tuberculosis is unlikely.", "Skin: no rash."]


def test_sentences_passed_over_for_want_of_a_negation_word_have_no_negation():
    """`negations` reads a sentence's rules only when it holds one of the words some negating rule needs; on every
    sentence of 300 MTSamples notes (or the sentences above without the data) it gives what reading all the rules
    gives, and it passes most sentences over."""
    from capr.text.negation import _may_negate, _read_negations

    sentences = list(SENTENCES)
    data = DATA_DIR / "mtsamples" / "mtsamples.csv.gz"
    if data.exists():
        from capr.corpus.mtsamples import read_mtsamples
        from capr.corpus.report import ReadReport
        from capr.corpus.segment import segment

        for n, doc in enumerate(read_mtsamples(data, ReadReport())):
            if n == 300:
                break
            sentences += [p.text[a - p.start: b - p.start] for p in segment(doc) for a, b in p.sentences]
    passed_over = [s for s in sentences if not _may_negate(s)]
    assert not [s for s in passed_over if _read_negations(s)]
    assert all(_may_negate(s) and negations(s) for s in SENTENCES[:6])
    assert len(passed_over) > len(sentences) / 2


NOTES = [
    {"doc_id": "thyroid", "title": "Endocrine clinic note", "text": "HISTORY OF PRESENT ILLNESS:\nFatigue and weight "
     "gain.\n\nPHYSICAL EXAMINATION:\nNeck: supple. No lymphadenopathy.\n"},
    {"doc_id": "lymphoma", "title": "Hematology clinic note", "text": "HISTORY OF PRESENT ILLNESS:\nNight sweats and "
     "weight loss over three months.\n\nPHYSICAL EXAMINATION:\nFirm, matted, non-tender cervical lymphadenopathy on "
     "the right side of the neck, the largest node about three centimetres across, with overlying skin intact and "
     "no erythema of the skin.\n"},
    {"doc_id": "sprain", "title": "Sports medicine note", "text": "HISTORY OF PRESENT ILLNESS:\nAnkle sprain while "
     "running.\n\nPHYSICAL EXAMINATION:\nSwelling of the lateral ankle.\n"},
]


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    return index_of_documents(tmp_path_factory, "negated-notes", NOTES)


@pytest.mark.parametrize("scope", ["document", "passage"])
def test_the_note_that_finds_the_entity_ranks_above_the_note_that_denies_it(notes, scope):
    """⟨lymphadenopathy, physical examination⟩: both examinations name it, and BM25 prefers the short one that
    says "No lymphadenopathy"; the entity's bonus (or tier) goes to the note that found it."""
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(notes)
    q = Query("q", entity="lymphadenopathy", aspect="physical examination")
    hits = searcher.search(q, SearchOptions(k=3, retriever="bm25", entity_scope=scope)).hits
    assert (hits[0].passage.doc_id, hits[0].passage.aspect) == ("lymphoma", "physical examination")
    assert "thyroid" in [h.passage.doc_id for h in hits]  # ranked lower, not dropped: it is about the neck
    # the words alone (no entity tiers) put the denial first: it is the bonus that moved
    plain = searcher.search(q, SearchOptions(k=3, retriever="bm25", entity_first=False)).hits
    assert plain[0].passage.doc_id == "thyroid"


def test_capr_search_ranks_the_note_that_finds_the_entity_first(notes):
    import json

    out = json.loads(capr_cli("search", str(notes.root), "-e", "lymphadenopathy", "-a", "physical examination",
                              "-r", "bm25", "--json").stdout)
    assert out["results"][0]["doc_id"] == "lymphoma"


SCATTERED = [
    {"doc_id": "renal", "title": "Nephrology clinic note", "text": "PHYSICAL EXAMINATION:\nHeart rate 80. Chronic "
     "renal failure.\n"},
    {"doc_id": "cardiac", "title": "Cardiology clinic note", "text": "PHYSICAL EXAMINATION:\nBibasal crackles, "
     "raised jugular venous pressure and pitting oedema of both ankles, in keeping with decompensated heart failure "
     "after the missed doses of furosemide.\n"},
]


def test_a_name_whose_words_share_no_sentence_is_not_named(tmp_path_factory):
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(index_of_documents(tmp_path_factory, "scattered", SCATTERED))
    q = Query("q", entity="heart failure", aspect="physical examination")
    hits = searcher.search(q, SearchOptions(k=2, retriever="bm25")).hits
    assert [h.passage.doc_id for h in hits] == ["cardiac", "renal"]
    plain = searcher.search(q, SearchOptions(k=2, retriever="bm25", entity_first=False)).hits
    assert plain[0].passage.doc_id == "renal"  # the words alone prefer the short note


@pytest.mark.parametrize("entity, text, named", [
    ("lymphadenopathy", "Neck: supple. No lymphadenopathy.", False),
    ("lymphadenopathy", "Neck: supple. No thyromegaly. Cervical lymphadenopathy.", True),
    ("lack of appetite", "Lack of appetite for two weeks.", True),  # the trigger is the name's own words
    ("appetite", "Lack of appetite for two weeks.", False),
    ("heart failure", "Heart rate 80. Chronic renal failure.", False),  # words in different sentences
    ("heart failure", "Heart rate 80; chronic renal failure.", True),  # one sentence holds both: read as named
])
def test_a_passage_names_the_entity_in_one_sentence_not_to_deny_it(entity, text, named):
    from capr.text.sentences import split_sentences
    from capr.text.analyzer import Analyzer
    from capr.records import Passage
    from capr.search.mentions import names_entity

    analyzer = Analyzer()
    passage = Passage("p", "d", text, None, 0, len(text), sentences=split_sentences(text))
    assert names_entity(passage, [analyzer(entity)], analyzer) is named
    titled = Passage("p", "d", text, None, 0, len(text), sentences=split_sentences(text), title=f"{entity} clinic")
    assert names_entity(titled, [analyzer(entity)], analyzer)  # the document's title names it


def test_a_sentence_of_thousands_of_denials_is_read_in_one_pass():
    """A section never split into passages (--max-tokens 0) can hold one long list: the triggers are pruned and
    scoped by their neighbours, not each against all the others (that took seconds a search)."""
    sentence = ", ".join(["no fever"] * 5000) + ", but a cough."
    found = negations(sentence)
    assert len(found) == 5000
    assert is_negated(sentence, sentence.index("fever"), sentence.index("fever") + 5)
    assert not is_negated(sentence, sentence.index("cough"), sentence.index("cough") + 5)


DENYING_NOTES = [
    {"doc_id": "denies", "title": "Endocrine clinic note", "text": "HISTORY OF PRESENT ILLNESS:\nFatigue. No "
     "lymphadenopathy.\n\nMEDICATIONS:\nLevothyroxine.\n"},
    {"doc_id": "finds", "title": "Hematology clinic note", "text": "HISTORY OF PRESENT ILLNESS:\nFirm cervical "
     "lymphadenopathy for three weeks, with night sweats.\n\nMEDICATIONS:\nPrednisone 40 mg daily, tapered by 5 mg "
     "a week over the next two months, with omeprazole 20 mg daily and calcium with vitamin D.\n"},
]


@pytest.mark.parametrize("scope", ["document", "passage"])
def test_a_note_that_only_denies_the_entity_is_not_about_it(tmp_path_factory, scope):
    """⟨lymphadenopathy, medications⟩: the entity's document tier holds the note that finds it; the note whose
    only mention denies it ranks its short medication list with the rest, below the other note's."""
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(index_of_documents(tmp_path_factory, f"denying-{scope}", DENYING_NOTES))
    q = Query("q", entity="lymphadenopathy", aspect="medications")
    result = searcher.search(q, SearchOptions(k=4, retriever="bm25", entity_scope=scope))
    medications = [h.passage.doc_id for h in result.hits if h.passage.aspect == "medications"]
    assert medications == ["finds", "denies"]
    assert not result.notices
    # the words alone prefer the short list: it is the tier that moved it
    plain = searcher.search(q, SearchOptions(k=4, retriever="bm25", entity_first=False)).hits
    assert [h.passage.doc_id for h in plain if h.passage.aspect == "medications"][0] == "denies"


def test_when_every_note_denies_the_entity_the_user_is_told(tmp_path_factory):
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(index_of_documents(tmp_path_factory, "all-denying", DENYING_NOTES[:1] + NOTES[2:]))
    result = searcher.search(Query("q", entity="lymphadenopathy", aspect="medications"),
                             SearchOptions(k=3, retriever="bm25"))
    assert result.hits
    assert result.notices == ["no passage names 'lymphadenopathy' other than to deny it; showing the closest matches"]


def test_under_an_aspect_filter_the_note_that_finds_the_entity_elsewhere_ranks_first(tmp_path_factory):
    """The filter keeps only medication lists, none of which names the entity: the note whose history finds it is
    still the one about it, and no notice says otherwise."""
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(index_of_documents(tmp_path_factory, "denying-filtered", DENYING_NOTES))
    result = searcher.search(Query("q", entity="lymphadenopathy", aspect="medications"),
                             SearchOptions(k=2, retriever="bm25", filters=["aspect=medications"]))
    assert [h.passage.doc_id for h in result.hits] == ["finds", "denies"]
    assert not result.notices


# ------------------------------------------------------------------ evidence never argues the other way (issue 52)
@pytest.mark.parametrize("method", ["lexical", "dense"])
def test_a_sentence_that_denies_the_entity_is_never_its_evidence(tmp_path_factory, demo_dir, method):
    """⟨cardiomyopathy, family history⟩ on the demo corpus: note_03's family history denies cardiomyopathy on the
    mother's side and names it nowhere else; that sentence keeps its score but is not highlighted as evidence for
    it, while note_02's own mention ("strong family history of cardiomyopathy") still is."""
    from capr.corpus import Format, read_documents
    from capr.index import build_index
    from capr.models.encoder import EncoderConfig
    from capr.records import Query
    from capr.search.searcher import search

    dense = EncoderConfig() if method == "dense" else None
    index = build_index(read_documents(demo_dir, Format.text), tmp_path_factory.mktemp(f"demo-{method}") / "idx",
                        dense=dense)
    hits = search(index, Query("q", entity="cardiomyopathy", aspect="family history"), k=5, evidence=method,
                  retriever="bm25")
    by_doc = {h.passage.doc_id: h for h in hits if h.passage.aspect == "family history"}
    denial = [s for s in by_doc["note_03_hypertrophic_cardiomyopathy_consult"].sentences
              if "No known cardiomyopathy" in s.text]
    assert denial and not denial[0].evidence
    if method == "lexical":
        assert denial[0].score > 0  # scored as before: only its part as evidence changes
        named = [s for s in by_doc["note_02_dilated_cardiomyopathy_consult"].sentences if s.evidence]
        assert any("family history of cardiomyopathy" in s.text for s in named)
