"""Question pairs as training data (issue 36): the named sets read from a data folder, the dev sets' questions and
answers left out, each pair asked its own question in training, and both ways a user trains on them (`capr train
bi --question-pairs`, `capr adapt --question-pairs`, gated against the start model)."""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import pytest

from capr.labels.questions import (
    QUESTION_PAIR,
    as_labeled,
    curai_mqp_pairs,
    question_pairs,
    rqe_pairs,
)
from conftest import capr_cli, need_data

TEST_CHQ = "My son has had a fever for three days and a rash on his chest, what could it be?"


def _pair(chq: str, faq: str, value: str) -> str:
    return f'<pair pid="1" type="t" value="{value}"><chq>{chq}</chq><faq>{faq}</faq></pair>'


def tiny_data(root: Path) -> Path:
    """An RQE training file, an RQE test file and Curai's pairs, in the data folder's layout."""
    (root / "rqe").mkdir(parents=True)
    (root / "curai_mqp").mkdir()
    train = [
        _pair("How should I treat polymenorrhea in a 14-year-old girl?", "How should I treat polymenorrhea in a 14-year-old girl?", "true"),
        _pair("I get pounding headaches behind my eyes every afternoon, is it migraine and what helps?",
              "What treats migraine headaches?", "true"),
        _pair("Can I drink alcohol while taking metronidazole for an infection?", "What are the side effects of Florinef?", "false"),
        _pair(TEST_CHQ, "What causes fever with a rash in children?", "true"),
        _pair("My knee swells after running and hurts on the stairs, should I see someone?",
              "What causes knee swelling after exercise?", "true"),
    ]
    with gzip.open(root / "rqe" / "RQE_Train_8588_AMIA2016.xml.gz", "wt") as fh:
        fh.write("<RQE>" + "".join(train) + "</RQE>")
    (root / "rqe" / "RQE_Test_302_pairs_AMIA2016.xml").write_text(
        "<RQE>" + _pair(TEST_CHQ, "What are the symptoms of measles?", "true") + "</RQE>")
    rows = [
        '1,After how many hours from taking an antibiotic can I drink alcohol?,I took my last dose of Azithromycin this morning. Can I have a few drinks tonight?,1',
        '1,After how many hours from taking an antibiotic can I drink alcohol?,I vomited this morning after drinking. Is it my antibiotic?,0',
        '2,"Is a fasting sugar of 130 diabetes, or should I retest?","My fasting blood glucose came back 130, does that mean I have diabetes?",1',
        '3,Why does my ankle still hurt six weeks after a sprain?,Is ankle pain six weeks after spraining it normal?,1',
    ]
    (root / "curai_mqp" / "mqp.csv").write_text("\n".join(rows) + "\n")
    return root


def test_each_set_keeps_its_similar_pairs_and_leaves_the_test_questions_out(tmp_path):
    data = tiny_data(tmp_path / "data")
    rqe = rqe_pairs(data)
    # entailed pairs with two different questions; the pair asking an RQE test question is left out
    assert [p.question for p in rqe] == [
        "I get pounding headaches behind my eyes every afternoon, is it migraine and what helps?",
        "My knee swells after running and hurts on the stairs, should I see someone?"]
    assert rqe[0].answer == "What treats migraine headaches?" and {p.source for p in rqe} == {"rqe"}
    mqp = curai_mqp_pairs(data)
    assert len(mqp) == 3 and mqp[1].question.startswith("Is a fasting sugar of 130 diabetes, or")
    # every set whose file is there (MedQuAD is not)
    assert len(question_pairs(data)) == 5
    records = as_labeled(question_pairs(data))
    assert {r.aspect for r in records} == {QUESTION_PAIR} and all(len(r.questions) == 1 for r in records)

    (data / "curai_mqp" / "mqp.csv").write_text("1,only two columns\n")
    with pytest.raises(Exception, match=r"mqp.csv: line 1"):
        curai_mqp_pairs(data)
    with pytest.raises(Exception, match="unknown question set"):
        question_pairs(data, ["medqa"])


