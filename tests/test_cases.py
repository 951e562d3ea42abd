"""Similar-case retrieval (issue 5): mention variants, the pipeline on a planted corpus with the real MiniLM
encoder and a really trained tiny cross-encoder, bad input, benchmark loaders on the real files."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from capr.cases import CaseConfig, CasePipeline, CaseScorer
from capr.cases.bench import QuestionOutcome, average_precision, evaluate_cases
from capr.cases.data import MCQuestion
from capr.cases.mentions import hypothesis_variants, mention_regex
from capr.errors import QueryError
from capr.models.encoder import EncoderConfig
from capr.records import Document

from conftest import capr_cli, need_data

DESCRIPTION = ("A 19-year-old college student has high fever, a severe headache, a stiff neck and pain when looking "
               "at bright light since this morning; there are purple non-blanching spots on both legs.")

# "meningitis" is mentioned once, in a case like the description; "migraine" is mentioned often, in passages
# about headache. The similar case is the only support the right hypothesis has.
PLANTED = [
    Document("case_men", "ED note", "An 18-year-old student arrived with high fever, intense headache, neck stiffness "
             "and photophobia; a purpuric rash covered the legs. Lumbar puncture confirmed bacterial meningitis and "
             "ceftriaxone was started."),
    Document("mig_1", "Migraine", "Migraine is a headache disorder with throbbing pain on one side of the head. "
             "A migraine attack may come with nausea. Triptans abort a migraine."),
    Document("mig_2", "Migraine triggers", "Triggers of migraine include stress, missed meals, red wine and poor "
             "sleep; keeping a headache diary helps people with migraine."),
    Document("mig_3", "Migraine in students", "Students with migraine often report a severe headache during exams; "
             "a migraine can last from four hours to three days."),
    Document("asthma_1", "Asthma", "Asthma causes wheeze, cough and chest tightness, worse at night and with exercise. "
             "Inhaled corticosteroids control asthma."),
    Document("gout_1", "Gout case", "A 55-year-old man woke with a hot, swollen, exquisitely painful big toe after a "
             "night of beer and steak; joint aspiration showed urate crystals, consistent with gout."),
    Document("appy_1", "Appendicitis case", "A 12-year-old boy had periumbilical pain that moved to the right lower "
             "quadrant with fever and vomiting; ultrasound showed a dilated appendix: acute appendicitis."),
    Document("dvt_1", "DVT case", "After a long flight a 40-year-old woman developed a swollen, tender left calf; "
             "ultrasound showed deep vein thrombosis and anticoagulation was started."),
]

# Tiny distant supervision for the cross-encoder: descriptions paired with the planted case they paraphrase
# (label 1) and with the other cases (label 0). Meningitis is not among them.
TRAIN_DESCRIPTIONS = {
    "gout_1": "middle-aged man with sudden painful red swollen great toe overnight after drinking alcohol",
    "appy_1": "child with belly pain moving to the right lower abdomen, fever and vomiting",
    "dvt_1": "woman with a painful swollen calf after a long-haul flight",
    "asthma_1": "young person with wheezing, night cough and tight chest when exercising",
}


@pytest.fixture(scope="module")
def planted_index(tmp_path_factory):
    import capr

    root = tmp_path_factory.mktemp("cases") / "idx"
    return capr.build_index(PLANTED, root, dense=EncoderConfig(model="minilm", max_length=128))


@pytest.fixture(scope="module")
def tiny_cross(tmp_path_factory):
    from capr.cases.train import PairArgs, train_pairs

    texts = {d.doc_id: d.text for d in PLANTED}
    pairs = []
    for doc_id, desc in TRAIN_DESCRIPTIONS.items():
        for other, text in texts.items():
            if other in TRAIN_DESCRIPTIONS or other.startswith("mig"):
                pairs.append((desc, text, float(other == doc_id)))
    out = tmp_path_factory.mktemp("cases") / "ce"
    rep = train_pairs(pairs, out, PairArgs(max_steps=30, batch_size=8, lr=1e-4, max_length=96), progress=False)
    return out, rep


def test_variants_cover_abbreviations_parentheses_and_number():
    v = hypothesis_variants("Chronic kidney disease (CKD).")
    assert v[0] == "chronic kidney disease (ckd)" and "chronic kidney disease" in v and "ckd" in v
    assert "myocardial infarction" in hypothesis_variants("MI")
    assert "kidney stones" in hypothesis_variants("Kidney stone") and "kidney stone" in hypothesis_variants("kidney stones")
    pat = mention_regex(hypothesis_variants("non-Hodgkin lymphoma"))
    assert pat.search("a case of Non Hodgkin\nlymphoma") and not pat.search("hodgkin lymphoma alone")


def test_pipeline_picks_the_hypothesis_supported_by_a_similar_case(planted_index, tiny_cross):
    ce_dir, rep = tiny_cross
    assert np.mean(rep.losses[-5:]) < np.mean(rep.losses[:5])  # the cross-encoder really learned something
    card = json.loads((ce_dir / "capr.json").read_text())
    assert card["kind"] == "cross" and card["steps"] == 30 and card["loss"] == "binary cross-entropy"
    for cfg in (CaseConfig(scorer=CaseScorer.dense), CaseConfig(scorer=CaseScorer.cross, cross_model=str(ce_dir))):
        res = CasePipeline(planted_index, cfg).rank(DESCRIPTION, ["Migraine", "Meningitis", "Kawasaki disease"])
        top = res.answer
        assert top.hypothesis == "Meningitis", (cfg.scorer, [(h.hypothesis, h.score) for h in res.hypotheses])
        assert top.found and top.passage.doc_id == "case_men" and top.candidates == 1
        mig = next(h for h in res.hypotheses if h.hypothesis == "Migraine")
        assert mig.found and mig.candidates == 3 and mig.passage.doc_id.startswith("mig")
        kaw = next(h for h in res.hypotheses if h.hypothesis == "Kawasaki disease")
        assert not kaw.found and kaw.passage is None and kaw.support_text == "Kawasaki disease"  # C_H = H
        assert [h.rank for h in res.hypotheses] == [1, 2, 3]


def test_words_match_finds_options_not_written_verbatim(planted_index):
    # "meningitis, bacterial" (exam-style inversion) never occurs as a phrase; all its words do, in the case note
    opts = ["meningitis, bacterial", "migraine"]
    phrase = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.bm25)).rank(DESCRIPTION, opts)
    words = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.bm25, match="words")).rank(DESCRIPTION, opts)
    by = lambda res: {h.hypothesis: h for h in res.hypotheses}  # noqa: E731
    assert not by(phrase)["meningitis, bacterial"].found
    hit = by(words)["meningitis, bacterial"]
    assert hit.found and hit.passage.doc_id == "case_men" and words.answer.hypothesis == "meningitis, bacterial"
    with pytest.raises(QueryError, match="unknown mention match"):
        CaseConfig(scorer=CaseScorer.bm25, match="fuzzy")


def test_fallback_related_scores_unmentioned_options_on_passages_and_says_so(planted_index):
    # neither option is written anywhere; "meningitis, bacterial" has all its words in the case note, "purulent
    # meningitis" only one of them
    opts = ["meningitis, bacterial", "purulent meningitis", "xylophone"]
    plain = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.bm25)).rank(DESCRIPTION, opts)
    assert all(h.passage is None and h.notice.endswith("its own text") for h in plain.hypotheses)
    res = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.bm25, fallback="related")).rank(DESCRIPTION, opts)
    by = {h.hypothesis: h for h in res.hypotheses}
    assert not any(h.found for h in res.hypotheses)  # coverage still counts mentions only
    words, related, none = by["meningitis, bacterial"], by["purulent meningitis"], by["xylophone"]
    assert words.fallback == "words" and words.passage.doc_id == "case_men" and "all its words" in words.notice
    assert related.fallback == "related" and related.passage.doc_id == "case_men" and related.score > 0
    assert none.fallback is None and none.passage is None and none.score == 0.0
    assert words.to_dict()["notice"] and res.answer.hypothesis in ("meningitis, bacterial", "purulent meningitis")
    with pytest.raises(QueryError, match="unknown fallback"):
        CaseConfig(scorer=CaseScorer.bm25, fallback="guess")


def test_a_passage_that_only_denies_a_hypothesis_is_no_case_for_it(tmp_path_factory):
    """The case most like the description rules meningitis out and denies endocarditis: it supports neither. The
    less similar passage that affirms meningitis is its support; endocarditis, only denied, is said to be so, and
    the fallback does not score it on the denial either."""
    from conftest import index_of_documents

    index = index_of_documents(tmp_path_factory, "denied", [
        {"doc_id": "denies", "title": "ED note", "text": "A 19-year-old student with high fever, a severe headache, a "
         "stiff neck and photophobia; purple spots on both legs. Meningitis was ruled out. No evidence of "
         "endocarditis."},
        {"doc_id": "affirms", "title": "Meningitis", "text": "Bacterial meningitis: fever and headache in a student."},
        {"doc_id": "asthma", "title": "Asthma", "text": "Asthma causes wheeze and cough."},
    ])
    res = CasePipeline(index, CaseConfig(scorer=CaseScorer.bm25, fallback="related")).rank(
        DESCRIPTION, ["meningitis", "endocarditis", "asthma"])
    by = {h.hypothesis: h for h in res.hypotheses}
    assert by["meningitis"].found and by["meningitis"].passage.doc_id == "affirms"
    assert [s.passage.doc_id for s in by["meningitis"].supports] == ["affirms"]
    endo = by["endocarditis"]
    assert not endo.found and endo.denied == 1 and endo.passage is None and endo.score == 0.0
    assert endo.notice == "1 passage mentions it, only to deny it: scored on its own text"
    assert res.answer.hypothesis == "meningitis"


def test_excluded_documents_never_support(planted_index):
    pipe = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.bm25))
    res = pipe.rank(DESCRIPTION, ["meningitis"], exclude_docs=["case_men"])
    assert not res.answer.found and res.answer.score == 0.0
    assert pipe.rank(DESCRIPTION, ["meningitis"]).answer.found


def test_bad_input_gives_clear_errors(planted_index, tmp_path):
    pipe = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.bm25))
    with pytest.raises(QueryError, match="empty patient description"):
        pipe.rank("   ", ["asthma"])
    with pytest.raises(QueryError, match="no hypotheses"):
        pipe.rank(DESCRIPTION, [])
    with pytest.raises(QueryError, match="hypothesis 2 is empty"):
        pipe.rank(DESCRIPTION, ["asthma", " "])
    with pytest.raises(QueryError, match="cross-encoder model folder"):
        CaseConfig(scorer=CaseScorer.cross)
    with pytest.raises(QueryError, match="dense_k"):
        CaseConfig(scorer=CaseScorer.bm25, dense_k=0)
    proc = capr_cli("cases", "--index", str(planted_index.root), "--description", "", "--options", "asthma", check=False)
    assert proc.returncode == 2 and "empty patient description" in proc.stderr
    proc = capr_cli("cases", "--index", str(planted_index.root), "--description", DESCRIPTION, check=False)
    assert proc.returncode == 2 and "--options" in proc.stderr
    proc = capr_cli("cases", "--index", str(planted_index.root), "--description", DESCRIPTION, "--options", "x",
                    "--scorer", "psychic", check=False)
    assert proc.returncode == 2 and "unknown scorer" in proc.stderr


def test_a_description_without_a_searchable_word_is_refused_not_ranked(planted_index, tmp_path):
    # BM25 scores every passage 0 for it: the "answer" would be the first option, on an arbitrary passage
    pipe = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.bm25))
    with pytest.raises(QueryError, match="no searchable words") as e:
        pipe.rank("Is it this or that?", ["migraine", "meningitis"])
    assert e.value.field == "description"
    proc = capr_cli("cases", "--index", str(planted_index.root), "-d", "the of and", "--options", "migraine",
                    "meningitis", "--scorer", "bm25", check=False)
    assert proc.returncode == 2 and "no searchable words" in proc.stderr and "Traceback" not in proc.stderr
    # in an evaluation it ties its options (chance credit) and is counted, without ending the run
    metrics, outcomes = evaluate_cases(pipe, [MCQuestion("q9", "Is it?", ["migraine", "meningitis"], 1, "t")])
    assert metrics["unreadable"] == 1 and outcomes[0].credit == 0.5
    # the dense scorer embeds the whole text, as a dense search does: still answered
    assert CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.dense)).rank("the of and", ["migraine"]).answer


def test_cli_ranks_and_explains(planted_index, tmp_path):
    desc = tmp_path / "case.txt"
    desc.write_text(DESCRIPTION)
    proc = capr_cli("cases", "--index", str(planted_index.root), "--description", str(desc), "--options", "migraine",
                    "meningitis", "--scorer", "bm25", "--json", "--explain")
    data = json.loads(proc.stdout)
    assert data["scorer"] == "bm25" and len(data["hypotheses"]) == 2
    men = next(h for h in data["hypotheses"] if h["hypothesis"] == "meningitis")
    assert men["support"]["doc_id"] == "case_men" and men["variants"][0] == "meningitis" and men["supports"]


def test_average_precision_and_tie_credit():
    assert average_precision([3, 2, 1], [True, False, False]) == 1.0
    assert average_precision([3, 2, 1], [False, True, False]) == 0.5
    assert average_precision([1, 1], [True, False]) == 0.5  # ties ranked against the scorer
    assert QuestionOutcome("q", [1.0, 1.0, 0.0, 0.0], 0, [True] * 4).credit == 0.5
    assert QuestionOutcome("q", [0.0, 2.0], 0, [True] * 2).credit == 0.0


def test_evaluate_cases_on_planted_questions(planted_index):
    qs = [MCQuestion("q1", DESCRIPTION, ["migraine", "meningitis"], 1, "t"),
          MCQuestion("q2", "sudden hot swollen big toe after beer", ["gout", "asthma"], 0, "t")]
    metrics, outcomes = evaluate_cases(CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.dense)), qs)
    assert metrics["questions"] == 2 and metrics["coverage"] == 100.0 and metrics["chance"] == 50.0
    assert metrics["accuracy"] == 100.0 and metrics["AP"] == 100.0, outcomes
    assert outcomes[0].supports[1].startswith("case_men")  # meningitis' supporting case is the planted one


def test_outcome_files_feed_the_paired_comparison(planted_index, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from capr.cases.bench import write_outcomes

    qs = [MCQuestion("q1", DESCRIPTION, ["migraine", "meningitis"], 1, "t"),
          MCQuestion("q2", "sudden hot swollen big toe after beer", ["gout", "asthma"], 0, "t")]
    runs = {}
    for sc in (CaseScorer.bm25, CaseScorer.dense):
        _, outcomes = evaluate_cases(CasePipeline(planted_index, CaseConfig(scorer=sc)), qs)
        runs[sc.value] = tmp_path / f"{sc.value}.jsonl"
        write_outcomes(runs[sc.value], outcomes)
    rows = [json.loads(line) for line in runs["dense"].read_text().splitlines()]
    assert [r["qid"] for r in rows] == ["q1", "q2"] and rows[0]["answer"] == 1 and len(rows[0]["scores"]) == 2
    from capr.cases.bench import read_outcomes, summarize

    back = summarize(read_outcomes(runs["dense"]))
    assert back["accuracy"] == 100.0 and back["all_found_questions"] == 2 and back["all_found_accuracy"] == 100.0
    unfound = QuestionOutcome("q3", [0.0, 1.0], 0, [False, True])
    m = summarize(read_outcomes(runs["dense"]) + [unfound])
    assert m["all_found_questions"] == 2 and m["all_found_accuracy"] == 100.0 and round(m["accuracy"], 2) == 66.67
    proc = subprocess.run([sys.executable, "-m", "experiments.cases_paired", str(runs["bm25"]), str(runs["dense"])],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    assert "2 questions" in proc.stdout and "-> 100.00" in proc.stdout and "randomization p=" in proc.stdout


# --------------------------------------------------------------------------- real data
def test_benchmark_loaders_parse_real_files():
    from capr.cases.bench import benchmark_questions
    from capr.cases.data import load_questions, read_similarity_pairs

    data = need_data("medqa_usmle").parent
    train, held = load_questions(data, "medqa-train"), load_questions(data, "medqa-heldout")
    assert len(train) + len(held) == 1272 and len(held) == 506  # the fixed held-out part, never trained on
    assert not {q.description for q in train} & {q.description for q in held}
    assert all(len(q.options) == 4 and 0 <= q.answer < 4 for q in held)
    sub = benchmark_questions(data, "medqa-dev", limit=50, seed=0)
    assert len(sub) == 50 and [q.qid for q in sub] == [q.qid for q in benchmark_questions(data, "medqa-dev", 50, 0)]
    need_data("headqa_en")
    test = load_questions(data, "headqa-test")
    assert len(test) == 2675 and all(q.options[q.answer] for q in test)  # 2,742 minus questions needing an image
    need_data("medmcqa_dev")
    mm = load_questions(data, "medmcqa-dev")
    assert len(mm) == 4183 and all(q.exclude_docs[0].startswith("medmcqa-exp:") for q in mm)
    mm_train, mm_held = load_questions(data, "medmcqa-train"), load_questions(data, "medmcqa-heldout")
    assert len(mm_train) + len(mm_held) == 4183 and 700 < len(mm_held) < 950
    assert not {q.qid for q in mm_train} & {q.qid for q in mm_held}
    assert [q.qid for q in benchmark_questions(data, "medmcqa-dev")] == [q.qid for q in mm_held]
    need_data("rqe")
    pairs = read_similarity_pairs(data)
    rqe_only = 8588
    assert len(pairs) >= rqe_only and {p[2] for p in pairs} == {0.0, 1.0}
    if (data / "mediqa2019" / "Task3_QA").exists():  # + MEDIQA Task 3 training set 2 judgements, never its validation set
        assert len(pairs) > rqe_only and any("treatments" in p[0].lower() for p in pairs[rqe_only:])


def test_one_mediqa_reader_serves_the_benchmark_and_the_pretraining_pairs():
    from capr.cases.data import read_similarity_pairs
    from capr.corpus.mediqa import read_task3, task3_path

    data = need_data("mediqa2019").parent
    val = list(read_task3(task3_path(data, "mediqa2019")))
    assert len({a.qid for a in val}) == 25 and all(a.text and a.aid for a in val)
    assert {a.relevant for a in val} == {True, False}
    assert all(a.relevant == (a.reference_score >= 3) for a in val)
    train = list(read_task3(task3_path(data, "mediqa2019-train")))
    assert len({a.qid for a in train}) == 104
    need_data("rqe")
    pairs = read_similarity_pairs(data)
    assert pairs[-len(train):] == [(" ".join(a.question.split()), a.text, float(a.relevant)) for a in train]
    val_questions = {" ".join(a.question.split()) for a in val}
    assert not any(p[0] in val_questions for p in pairs)  # the validation set is an evaluation set, never training data


def test_distant_supervision_refuses_evaluation_questions(tmp_path):
    from capr.cases.train import DistantArgs, distant_pairs
    from capr.errors import CaprError

    for bad in ("medqa-heldout", "headqa-test", "medmcqa-heldout", "medmcqa-dev"):
        with pytest.raises(CaprError, match="held-out or test"):
            distant_pairs(tmp_path / "no-index", tmp_path / "no-model", tmp_path, DistantArgs(sources=(bad,)))


def test_case_corpus_excludes_medquad_test_documents():
    from capr.cases.data import case_corpus
    from capr.labels.splits import medquad_test_exclusion

    data = need_data("medquad").parent
    need_data("medquad_cdv_test")
    excl = medquad_test_exclusion(data)
    n = 0
    for doc in case_corpus(data, include=("medquad",)):
        assert not excl.is_test(doc)
        n += 1
    from capr.corpus import Format, read_documents

    raw = sum(1 for _ in read_documents(data / "medquad" / "MedQuAD.tar.gz", Format.medquad))
    assert 1000 < n < raw  # test documents were there to drop, and were dropped


def test_a_hypothesis_given_twice_but_for_case_is_refused_alike_by_cli_api_and_service(planted_index):
    """`capr cases --options Asthma asthma` ranked both, tied on the same supports (ranks 1 and 2). Which spelling to
    keep is the user's to say: the CLI, CasePipeline.rank, rank_hypotheses and POST /cases refuse it in one line naming
    both; a benchmark question listing one option twice (MedMCQA, HEAD-QA do) is still scored as before."""
    from fastapi.testclient import TestClient

    from capr.cases.baseline import rank_hypotheses
    from capr.service.app import create_app
    from capr.service.config import ServiceConfig

    said = "hypotheses 1 and 3 ('Meningitis', ' meningitis') are the same hypothesis (they differ only in case or spacing)"
    options = ["Meningitis", "migraine", " meningitis"]
    proc = capr_cli("cases", "--index", str(planted_index.root), "--description", DESCRIPTION, "--options", *options,
                    "--scorer", "bm25", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1
    assert said in proc.stderr and not proc.stdout.strip()
    pipe = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.bm25))
    with pytest.raises(QueryError, match=re.escape(said)):
        pipe.rank(DESCRIPTION, options)
    with pytest.raises(QueryError, match=re.escape(said)):
        rank_hypotheses(planted_index, DESCRIPTION, options)
    with TestClient(create_app(planted_index.root, ServiceConfig(watch_index=False))) as c:
        r = c.post("/cases", json={"description": DESCRIPTION, "hypotheses": options})
        assert r.status_code == 400 and said in r.text and "hypotheses" in r.text, r.text
        assert c.post("/cases", json={"description": DESCRIPTION, "hypotheses": options[:2]}).status_code == 200
    metrics, [outcome] = evaluate_cases(pipe, [MCQuestion("q", DESCRIPTION, options, 0, "mcqa")])
    assert metrics["questions"] == 1 and not metrics.get("unreadable") and outcome.scores[0] == outcome.scores[2] > 0


def test_service_cases_runs_the_pipeline_when_a_model_is_configured(planted_index, tiny_cross):
    from fastapi.testclient import TestClient

    from capr.service.app import create_app
    from capr.service.config import ServiceConfig

    ce_dir, _ = tiny_cross
    with TestClient(create_app(planted_index.root, ServiceConfig(cases_model=str(ce_dir), watch_index=False))) as c:
        r = c.post("/cases", json={"description": DESCRIPTION, "hypotheses": ["migraine", "meningitis"], "k": 1})
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["method"] == "similar-case-cross-encoder"
        top = data["hypotheses"][0]
        assert top["hypothesis"] == "meningitis" and top["passages"][0]["doc_id"] == "case_men" and top["notice"] is None
        assert c.post("/cases", json={"description": " ", "hypotheses": ["x"]}).status_code == 422
        # an option no passage mentions: scored on the passages closest to its words, as `capr cases` does, and said
        r = c.post("/cases", json={"description": DESCRIPTION, "hypotheses": ["meningitis", "Kawasaki disease"]}).json()
        kaw = next(h for h in r["hypotheses"] if h["hypothesis"] == "Kawasaki disease")
        assert "no passage mentions it" in kaw["notice"]


def test_one_set_of_case_defaults_for_cli_eval_and_service(planted_index, tmp_path):
    """`capr cases`, `capr eval` on a multiple-choice benchmark and the service start from capr.cases.config.case_config:
    without flags `capr eval` scores exactly what `capr cases` answers (dense on an index with vectors, related
    fallback), and the paper's settings stay one flag away."""
    from capr.cases.config import Fallback, case_config

    cfg = case_config(True)
    assert (cfg.scorer, cfg.fallback) == (CaseScorer.dense, Fallback.related)
    assert case_config(False).scorer is CaseScorer.bm25 and case_config(True, "ce").scorer is CaseScorer.cross
    assert case_config(True, fallback="text", dense_k=None).fallback is Fallback.text and case_config(True).dense_k == 50
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"question": DESCRIPTION, "options": {"A": "migraine", "B": "Kawasaki disease",
                                                                      "C": "meningitis"}, "answer_idx": "C"}) + "\n")
    ev = json.loads(capr_cli("eval", "--benchmark", f"mcqa:{qfile}", "--index", str(planted_index.root), "--json").stdout)
    assert ev["scorer"] == "dense" and ev["config"]["fallback"] == "related"
    cli = json.loads(capr_cli("cases", "--index", str(planted_index.root), "-d", DESCRIPTION, "--options", "migraine",
                              "Kawasaki disease", "meningitis", "--json").stdout)
    assert cli["scorer"] == "dense" and cli["answer"] == "meningitis" and ev["metrics"]["accuracy"] == 100.0
    paper = json.loads(capr_cli("eval", "--benchmark", f"mcqa:{qfile}", "--index", str(planted_index.root), "-r", "bm25",
                                "--fallback", "text", "--json").stdout)
    assert paper["scorer"] == "bm25" and paper["config"]["fallback"] == "text"


