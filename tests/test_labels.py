"""Self-supervised labels: aspects from headings, dictionary NER, ConText negation, abbreviations, test-split hygiene."""

from __future__ import annotations

import json

import pytest

from capr.errors import BadInputError
from capr.labels import LabelConfig, LabelGenerator, read_labels, write_labels
from capr.labels.gazetteer import Gazetteer
from capr.labels.splits import mtsamples_split
from capr.records import Document
from conftest import capr_cli, capr_in_process, capr_real_or_in_process, need_data, write_jsonl

NOTE = """CHIEF COMPLAINT: Headache.

HISTORY OF PRESENT ILLNESS: The patient is a 45-year-old woman with severe headache for three days. She denies nausea or vomiting. She has no fever.

FAMILY HISTORY: Her mother had breast cancer.

MEDICATIONS: Lisinopril 10 mg daily and metformin.

ASSESSMENT: Chronic kidney disease (CKD) stage 3. CKD is stable. Possible pneumonia.
"""


@pytest.fixture(scope="module")
def generator() -> LabelGenerator:
    return LabelGenerator()  # real HPO/disease dictionary (built once, then cached), drugs, medspacy ConText


@pytest.fixture(scope="module")
def labels(generator) -> dict[str, object]:
    doc = Document(doc_id="note-1", title="Migraine - Consult", text=NOTE)
    return {lp.aspect: lp for lp in generator.document(doc)}


def test_aspects_come_from_headings(labels):
    assert {"chief complaint", "history of present illness", "family history", "medications", "assessment"} <= set(labels)


def test_negated_mentions_are_not_labels(labels):
    hpi = labels["history of present illness"]
    names = {e.lower() for e in hpi.entities}
    assert "headache" in names
    assert not {"nausea", "vomiting", "fever"} & names, hpi.entities
    reasons = {d["mention"].lower(): d["reason"] for d in hpi.dropped}
    assert reasons.get("nausea") == "negated" and reasons.get("vomiting") == "negated"


def test_family_and_uncertain_mentions_are_not_labels(labels):
    fam = labels["family history"]
    assert all("breast" not in e.lower() for e in fam.entities[1:]), fam.entities
    assert any(d["reason"] == "family" for d in fam.dropped)
    assessment = labels["assessment"]
    assert all("pneumonia" not in e.lower() for e in assessment.entities)


def test_drugs_titles_and_abbreviations(labels):
    meds = {e.lower() for e in labels["medications"].entities}
    assert {"lisinopril", "metformin"} <= meds
    assert labels["medications"].entities[0] == "Migraine"  # title entity first, "- Consult" removed
    assessment = labels["assessment"]
    assert any(e.lower() == "chronic kidney disease" for e in assessment.entities)


def test_passages_without_aspect_are_skipped(generator):
    before = generator.stats.no_aspect
    doc = Document(doc_id="plain", title="Asthma", text="Wheezing and cough were noted in the clinic today.")
    assert list(generator.document(doc)) == []  # entities, but no heading to give an aspect
    assert generator.stats.no_aspect == before + 1


def test_labels_round_trip_and_bad_file(tmp_path, labels):
    path = tmp_path / "labels.jsonl"
    assert write_labels(path, labels.values()) == len(labels)
    back = list(read_labels(path))
    assert [lp.pid for lp in back] == [lp.pid for lp in labels.values()]
    path.write_text('{"pid": "x"}\n')
    with pytest.raises(BadInputError, match="line 1"):
        list(read_labels(path))
    with pytest.raises(BadInputError, match="not found"):
        list(read_labels(tmp_path / "missing.jsonl"))


def test_gazetteer_longest_match():
    g = Gazetteer({"chest pain": ["Chest pain", "phenotype"], "pain": ["Pain", "phenotype"]}, drugs=False)
    found = g.find("Severe chest pain and back pain.")
    assert [(m.text, m.entity) for m in found] == [("chest pain", "Chest pain"), ("pain", "Pain")]


def test_mtsamples_split_is_stable_and_about_three_quarters():
    ids = [f"mtsamples-{i}" for i in range(4000)]
    split = [mtsamples_split(i) for i in ids]
    assert split == [mtsamples_split(i) for i in ids]
    share = split.count("train") / len(split)
    assert 0.72 < share < 0.78


def test_cli_labels_on_demo_corpus(tmp_path, demo_dir, runner):
    out = tmp_path / "demo.jsonl"
    proc = capr_in_process(runner, "labels", str(demo_dir), "--out", str(out), "--json")
    stats = json.loads(proc.stdout)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert stats["written"] == len(rows) > 20
    assert all(r["entities"] and r["aspect"] for r in rows)
    assert stats["dropped_mentions"], "the demo notes contain negated findings"
    bad = capr_cli("labels", str(tmp_path / "nope"), "--out", str(tmp_path / "x.jsonl"), check=False)
    assert bad.returncode == 2 and "error" in bad.stderr and "Traceback" not in bad.stderr


