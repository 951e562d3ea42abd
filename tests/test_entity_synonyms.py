"""An entity's other names count as mentions of it in ⟨entity, aspect⟩ search (capr.labels.synonyms)."""

from __future__ import annotations

import bz2
import json
import pickle

import pytest

from conftest import index_of_documents

OBO = """format-version: 1.2

[Term]
id: HP:0000118
name: Phenotypic abnormality

[Term]
id: HP:0000001
name: All

[Term]
id: HP:0002094
name: Dyspnea
synonym: "Shortness of breath" EXACT layperson []
synonym: "Panting" RELATED layperson []
synonym: "Dyspnoea" EXACT uk_spelling []
synonym: "Respiratory distress" BROAD []
is_a: HP:0002795 ! Abnormal respiratory system physiology

[Term]
id: HP:0002795
name: Abnormal respiratory system physiology
is_a: HP:0000118 ! Phenotypic abnormality

[Term]
id: HP:0000006
name: Autosomal dominant inheritance
synonym: "Autosomal dominant" EXACT []
is_a: HP:0000001 ! All

[Term]
id: HP:0009999
name: Old breathing term
synonym: "Old breathing" EXACT []
is_obsolete: true
is_a: HP:0000118 ! Phenotypic abnormality

[Typedef]
id: part_of
name: part of
"""


def test_hpo_names_keep_exact_and_related_synonyms_of_phenotypes_only(tmp_path):
    from capr.labels.synonyms import hpo_names

    obo = tmp_path / "hp.obo"
    obo.write_text(OBO)
    # no BROAD synonym, no inheritance mode (not a phenotypic abnormality), no obsolete term
    assert hpo_names(obo) == [["dyspnea", "shortness of breath", "panting", "dyspnoea"]]
    assert hpo_names(obo, scopes=("EXACT",)) == [["dyspnea", "shortness of breath", "dyspnoea"]]


def test_drug_names_group_generic_brand_and_salt_names(tmp_path):
    from capr.labels.synonyms import EntitySynonyms, drug_names

    path = tmp_path / "drugs.pkl.bz2"
    with bz2.open(path, "wb") as f:
        pickle.dump({"drug_variant_to_canonical": {"clopidogrel": ["clopidogrel"], "plavix": ["clopidogrel"],
                                                   "clopidogrel bisulfate": ["clopidogrel"], "asa": ["aspirin"],
                                                   "aspirin": ["aspirin"]}}, f)
    groups = drug_names(path)
    assert groups == [["clopidogrel", "plavix", "clopidogrel bisulfate"]]  # "asa": too short to trust alone
    table = EntitySynonyms(groups)
    assert table.forms("Plavix") == ["plavix", "clopidogrel", "clopidogrel bisulfate"]
    assert table.forms("Aspirin") == ["aspirin"]  # a name without synonyms is itself
    indexed = EntitySynonyms(groups)
    assert indexed.groups_of  # built now; a table's first few lookups scan its groups instead
    for name in ("plavix", "Clopidogrel Bisulfate", "aspirin", "nothing", "", "plavix", "asa", "clopidogrel"):
        assert table.forms(name) == indexed.forms(name), name
    assert table._groups_of is not None  # past its first few names a table builds the index
    seen: list = []

    class Watched(list):  # what another thread would find while the index is being built
        def __iter__(self):
            for names in list.__iter__(self):
                seen.append(watched._groups_of)
                yield names

    watched = EntitySynonyms(Watched(groups + [["aspirin", "acetylsalicylic acid"]]))
    assert watched.groups_of["aspirin"] == [1] and seen == [None, None]


def test_the_installed_table_is_cached_and_knows_common_names(tmp_path):
    from capr.labels.synonyms import EntitySynonyms

    table = EntitySynonyms.load(tmp_path)
    assert "shortness of breath" in table.forms("Dyspnea")
    assert "plavix" in table.forms("Clopidogrel") and "clopidogrel" in table.forms("plavix")
    cached = list(tmp_path.glob("entity-synonyms-*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text()) == table.groups
    assert EntitySynonyms.load(tmp_path).forms("Dyspnea") == table.forms("Dyspnea")


NOTES = [
    # the entity's own note names the drug only by its brand
    {"doc_id": "cardiology", "title": "Cardiology follow-up", "text": "MEDICATIONS:\nPlavix 75 mg daily, aspirin 81 mg.\n"},
    # the asked section of other notes, in the query's words
    {"doc_id": "diabetes", "title": "Endocrine note", "text": "MEDICATIONS:\nMedications reviewed: metformin 500 mg "
     "twice daily; medications reconciled.\n"},
    {"doc_id": "asthma", "title": "Pulmonary note", "text": "MEDICATIONS:\nAlbuterol inhaler as needed.\n\n"
     "REVIEW OF SYSTEMS:\nShortness of breath on exertion, no chest pain.\n"},
    {"doc_id": "knee", "title": "Orthopedic note", "text": "REVIEW OF SYSTEMS:\nReview of systems otherwise negative "
     "for every system reviewed.\n"},
]


@pytest.fixture(scope="module")
def notes_index(tmp_path_factory):
    return index_of_documents(tmp_path_factory, "notes", NOTES)


@pytest.mark.parametrize("entity,aspect,doc", [("Clopidogrel", "medications", "cardiology"),
                                               ("Dyspnea", "review of systems", "asthma")])
def test_a_passage_naming_the_entity_by_a_synonym_is_in_the_entity_tier(notes_index, entity, aspect, doc):
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(notes_index)
    q = Query("q", entity=entity, aspect=aspect)
    result = searcher.search(q, SearchOptions(k=2))
    assert result.notices == []
    top = result.hits[0]
    assert (top.passage.doc_id, top.passage.aspect) == (doc, aspect)
    shown = {top.passage.text[a - top.passage.start: b - top.passage.start].lower() for a, b in top.highlights}
    assert shown & {"plavix", "shortness", "breath"}  # the synonym that made it a mention is highlighted
    # on its own name only, nothing mentions the entity and the asked section of another note comes first
    plain = searcher.search(q, SearchOptions(k=2, entity_synonyms=False))
    assert plain.notices == [f"no passage mentions {entity!r}; showing the closest matches"]
    assert plain.hits[0].passage.doc_id != doc


def test_capr_search_no_entity_synonyms_flag(notes_index, runner):
    from capr.cli import app

    args = ["search", str(notes_index.root), "-e", "Clopidogrel", "-a", "medications", "-k", "1", "--json"]
    with_synonyms = runner.invoke(app, args)
    assert with_synonyms.exit_code == 0, with_synonyms.output
    assert json.loads(with_synonyms.output)["results"][0]["doc_id"] == "cardiology"
    without = runner.invoke(app, args + ["--no-entity-synonyms"])
    assert without.exit_code == 0, without.output
    assert json.loads(without.output)["results"][0]["doc_id"] != "cardiology"


def test_capr_eval_measures_the_search_it_is_told():
    """`capr eval --pipeline default --no-entity-synonyms` measures `capr search --no-entity-synonyms`: the
    benchmark scorer gets SearchOptions with the same setting."""
    from capr.eval.runner import EvalConfig

    assert EvalConfig(pipeline="default").search_options().entity_synonyms is True
    off = EvalConfig(pipeline="default", entity_synonyms=False)
    assert off.search_options().entity_synonyms is False