def test_saved_candidates_score_exactly_as_the_pipeline(planted_index, tiny_cross, tmp_path):
    """Steps 1-2 saved where the index is, step 3 run from the file alone (capr.cases.candidates): same scores,
    same supporting cases and the same S+/S- as the index path; a damaged file is refused naming its line."""
    from capr.cases.candidates import distant_pairs_from_candidates, export_candidates, read_candidates, score_candidates
    from capr.errors import BadInputError
    from capr.search.second_stage import CrossReranker

    ce_dir, _ = tiny_cross
    qs = [MCQuestion("q1", DESCRIPTION, ["migraine", "meningitis", "Kawasaki disease"], 1, "t"),
          MCQuestion("q2", "sudden hot swollen big toe after beer", ["gout", "asthma", "migraine"], 0, "t",
                     exclude_docs=("mig_1",))]
    cfg = CaseConfig(scorer=CaseScorer.cross, cross_model=str(ce_dir), dense_k=2, cross_k=2)
    pipe = CasePipeline(planted_index, cfg)
    _, direct = evaluate_cases(pipe, qs)
    path = tmp_path / "c.jsonl.gz"
    stats = export_candidates(CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.dense, dense_k=2, cross_k=2)),
                              qs, path)
    assert stats["questions"] == 2 and stats["options"] == 6 and stats["options_found"] == 5
    cands = read_candidates(path)
    assert all(len(h.rows) <= 2 for q in cands.questions for h in q.hypotheses)
    assert not any(cands.pids[r].startswith("mig_1") for r in cands.questions[1].hypotheses[2].rows)  # its own doc
    saved = score_candidates(cands, CrossReranker(ce_dir).score)
    for a, b in zip(direct, saved):
        assert (a.qid, a.found, a.supports) == (b.qid, b.found, b.supports)
        assert np.allclose(a.scores, b.scores, atol=1e-5), (a.scores, b.scores)
    pairs, st = distant_pairs_from_candidates(cands, CrossReranker(ce_dir).score, k=1)
    assert len(pairs) == 6 and st["options_found"] == 5 and sum(p[2] for p in pairs) == 2.0
    # the pair of q1's right option is its best-scored support, the planted case; Kawasaki is paired with its text
    assert (DESCRIPTION, PLANTED[0].text, 1.0) in pairs and (DESCRIPTION, "Kawasaki disease", 0.0) in pairs
    lines = path.read_bytes()
    import gzip

    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(gzip.decompress(lines).decode().splitlines()[:1] + ['{"qid": "x"}']) + "\n")
    with pytest.raises(BadInputError, match=r"bad\.jsonl:2"):
        read_candidates(bad)