NUMERIC_LABELS_OPTIONS = [
    ("--limit", "-1", "--limit must be at least 1, got -1"),  # was an islice ValueError traceback
    ("--limit", "0", "--limit must be at least 1, got 0"),  # labelled every document
    ("--max-tokens", "-5", "--max-tokens must be 0 or more, got -5"),
    ("--top", "-3", "--top must be 0 or more, got -3")]


@pytest.mark.parametrize("option, value, message", NUMERIC_LABELS_OPTIONS)
def test_numeric_labels_options_out_of_range_are_refused(tmp_path, demo_dir, runner, option, value, message):
    out = tmp_path / "labels.jsonl"
    real = (option, value, message) == NUMERIC_LABELS_OPTIONS[0]  # the real command once, the rest in process
    proc = capr_real_or_in_process(runner, real, "labels", str(demo_dir), "--out", str(out), option, value, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    assert message in proc.stderr and not out.exists()


def test_labels_limit_larger_than_any_corpus_labels_it_all(tmp_path):
    src = write_jsonl(tmp_path / "docs.jsonl", [{"id": "a", "text": "PLAN: metformin for diabetes."}])
    proc = capr_cli("labels", str(src), "--out", str(tmp_path / "l.jsonl"), "--limit", str(2**70), "--json", "--no-ner")
    assert json.loads(proc.stdout)["documents"] == 1


def test_labels_out_that_is_the_corpus_or_a_folder_is_refused(tmp_path, runner, monkeypatch):
    src = write_jsonl(tmp_path / "docs.jsonl", [{"id": "a", "text": "PLAN: metformin for diabetes."}])
    before = src.read_bytes()
    proc = capr_cli("labels", str(src), "--out", str(src), check=False)  # replaced the corpus with its labels
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    assert f"{src}: is the corpus being labelled" in proc.stderr and src.read_bytes() == before

    def loaded(*args, **kwargs):
        raise AssertionError("the labeller (dictionary, ConText) was loaded for a refused --out")

    monkeypatch.setattr("capr.labels.LabelGenerator", loaded)  # refused before seconds of loading
    proc = capr_in_process(runner, "labels", str(src), "--out", str(tmp_path), check=False)  # an IsADirectoryError traceback
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and f"{tmp_path}: is a folder" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]  # no temporary file left


@pytest.mark.data
def test_medquad_training_labels_contain_no_test_document_or_passage(tmp_path):
    """Experiment (B)'s guarantee: labels made with --exclude-medquad-test hold no test document, and no passage
    whose text repeats a test passage (MedQuAD repeats answers across documents)."""
    tar = need_data("medquad", "MedQuAD.tar.gz")
    data = need_data()
    from capr.corpus import read_documents
    from capr.labels.splits import exclude_test_documents, medquad_test_exclusion, text_key

    exclusion = medquad_test_exclusion(data)
    assert len(exclusion.doc_ids) == 1111
    gen = LabelGenerator(LabelConfig(ner=False), exclude_passage=exclusion.is_test_text)
    docs = exclude_test_documents(read_documents(tar), exclusion)
    labels = list(gen(docs))
    assert exclusion.excluded_docs >= 1111
    assert gen.stats.excluded > 0  # repeated answers exist and were caught
    test_texts = exclusion.texts
    for lp in labels:
        assert lp.doc_id not in exclusion.doc_ids
        key = text_key(lp.text)
        assert key not in test_texts and key[:200] not in test_texts
    assert len(labels) > 10_000


def test_labels_written_into_the_corpus_folder_are_passed_over_when_it_is_read_again(tmp_path, runner):
    """`capr labels notes/ --out notes/labels.jsonl` is a natural place for them; a second `capr labels notes/` (or
    `capr index notes/`) read that file as a corpus file, each labelled passage a document (`capr index` then failed
    on a duplicate document id). It is passed over with a note; given as the corpus itself, it is refused."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "n1.txt").write_text(NOTE)
    (notes / "n2.txt").write_text(NOTE.replace("Headache", "Chest pain"))
    labels = notes / "labels.jsonl"
    capr_in_process(runner, "labels", str(notes), "--out", str(labels))
    first = labels.read_text()
    note = f"note: {labels}: labelled passages written by `capr labels`, not documents: passed over"
    proc = capr_in_process(runner, "labels", str(notes), "--out", str(labels), "--json")
    assert json.loads(proc.stdout)["documents"] == 2 and note in proc.stderr.replace("\n", " ")
    assert labels.read_text() == first
    proc = capr_in_process(runner, "index", "--lexical-only", str(notes), "--out", str(tmp_path / "idx"))
    assert "indexed 2 documents" in proc.stderr and note in proc.stderr.replace("\n", " ")
    proc = capr_in_process(runner, "index", "--lexical-only", str(labels), "--out", str(tmp_path / "idx2"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and not (tmp_path / "idx2").exists()
    assert f"{labels}: labelled passages written by `capr labels`, not documents" in proc.stderr
