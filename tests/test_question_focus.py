"""An aspect read from a question's wording ("how is X treated" → treatment) favours the treatment sections of the
documents the question names (their title), not every document's: the wording of a question about joint flares
must not put another disease's treatment section first."""

from __future__ import annotations

import json

import pytest

from capr.records import Query
from capr.search import SearchOptions, Searcher


@pytest.fixture(scope="module")
def articles(tmp_path_factory):
    from capr.corpus import read_documents
    from capr.index import build_index

    docs = [
        {"doc_id": "gout", "title": "Gout", "text": "Overview:\nGout causes painful joint flares; joint flares come at "
         "night and joint flares last days.\n\nTreatment:\nGout treatment: rest and medicines.\n"},
        {"doc_id": "asthma", "title": "Asthma", "text": "Overview:\nAsthma narrows the airways.\n\nTreatment:\nAsthma "
         "treatment: inhalers. Some people with asthma have gout and joint flares too.\n"},
        {"doc_id": "eczema", "title": "Eczema", "text": "Overview:\nEczema is dry itchy skin.\n\nTreatment:\nEczema "
         "treatment: creams.\n"},
    ]
    tmp = tmp_path_factory.mktemp("focus")
    (tmp / "a.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return Searcher(build_index(read_documents(tmp / "a.jsonl"), tmp / "idx"))


def top(searcher: Searcher, query, **options) -> list[tuple[str, str, float]]:
    return [(h.passage.doc_id, h.passage.aspect, h.score) for h in searcher.search(query, SearchOptions(k=6, **options)).hits]


def test_wording_prior_only_inside_the_documents_the_question_names(articles):
    q = "how are joint flares treated"  # names no document: the wording favours nothing
    assert top(articles, q)[0][:2] == ("gout", "information")
    assert top(articles, q, wording_prior="everywhere")[0][:2] == ("asthma", "treatment")  # what it did before
    assert [h[:2] for h in top(articles, q)] == [h[:2] for h in top(articles, q, aspect_boost=0)]

    named = {h[:2]: h[2] for h in top(articles, "how is gout treated")}
    plain = {h[:2]: h[2] for h in top(articles, "how is gout treated", aspect_boost=0)}
    assert named[("gout", "treatment")] == pytest.approx(3 * plain[("gout", "treatment")])  # the named title's section
    assert named[("asthma", "treatment")] == pytest.approx(plain[("asthma", "treatment")])  # not another disease's
    assert top(articles, "how is gout treated")[0][:2] == ("gout", "treatment")

    # an explicit ⟨entity, aspect⟩ query keeps its prior wherever the entity's tier reaches
    explicit = top(articles, Query("q", entity="joint flares", aspect="treatment"))
    assert explicit == top(articles, Query("q", entity="joint flares", aspect="treatment"), wording_prior="everywhere")


def test_fusion_shares_follow_how_rare_the_question_words_are(articles, tmp_path):
    from capr.corpus import read_documents
    from capr.index import build_index
    from capr.search.query_weights import RARE_SHARES, RARE_WORDS, informativeness, mean_idf, question_fusion
    from capr.search.fusion import FusionConfig

    notes = [{"doc_id": f"n{i}", "text": f"Visit {i}: rest, fluids and a follow-up visit."} for i in range(120)]
    notes[0]["text"] += " Inhalers were refilled."
    notes[1]["text"] += " Creams were refilled."
    (tmp_path / "notes.jsonl").write_text("\n".join(json.dumps(d) for d in notes) + "\n")
    clinic = Searcher(build_index(read_documents(tmp_path / "notes.jsonl"), tmp_path / "idx"))
    store, base = clinic.store, FusionConfig(weights=(0.2, 0.8))
    rare, common = clinic.parse("inhalers creams"), clinic.parse("rest and fluids")
    assert informativeness(store, rare.terms) > informativeness(store, common.terms)
    assert question_fusion(store, rare, base).weights == RARE_SHARES  # words one passage in 120 has: BM25 as dense
    assert question_fusion(store, common, base) == base  # words every passage has: the default shares
    structured = clinic.parse(Query("q", entity="asthma", aspect="treatment"))
    assert question_fusion(store, structured, base) == base  # ⟨entity, aspect⟩ keeps the fusion it has

    # on an index of a few passages every word reads as rare relative to its size, but none is in absolute terms:
    # the default shares stay (a paraphrase must not go to BM25's literal match on a small corpus)
    tiny = articles.parse("inhalers creams")
    assert informativeness(articles.store, tiny.terms) >= RARE_WORDS and mean_idf(articles.store, tiny.terms) < 4.0
    assert question_fusion(articles.store, tiny, base) == base


def test_a_question_naming_a_title_is_searched_as_about_it(articles):
    q = "can eczema come with joint flares"  # BM25 alone prefers the passage that repeats "joint flares"
    unfocused = articles.search(q, SearchOptions(k=6, question_focus=False))
    assert unfocused.hits[0].passage.doc_id == "gout" and unfocused.query.entity is None
    focused = articles.search(q, SearchOptions(k=6))
    assert focused.query.entity == "Eczema" and focused.to_dict()["query"]["entity"] == "Eczema"
    assert focused.hits[0].passage.doc_id == "eczema"
    # passages of the named document's tier come before every other passage
    docs = [h.passage.doc_id for h in focused.hits]
    assert docs[: docs.count("eczema")] == ["eczema"] * docs.count("eczema")


def test_no_focus_when_the_question_names_several_titles_or_the_filter_hides_it(articles):
    both = "eczema or asthma with joint flares"
    assert articles.search(both, SearchOptions(k=6)).query.entity is None
    assert top(articles, both) == top(articles, both, question_focus=False)
    # the focus is read under the filter: a document the filter hides never becomes the question's entity
    hidden = articles.search("can eczema come with joint flares", SearchOptions(k=6, filters={"doc_id": "gout"}))
    assert hidden.query.entity is None and {h.passage.doc_id for h in hidden.hits} == {"gout"}


def test_focus_among_titles():
    from capr.text.analyzer import Analyzer
    from capr.search.question_focus import focus_among

    an = Analyzer()
    ask = an("what is the treatment for type 2 diabetes in children")
    assert focus_among(an, ask, ["Diabetes", "Type 2 Diabetes", "Children"]) is None  # two outer titles
    assert focus_among(an, ask, ["Diabetes", "Type 2 Diabetes", "Asthma"]) == "Type 2 Diabetes"
    assert focus_among(an, ask, ["Type 2 diabetes", "type 2 Diabetes"]) == "Type 2 diabetes"  # read alike
    assert focus_among(an, ask, ["Asthma", ""]) is None


def test_a_notice_of_a_favoured_section_only_when_the_wording_favoured_one(tmp_path):
    # "how ... treated" reads as treatment; this index has "treatment options" sections instead. The wording's
    # prior favours them only in documents whose title the question names: a question naming none must not be
    # told that they are favoured (its scores are those without any prior)
    from capr.corpus import read_documents
    from capr.index import build_index

    wounds = ["Burn wound", "Pressure injury", "Venous leg ulcer", "Skin tear", "Diabetic foot ulcer", "Surgical site infection"]
    docs = [{"doc_id": f"w{i}", "title": t, "text": f"HISTORY:\n{t} seen in clinic.\n\nTREATMENT OPTIONS:\nWound "
             f"dressings changed daily for the {t.lower()}.\n"} for i, t in enumerate(wounds)]
    (tmp_path / "w.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    searcher = Searcher(build_index(read_documents(tmp_path / "w.jsonl"), tmp_path / "idx"))
    said = "no section of this index is about 'treatment'; sections about 'treatment options' are favoured"

    unnamed = searcher.search("how are wound dressings treated", SearchOptions(k=3))
    plain = searcher.search("how are wound dressings treated", SearchOptions(k=3, aspect_boost=0))
    assert [h.score for h in unnamed.hits] == [h.score for h in plain.hits]  # nothing was favoured ...
    assert said not in unnamed.notices  # ... and the user is not told otherwise

    named = searcher.search("how is a burn wound treated", SearchOptions(k=3))
    assert named.hits[0].passage.aspect == "treatment options" and said in named.notices
    explicit = searcher.search(Query("q", entity="wound", aspect="treatment"), SearchOptions(k=3))
    assert said in explicit.notices  # an aspect asked for is favoured everywhere


def test_bm25_share_by_question_is_an_option_not_the_default(runner, tmp_path):
    """BM25 at dense's share for a question of rare words costs medication questions (their rare words are brand
    names BM25 cannot read: docs/RESULTS.md, issue 53), so `capr search` fuses every question alike unless asked."""
    from conftest import capr_in_process, write_jsonl

    notes = [{"doc_id": f"n{i}", "text": f"Visit {i}: rest, fluids and a follow-up visit."} for i in range(120)]
    notes[0]["text"] += " Inhalers were refilled."
    notes[1]["text"] += " Creams were refilled."
    index = tmp_path / "idx"
    capr_in_process(runner, "index", str(write_jsonl(tmp_path / "notes.jsonl", notes)), "--out", str(index),
                    "--encoder-backend", "static")

    def fusion(question: str, *options: str) -> dict:
        return json.loads(capr_in_process(runner, "search", str(index), question, "--json", *options).stdout)["fusion"]

    default = fusion("inhalers creams")
    assert default == fusion("rest and fluids") and default["weights"]["bm25"] < default["weights"]["dense"]
    assert fusion("inhalers creams", "--fusion-by-question")["weights"] == {"bm25": 0.5, "dense": 0.5}
    assert fusion("rest and fluids", "--fusion-by-question") == default  # common words: the store's shares