def test_saved_candidates_give_the_dense_scorer_what_the_index_encoded(planted_index, tmp_path):
    """A saved passage carries the text the index's encoder read (its title in front, in an index of titles), so the
    dense scorer re-run from the file alone gives the pipeline's scores; from the bare texts it would not."""
    from capr.cases.candidates import export_candidates, read_candidates

    assert planted_index.includes_titles()
    qs = [MCQuestion("q1", DESCRIPTION, ["migraine", "meningitis", "Kawasaki disease"], 1, "t")]
    pipe = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.dense, dense_k=3, cross_k=3))
    _, direct = evaluate_cases(pipe, qs)
    path = tmp_path / "c.jsonl"
    export_candidates(pipe, qs, path)
    cands = read_candidates(path)
    assert cands.encoded and all(cands.encoded[r] == f"{planted_index.passage(r).title}\n{cands.texts[r]}"
                                 for r in cands.encoded)
    enc = planted_index.encoder()
    qvec = enc.encode_queries([DESCRIPTION])[0]
    q = cands.questions[0]

    def best(groups):
        return [float(np.max(enc.encode_passages(g) @ qvec)) for g in groups]

    assert np.allclose(best(cands.encoder_groups(q)), direct[0].scores, atol=1e-5)
    assert not np.allclose(best(cands.groups(q)), direct[0].scores, atol=1e-3)


