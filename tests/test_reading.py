"""A health question read as a pharmacist reads it (issue 53): a drug's brand as its generic name, clinical shorthand,
a misspelling one edit from a word of the index; said in the output, and switched off with --no-reading; a question
none of whose words the index has gets a notice instead of unrelated answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import capr_cli, capr_in_process, write_jsonl

ANSWERS = [
    {"doc_id": "diazepam", "title": "", "text": "Diazepam is a benzodiazepine: it calms nerve activity in the brain "
     "and relieves anxiety."},
    {"doc_id": "brain-injury", "title": "", "text": "A brain injury heals slowly; the brain needs rest."},
    {"doc_id": "atrial-fibrillation", "title": "", "text": "Atrial fibrillation is an irregular, often fast heart "
     "rhythm. Blood thinners lower the chance that a clot forms."},
    {"doc_id": "rivastigmine", "title": "", "text": "Rivastigmine treats dementia of the Alzheimer type."},
    {"doc_id": "sleep", "title": "", "text": "Good sleep habits come before any sleeping pill."},
    {"doc_id": "vitamins", "title": "", "text": "Vitamin D keeps bones strong; most people get enough from "
     "sunlight and food."},
]


@pytest.fixture(scope="module")
def answers_index(tmp_path_factory) -> Path:
    src = write_jsonl(tmp_path_factory.mktemp("answers") / "answers.jsonl", ANSWERS)
    out = tmp_path_factory.mktemp("answers-idx") / "idx"
    capr_cli("index", str(src), "-o", str(out))  # the real command: BM25 and MiniLM vectors, the lexicon prepared
    return out


def search(runner, index: Path, question: str, *options: str) -> dict:
    return json.loads(capr_in_process(runner, "search", str(index), question, "--json", "-k", "3", *options).stdout)


def search_read(runner, index: Path, question: str, *options: str) -> dict:
    return search(runner, index, question, "--reading", *options)


@pytest.mark.parametrize("question, read, kind, answer", [
    ("how does valium affect the brain", ("valium", "diazepam"), "drug", "diazepam"),
    ("is afib dangerous", ("afib", "atrial fibrillation"), "abbreviation", "atrial-fibrillation"),
    ("what is rivatigmine for", ("rivatigmine", "rivastigmine"), "spelling", "rivastigmine"),
])
def test_brand_shorthand_and_misspelling_through_capr_search(runner, answers_index, question, read, kind, answer):
    for retriever in ([], ["-r", "bm25"]):
        out = search_read(runner, answers_index, question, *retriever)
        assert out["reading"] == [{"text": read[0], "read_as": read[1], "kind": kind}]
        assert out["results"][0]["doc_id"] == answer, (retriever, out["results"])
    # without reading, BM25 cannot read the question: it finds nothing, or another answer sharing its other words
    plain = search(runner, answers_index, question, "-r", "bm25")  # reading is off by default
    assert plain["reading"] == [] and search(runner, answers_index, question, "-r", "bm25", "--no-reading") == plain
    assert answer not in [h["doc_id"] for h in plain["results"][:1]]


def test_what_was_read_is_said_and_highlighted(runner, answers_index):
    proc = capr_cli("search", str(answers_index), "how does valium affect the brain", "-k", "1", "--reading")
    assert "read 'valium' as diazepam" in proc.stderr
    out = search_read(runner, answers_index, "how does valium affect the brain", "-r", "bm25")
    hit = out["results"][0]
    assert "Diazepam" in [hit["text"][a - hit["start"]:b - hit["start"]] for a, b in hit["highlights"]]


def test_a_question_the_index_has_no_word_of_gets_a_notice(runner, answers_index):
    # another script than the index's: nothing is shown, the notice says why (read or not)
    for options in ([], ["--reading"]):
        out = search(runner, answers_index, "щитовидная железа и сон", *options)
        assert out["results"] == [] and "Cyrillic" in out["notices"][0]
    # the index's script but none of its words: the passages closest in meaning, with the notice
    out = search(runner, answers_index, "xyzzyq plughw")
    assert out["results"] and "none of the question's words" in out["notices"][0]


def test_english_words_and_far_words_are_not_corrected(answers_index):
    from capr.index import load_index
    from capr.search.reading import read_query
    from capr.search.searcher import Searcher

    searcher = Searcher(load_index(answers_index))
    reading = read_query(searcher.store, searcher.parse("is a cocktail bad for sleeping habits")).reading
    assert [w.text for w in reading.words] == []  # "cocktail" is English, though no answer has it
    reading = read_query(searcher.store, searcher.parse("rvstigmine dosing")).reading
    assert reading.words == ()  # two edits from rivastigmine: not guessed


def test_capitalised_shorthand_counts_only_in_capitals(tmp_path):
    from capr.labels.lexicon import build_lexicon, Lexicon

    lexicon = Lexicon(build_lexicon(tmp_path / "lexicon.sqlite"))
    found = {(text[a:b], e.reading) for text in ("SOB after MI", "sob after mi") for a, b, e in lexicon.find(text)}
    assert found == {("SOB", "shortness of breath"), ("MI", "myocardial infarction")}
    readings = {e.name: e.reading for _, _, e in lexicon.find("tylenol or acetominophen for high blood pressure")}
    assert readings == {"tylenol": "acetaminophen", "acetominophen": "acetaminophen", "high blood pressure": "hypertension"}


@pytest.mark.data
def test_the_adapt_gate_checks_question_pairs_on_questions_from_another_source(data_dir):
    from capr.adapt.checks import FREE_TEXT, free_text_check, outside_sets

    assert outside_sets(str(data_dir), (), None) == ("medicationqa-dev",)  # trained on question pairs: checked outside
    assert outside_sets(None, (), str(data_dir)) == ()  # no question pairs: nothing added
    assert outside_sets(str(data_dir), ("nfcorpus-dev",), None) == ()  # the caller named one
    check = free_text_check("medicationqa-dev", data_dir)
    assert check.side == FREE_TEXT and len(check.queries) == 347 and len(check.pool) == 653
    assert all(sum(g > 0 for g in grades) >= 1 for grades in check.relevance)


def test_the_service_says_what_it_read(answers_index):
    from fastapi.testclient import TestClient

    from capr.service import ServiceConfig, create_app

    token = "test-token-0123456789abcdef"
    client = TestClient(create_app(answers_index, ServiceConfig(tokens=(token,))))
    headers = {"Authorization": f"Bearer {token}"}
    body = {"text": "how does valium affect the brain", "k": 2, "retriever": "bm25"}
    read = client.post("/search", json={**body, "reading": True}, headers=headers).json()
    assert read["reading"] == [{"text": "valium", "read_as": "diazepam", "kind": "drug"}]
    assert read["results"][0]["doc_id"] == "diazepam"
    assert client.post("/search", json=body, headers=headers).json()["reading"] == []


@pytest.mark.data
def test_medicationqa_dev_is_a_named_free_text_benchmark(runner, data_dir, tmp_path):
    from capr.eval.runner import EvalConfig

    config = EvalConfig(benchmark="medicationqa-dev", data_dir=data_dir, retriever="bm25")
    assert config.is_beir and config.protocol.value == "full" and config.query_field.value == "question"
    out = json.loads(capr_in_process(runner, "eval", "--benchmark", "medicationqa-dev", "--data-dir", str(data_dir),
                                     "-r", "bm25", "--cache-dir", str(tmp_path), "--json").stdout)
    assert out["queries"] == 347 and 40 < out["metrics"]["nDCG@10"] < 60  # BM25 alone: 49.26 (docs/RESULTS.md)


def test_fusion_probe_keeps_the_default_on_an_index_too_small_to_measure(runner, answers_index):
    """`capr search --fusion-probe` (issue 53): a handful of answers gives too few cloze questions for a measure, and the
    question is fused as without the switch."""
    question = "how is atrial fibrillation treated"
    assert search(runner, answers_index, question, "--fusion-probe")["results"] == \
        search(runner, answers_index, question)["results"]