def test_training_asks_each_pair_its_own_question_and_no_other_passage_answers_it(tmp_path):
    from capr.labels.generate import LabeledPassage
    from capr.train import TrainArgs
    from capr.train.data import TrainingSet

    pairs = as_labeled(question_pairs(tiny_data(tmp_path / "data")))
    labels = [LabeledPassage(f"p{i}", f"d{i}", f"Migraine is treated with rest and triptans, case {i}.", "treatment",
                             ["migraine"], title="Migraine") for i in range(4)]
    data = TrainingSet(labels + pairs, TrainArgs(batch_size=9, dev_fraction=0.0, hard_negatives=1))
    batch = next(iter(data.batches(random.Random(0), with_selection_query=False)))
    for i, q in enumerate(batch.queries):
        lp = data.train[q.passage]
        if lp.aspect == QUESTION_PAIR:
            assert q.text == lp.questions[0] and batch.hard_columns[i] == []
            assert batch.positives[i].tolist() == [k == i for k in range(len(batch.passages))]
        else:  # a label query: every passage of the same (entity, aspect) answers it, no pair does
            assert all(batch.positives[i, k] == (data.train[j].aspect == "treatment")
                       for k, j in enumerate(batch.passage_ids))

    data.dev = pairs  # held out: early stopping asks each pair its question among the others' answers
    dev = data.dev_set(8, n_candidates=4, seed=0)
    assert dev.queries and all(q in {p.questions[0] for p in pairs} for q in dev.queries)
    assert all(sum(r) == 1 for r in dev.relevant)


def test_medquad_pairs_leave_out_what_the_dev_sets_are_built_from():
    data = need_data("medquad", "MedQuAD.tar.gz")
    need_data("medquad_cdv_test")
    from capr.labels.questions import medquad_pairs
    from capr.labels.splits import medquad_dev_documents, text_key

    data = data.parent.parent
    pairs = medquad_pairs(data)
    assert len(pairs) > 5000 and all(p.question and p.answer for p in pairs)
    trained = {text_key(p.answer) for p in pairs}
    dev_docs = medquad_dev_documents(data)
    assert not {f"medquad:{d.doc_id}" for d in dev_docs} & {p.group for p in pairs}
    assert not trained & {text_key(d.text[s.start:s.end]) for d in dev_docs for s in d.sections}
    # no document about an entity a consumer dev question asks for (its gold answers among them)
    from capr.labels.gazetteer import normalize_name
    from capr.labels.questions import consumer_questions, faq_targets, target_names

    asked = {normalize_name(n) for _, faq in consumer_questions(data) for e, _ in faq_targets(faq) for n in target_names(e)}
    assert asked and not {normalize_name(p.title) for p in pairs} & asked


def test_a_user_trains_on_question_pairs_alone_or_inside_the_gated_adapt(tmp_path, demo_dir):
    data = tiny_data(tmp_path / "data")
    model = tmp_path / "qa-model"
    capr_cli("train", "bi", "--question-pairs", str(data), "-o", str(model), "--max-steps", "2", "--batch-size", "4",
             "--json")
    card = json.loads((model / "capr.json").read_text())
    assert card["args"]["question_pairs"] == str(data) and card["train_passages"] + card["dev_passages"] == 5
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in sorted(demo_dir.glob("*.txt"))[:12]:
        shutil.copy(f, corpus / f.name)
    capr_cli("index", str(corpus), "-o", str(tmp_path / "qa-idx"), "--model", str(model))
    hits = json.loads(capr_cli("search", str(tmp_path / "qa-idx"), "gout attack in the big toe", "--json").stdout)
    assert hits

    # inside capr adapt: trained beside the corpus' labels, and the gate still compares with the start model
    from capr.adapt import AdaptConfig, adapt

    out = tmp_path / "idx"
    bad = capr_cli("adapt", str(corpus), "-o", str(out), "--question-pairs", str(tmp_path / "nowhere"), check=False)
    assert bad.returncode != 0 and "nowhere: no such file or folder" in bad.stderr and "Traceback" not in bad.stderr
    report = adapt(AdaptConfig(corpora=[str(corpus)], out=str(out), question_pairs=str(data), time_budget_min=3,
                               max_steps=2, batch_size=8, min_labels=16, alphas=(1.0,), second_stage="off"),
                   log=lambda m: None, progress=False).to_dict()
    assert report["training"]["args"]["question_pairs"] == str(data) and report["training"]["args"]["group_batches"]
    trained = json.loads((tmp_path / "idx.adapt" / "trained" / "capr.json").read_text())
    assert trained["train_passages"] + trained["dev_passages"] == report["labeled_passages"] + 5
    assert all(c["queries"] for c in report["checks"])  # the gate's checks: the corpus' held-out labels only
    start = report["candidates"]["start"]
    if report["kept"] != "start":
        for c in report["checks"]:
            if c["side"] == "free-text":  # never worse on free text than the start model (1-point margin)
                assert report["candidates"][report["kept"]][c["name"]][c["primary"]] >= start[c["name"]][c["primary"]] - 1.01
    else:
        assert "start model is kept" in report["reason"] or "start model" in report["reason"]