def test_train_cases_from_saved_candidates_needs_no_index(planted_index, tiny_cross, tmp_path):
    """`capr train cases --stage candidates` saves steps 1-2 for the S+/S- questions; `--stage distant --candidates`
    trains from that file alone (where a GPU is and the index is not), and its S+/S- equal the index route's."""
    from capr.cases.candidates import read_candidates
    from capr.cases.train import DistantArgs, distant_pairs

    data = need_data("medqa_usmle")
    ce_dir, _ = tiny_cross
    cand = tmp_path / "cand.jsonl.gz"
    common = ["--data-dir", str(data.parent), "--questions", "4", "--dense-k", "2"]
    proc = capr_cli("train", "cases", "--stage", "candidates", "--index", str(planted_index.root), "--out", str(cand),
                    *common, "--json")
    counts = json.loads(proc.stdout)
    assert counts["questions"] == 4 and counts["options"] >= 16 and "\r" not in proc.stderr  # no bar frames in a pipe
    saved = read_candidates(cand)
    assert saved.header["sources"] == list(DistantArgs().sources)
    args = DistantArgs(k=1, dense_k=2, max_questions=4)
    from_index, _ = distant_pairs(planted_index.root, ce_dir, data.parent, args, progress=False)
    from_file, stats = distant_pairs(None, ce_dir, None, args, progress=False, candidates=saved)
    assert from_index == from_file and stats["questions"] == 4
    out = tmp_path / "ce"
    proc = capr_cli("train", "cases", "--stage", "distant", "--pretrained", str(ce_dir), "--candidates", str(cand),
                    "--out", str(out), "--max-steps", "2", "--max-length", "64", *common, "--json")
    summary = json.loads(proc.stdout)["distant"]
    assert summary["steps"] == 2 and summary["pairs"] == len(from_file)
    assert json.loads((out / "capr.json").read_text())["kind"] == "cross"
    bad = capr_cli("train", "cases", "--stage", "distant", "--pretrained", str(ce_dir), "--out", str(tmp_path / "x"),
                   "--data-dir", str(data.parent), check=False)
    assert bad.returncode != 0 and "--candidates" in bad.stderr and "Traceback" not in bad.stderr


def test_a_passage_supporting_two_hypotheses_scores_them_alike(planted_index, monkeypatch):
    """Each passage's cosine is computed once per question, so two hypotheses whose best support is the same passage
    tie exactly (the tie rule then splits the credit) instead of being told apart by the rounding of different row
    sets (seen on HEAD-QA dev: 0.33185521 against 0.33185524 for one passage)."""
    from capr.cases.bench import QuestionOutcome

    scored: list[int] = []
    real = planted_index.dense_scores

    def spy(qvec, rows):
        scored.extend(int(r) for r in rows)
        return real(qvec, rows)

    monkeypatch.setattr(planted_index, "dense_scores", spy)
    res = CasePipeline(planted_index, CaseConfig(scorer=CaseScorer.dense)).rank(
        "woke at night with a hot swollen big toe after beer", ["night", "urate crystals", "asthma"])
    by = {h.hypothesis: h for h in res.hypotheses}
    assert {p.passage.doc_id for p in by["night"].supports} == {"asthma_1", "gout_1"}  # two row sets share gout_1
    assert len(scored) == len(set(scored))
    assert by["night"].passage.doc_id == by["urate crystals"].passage.doc_id == "gout_1"
    assert by["night"].score == by["urate crystals"].score
    assert QuestionOutcome("q", [by[h].score for h in ("urate crystals", "night", "asthma")], 0, [True] * 3).credit == 0.5


def test_any_multiple_choice_file_is_a_benchmark(planted_index, tmp_path):
    """`capr eval --benchmark mcqa:PATH` reads MedQA- and MedMCQA-style question files (MedQA test, another split)
    and scores them as the named benchmarks; a bad record is one line naming file and line."""
    import gzip

    from capr.cases.data import read_mcqa_file

    medqa = tmp_path / "test.jsonl.gz"
    medqa.write_bytes(gzip.compress((json.dumps({"question": DESCRIPTION, "options": {"A": "migraine", "B": "meningitis"},
                                                 "answer_idx": "B"}) + "\n" +
                                     json.dumps({"question": "sudden hot swollen big toe after beer",
                                                 "options": ["asthma", "gout"], "answer": "gout"}) + "\n").encode()))
    medmcqa = tmp_path / "mm.jsonl"
    medmcqa.write_text(json.dumps({"id": "x1", "question": "sudden hot swollen big toe after beer", "opa": "gout",
                                   "opb": "asthma", "opc": "migraine", "opd": "appendicitis", "cop": 1}) + "\n")
    qs = read_mcqa_file(medqa) + read_mcqa_file(medmcqa)
    assert [(q.qid, q.answer, q.options[q.answer]) for q in qs] == [("test-0", 1, "meningitis"), ("test-1", 1, "gout"),
                                                                       ("x1", 0, "gout")]
    assert qs[2].exclude_docs  # a MedMCQA question's own explanation never supports it
    proc = capr_cli("eval", "--benchmark", f"mcqa:{medqa}", "--index", str(planted_index.root), "-r", "dense", "--json")
    m = json.loads(proc.stdout)["metrics"]
    assert m["questions"] == 2 and m["accuracy"] == 100.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "options": {"A": "a", "B": "b"}, "answer_idx": "B"}) + "\n"
                   + json.dumps({"question": "q2", "options": {"A": "a", "B": "b"}}) + "\n")
    proc = capr_cli("eval", "--benchmark", f"mcqa:{bad}", "--index", str(planted_index.root), "-r", "bm25", check=False)
    assert proc.returncode != 0 and f"{bad}:2" in proc.stderr and "answer" in proc.stderr and "Traceback" not in proc.stderr


def test_a_medmcqa_answer_given_as_a_letter_is_read_and_a_bad_one_names_the_field(planted_index, tmp_path):
    """MedMCQA's "cop" is 1-4 in the original files; exports that write the label's name give its letter a-d (opa…opd),
    which was an unnamed int() error ("invalid literal for int() with base 10: 'b'"). A letter is read as its option;
    anything else is one line naming the file, the record's line and the field."""
    from capr.cases.data import read_mcqa_file

    record = {"id": "x1", "question": "sudden hot swollen big toe after beer", "opa": "asthma", "opb": "gout",
              "opc": "migraine", "opd": "appendicitis"}
    good = tmp_path / "letters.jsonl"
    good.write_text("".join(json.dumps({**record, "id": f"x{i}", "cop": cop}) + "\n"
                            for i, cop in enumerate(("b", "B", 2, "2"))))
    assert [q.options[q.answer] for q in read_mcqa_file(good)] == ["gout"] * 4
    proc = capr_cli("eval", "--benchmark", f"mcqa:{good}", "--index", str(planted_index.root), "-r", "bm25", "--json")
    assert json.loads(proc.stdout)["metrics"]["questions"] == 4
    for cop in ("e", 5, True, None, -1):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({**record, "cop": 1}) + "\n" + json.dumps({**record, "id": "x2", "cop": cop}) + "\n")
        proc = capr_cli("eval", "--benchmark", f"mcqa:{bad}", "--index", str(planted_index.root), "-r", "bm25",
                        check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1
        assert f'{bad}:2: field "cop" must name the correct option: 1-4 or a letter a-d (opa-opd), got {cop!r}' \
            in proc.stderr, proc.stderr


def test_question_files_as_other_copies_write_them(tmp_path):
    """MedMCQA as Hugging Face's copy writes it ("cop" 0-3: read 1-4, every answer was the next option), a JSON array
    of records, an "answer" given as the option's key, and HEAD-QA's own exam file are read as the same questions; a
    file mixing 0 and 4 for "cop" is refused naming both places."""
    from capr.cases.data import read_mcqa_file
    from capr.errors import BadInputError

    opts = {"opa": "asthma", "opb": "gout", "opc": "migraine", "opd": "appendicitis"}
    hf = tmp_path / "hf.jsonl"
    hf.write_text("".join(json.dumps({"id": f"x{i}", "question": f"q {i}", **opts, "cop": cop}) + "\n"
                          for i, cop in enumerate((1, 0, 3))))
    assert [q.options[q.answer] for q in read_mcqa_file(hf)] == ["gout", "asthma", "appendicitis"]
    original = tmp_path / "orig.jsonl"
    original.write_text("".join(json.dumps({"id": f"x{i}", "question": f"q {i}", **opts, "cop": cop}) + "\n"
                                for i, cop in enumerate((1, 4, 2))))
    assert [q.options[q.answer] for q in read_mcqa_file(original)] == ["asthma", "appendicitis", "gout"]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps({"id": f"x{i}", "question": f"q {i}", **opts, "cop": cop}) + "\n"
                             for i, cop in enumerate((2, 0, 4))))
    with pytest.raises(BadInputError, match=r'mixed\.jsonl:3: field "cop" is 4 here and 0 at .*mixed\.jsonl:2'):
        read_mcqa_file(mixed)

    array = tmp_path / "medqa.json"
    array.write_text(json.dumps([{"question": "sudden hot swollen big toe", "options": {"A": "asthma", "B": "gout"},
                                  "answer": "B"},
                                 {"question": "wheeze", "options": {"A": "asthma", "B": "gout"}, "answer": "asthma"}],
                                indent=2))
    assert [(q.qid, q.options[q.answer]) for q in read_mcqa_file(array)] == [("medqa-0", "gout"), ("medqa-1", "asthma")]
    array.write_text(json.dumps([{"question": "wheeze", "options": {"A": "asthma", "B": "gout"}}]))
    with pytest.raises(BadInputError, match=r"medqa\.json \[record 1\]: no answer"):
        read_mcqa_file(array)

    exams = tmp_path / "dev_HEAD_EN.json"
    exams.write_text(json.dumps({"exams": {"cuaderno_2013_1_B": {"category": "medicine", "data": [
        {"qid": 1, "qtext": "sudden hot swollen big toe", "ra": 2, "image": "",
         "answers": [{"aid": 2, "atext": "gout"}, {"aid": 1, "atext": "asthma"}]},
        {"qid": 2, "qtext": "see the image", "ra": 1, "image": "img.png",
         "answers": [{"aid": 1, "atext": "a"}, {"aid": 2, "atext": "b"}]},
        {"qid": 3, "qtext": "wheeze", "ra": 7, "answers": [{"aid": 1, "atext": "asthma"}, {"aid": 2, "atext": "gout"}]},
    ]}}}))
    with pytest.raises(BadInputError, match=r'question 3\]: field "ra" must be the aid of one of the answers'):
        read_mcqa_file(exams)
    data = json.loads(exams.read_text())
    del data["exams"]["cuaderno_2013_1_B"]["data"][2]
    exams.write_text(json.dumps(data))
    [q] = read_mcqa_file(exams)  # the question that needs its image is left out, as in the named benchmarks
    assert (q.qid, q.options, q.options[q.answer]) == ("cuaderno_2013_1_B-1", ["asthma", "gout"], "gout")


def test_mcqa_reader_equals_the_headqa_reader_on_the_real_exam_file(tmp_path):
    import zipfile

    from capr.cases.data import HEADQA_ZIP, read_headqa, read_mcqa_file

    path = need_data(*HEADQA_ZIP.split("/"))
    target = tmp_path / "dev_HEAD_EN.json"
    with zipfile.ZipFile(path) as z:
        target.write_bytes(z.read("HEAD_EN/dev_HEAD_EN.json"))
    ours, ref = read_mcqa_file(target), read_headqa(path.parent.parent, "dev")
    assert len(ours) == len(ref) > 1000
    assert [(q.description, q.options, q.answer) for q in ours] == [(q.description, q.options, q.answer) for q in ref]


def test_a_damaged_mcqa_file_and_a_limit_below_one_are_one_line(planted_index, tmp_path):
    """A gzip'd question file with a damaged deflate block (zlib.error) was a traceback without the file's name;
    --limit 0 scored no question and printed a table of zeros (exit 0), a negative one was a ValueError traceback."""
    import gzip

    from capr.cases.bench import benchmark_questions
    from capr.cases.data import read_mcqa_file
    from capr.errors import BadInputError, CaprError

    lines = "".join(json.dumps({"question": f"{DESCRIPTION} {i}", "options": {"A": "migraine", "B": "meningitis"},
                                "answer_idx": "B"}) + "\n" for i in range(3000))
    bad = bytearray(gzip.compress(b"more\n", mtime=0))
    bad[10] = 0b111  # its deflate block's header: a reserved block type, which zlib refuses (zlib.error)
    bad = gzip.compress(lines.encode(), mtime=0) + bytes(bad)  # read past the head: a second member, damaged
    damaged = tmp_path / "damaged.jsonl.gz"
    damaged.write_bytes(bytes(bad))
    with pytest.raises(BadInputError, match=r"damaged\.jsonl\.gz \[line \d+\]: corrupt gzip data"):
        read_mcqa_file(damaged)
    proc = capr_cli("eval", "--benchmark", f"mcqa:{damaged}", "--index", str(planted_index.root), "-r", "bm25",
                    check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and f"{damaged} [line " in proc.stderr
    plain = tmp_path / "q.jsonl"
    plain.write_text(lines[: lines.index("\n") + 1])
    for limit in ("0", "-2"):
        proc = capr_cli("eval", "--benchmark", f"mcqa:{plain}", "--index", str(planted_index.root), "-r", "bm25",
                        "--limit", limit, check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr and "--limit must be at least 1" in proc.stderr
    assert len(benchmark_questions(tmp_path, f"mcqa:{plain}", 5)) == 1
    with pytest.raises(CaprError, match="--limit"):
        benchmark_questions(tmp_path, f"mcqa:{plain}", 0)


def test_mcqa_reader_equals_the_medqa_and_medmcqa_readers_on_the_real_files():
    from capr.cases.data import MEDMCQA_FILE, MEDQA_FILE, read_mcqa_file, read_medmcqa, read_medqa

    path = need_data(*MEDMCQA_FILE.split("/"))
    ours, ref = read_mcqa_file(path), read_medmcqa(path.parent.parent)
    assert len(ours) == len(ref) > 4000
    assert [(q.description, q.options, q.answer, q.exclude_docs) for q in ours] == \
        [(q.description, q.options, q.answer, q.exclude_docs) for q in ref]

    path = need_data(*MEDQA_FILE.split("/"))
    ours, ref = read_mcqa_file(path), read_medqa(path.parent.parent)
    assert len(ours) == len(ref) > 1000
    assert [(q.description, q.options, q.answer) for q in ours] == [(q.description, q.options, q.answer) for q in ref]
