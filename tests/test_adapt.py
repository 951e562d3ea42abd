"""capr adapt (issue 17): the gate's rule, its metrics, and one real end-to-end run on a tiny corpus."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from capr.adapt import AdaptConfig, adapt, config_for_more, gate, read_report
from capr.adapt.checks import FREE_TEXT, REPORTED, SELF, CheckScores, DevCheck, jsonl_check
from capr.eval.metrics import candidate_metrics
from capr.eval.significance import paired_randomisation_p as paired_p
from capr.adapt.gate import Candidate
from capr.errors import BadInputError, CaprError
from conftest import capr_cli, capr_in_process, capr_real_or_in_process


def test_candidate_metrics_on_a_known_ranking():
    # candidates scored 0.9, 0.5, 0.1; relevant: the second (grade 1) and third (grade 2); nDCG's gain is the grade
    m = candidate_metrics([np.array([0.9, 0.5, 0.1])], [[0, 1, 2]])
    assert m["P@1"][0] == 0
    assert m["MRR"][0] == pytest.approx(50.0)
    assert m["MAP"][0] == pytest.approx(100 * (1 / 2 + 2 / 3) / 2)
    ideal = 2 / np.log2(2) + 1 / np.log2(3)
    got = 1 / np.log2(3) + 2 / np.log2(4)
    assert m["nDCG@10"][0] == pytest.approx(100 * got / ideal)
    # ties fall in trec_eval's order (document id descending: the later candidate first)
    assert candidate_metrics([np.array([0.5, 0.5])], [[1, 0]])["P@1"][0] == 0
    assert candidate_metrics([np.array([0.5, 0.5])], [[0, 1]])["P@1"][0] == 100


def _cand(name, alpha, self_mrr, free_map):
    c = Candidate(name, name, alpha)
    c.scores = CheckScores({"labels": {"MRR": np.array([self_mrr]), "P@1": np.array([0.0]), "MAP": np.array([0.0]),
                                       "nDCG@10": np.array([0.0])},
                            "free": {"MAP": np.array([free_map]), "MRR": np.array([0.0]), "P@1": np.array([0.0]),
                                     "nDCG@10": np.array([0.0])}})
    return c


CHECKS = [DevCheck("labels", SELF, "", ["q"], [], [[0]], [[1]], primary="MRR"),
          DevCheck("free", FREE_TEXT, "", ["q"], [], [[0]], [[1]], primary="MAP")]


def test_gate_keeps_the_best_candidate_that_is_no_worse_on_free_text():
    start = _cand("start", 0.0, 60, 80)
    trained = _cand("trained", 1.0, 90, 79.9)  # best on labels, but worse on free text
    merged = _cand("merge", 0.5, 80, 80.0)  # gains, and at the start model's level on free text
    kept, why = gate([start, trained, merged], CHECKS, min_gain=1.0)
    assert kept is merged and "trained: worse on free" in why
    kept, why = gate([start, trained], CHECKS, min_gain=1.0)
    assert kept is start and "no candidate passed" in why
    small = _cand("small", 0.5, 60.5, 90)  # no worse anywhere, but gains less than min_gain
    kept, why = gate([start, small], CHECKS, min_gain=1.0)
    assert kept is start and "gains too little" in why


def test_no_second_stage_without_a_free_text_check():
    """A second stage gaining on held-out labels alone (a corpus too small for a free-text check) is not kept; with a
    free-text check it is kept only if no deciding check loses more than the margin."""
    from capr.adapt.gate import second_stage_verdict

    keep, why = second_stage_verdict({"held-out labels": 10.0}, False, 1.0, 1.0)
    assert not keep and "no free-text check" in why
    assert second_stage_verdict({"held-out labels": 10.0, "inverse cloze": -0.5}, True, 1.0, 1.0)[0]
    keep, why = second_stage_verdict({"held-out labels": 10.0, "inverse cloze": -1.5}, True, 1.0, 1.0)
    assert not keep and "worse than the first stage alone on inverse cloze" in why
    assert not second_stage_verdict({"held-out labels": 0.5, "inverse cloze": 0.2}, True, 1.0, 1.0)[0]


def test_gate_non_inferiority_margin():
    start = _cand("start", 0.0, 60, 80)
    close = _cand("close", 1.0, 90, 79.2)  # 0.8 below on free text: within a 1-point margin, not at or above
    kept, why = gate([start, close], CHECKS, min_gain=1.0, margin=1.0)
    assert kept is close and "within 1 point(s)" in why
    assert gate([start, close], CHECKS, min_gain=1.0, margin=0.0)[0] is start
    far = _cand("far", 1.0, 95, 78.5)
    assert gate([start, far], CHECKS, min_gain=1.0, margin=1.0)[0] is start


def test_a_rerun_reuses_only_a_finished_training_with_the_same_settings(tmp_path):
    from capr.adapt.pipeline import _finished_training
    from capr.train import ModelKind, TrainArgs

    args = TrainArgs.for_kind(ModelKind.bi, context="title", time_budget_min=10)
    card = {"kind": "bi", "args": {**args.to_dict(), "time_budget_min": 7.5}, "steps": 40, "best_step": 40,
            "seconds": 600, "stopped": "time_budget", "dev_start": {"R@1": 50.0}, "dev_best": {"R@1": 80.0}}
    (tmp_path / "capr.json").write_text(json.dumps(card))
    assert _finished_training(tmp_path, args) is None  # no steps_run: the run that wrote it did not finish
    (tmp_path / "capr.json").write_text(json.dumps({**card, "steps_run": 41}))
    done = _finished_training(tmp_path, args)
    assert done is not None and done["kept_step"] == 40 and done["steps"] == 41  # the budget may differ
    other = TrainArgs.for_kind(ModelKind.bi, context="off", time_budget_min=10)
    assert _finished_training(tmp_path, other) is None


def test_paired_test_separates_a_consistent_gain_from_noise():
    rng = np.random.default_rng(0)
    a = rng.normal(50, 10, 100)
    assert paired_p(a + 5, a) < 0.001
    assert paired_p(a + rng.normal(0, 10, 100), a) > 0.01
    assert paired_p(a, a) == 1.0


def test_bad_free_text_dev_set_names_file_and_line(tmp_path, runner):
    bad = tmp_path / "dev.jsonl"
    bad.write_text('{"question": "q", "answers": [{"text": "a", "relevance": 1}]}\n{"question": "no answers"}\n')
    with pytest.raises(BadInputError) as e:
        jsonl_check(bad)
    assert "dev.jsonl" in str(e.value) and "line 2" in str(e.value)
    proc = capr_in_process(runner, "adapt", str(tmp_path), "--out", str(tmp_path / "idx"), "--free-text-dev", str(bad),
                           check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr


def test_adapt_end_to_end_on_a_tiny_corpus(tmp_path, demo_dir):
    from capr.index import load_index
    from capr.models.encoder import Encoder, EncoderConfig
    from capr.search import SearchOptions, Searcher

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in sorted(demo_dir.glob("*.txt"))[:18]:
        shutil.copy(f, corpus / f.name)
    free = tmp_path / "free.jsonl"
    free.write_text("\n".join(json.dumps(r) for r in (
        {"question": "what happens in a gout attack?", "answers": [
            {"text": "A gout attack is sudden pain and swelling of a joint, often the big toe.", "relevance": 1},
            {"text": "Migraine is a recurring headache disorder.", "relevance": 0}]},
        {"question": "how is asthma treated?", "answers": [
            {"text": "Asthma is treated with inhaled corticosteroids and rescue inhalers.", "relevance": 1},
            {"text": "Celiac disease is managed with a gluten-free diet.", "relevance": 0}]})) + "\n")
    out = tmp_path / "idx"
    report = adapt(AdaptConfig(corpora=[str(corpus)], out=str(out), time_budget_min=3, max_steps=2, batch_size=8,
                               free_text=(str(free),), min_labels=16, alphas=(1.0, 0.5)),
                   log=lambda m: None, progress=False)

    # the report: what was trained, every candidate's dev numbers, and a decision the gate's rule explains
    assert report.training["steps"] == 2
    assert set(report.candidates) == {"start", "trained", "merge α=0.5"}
    names = [c["name"] for c in report.checks]
    assert "held-out labels" in names and "free" in names
    assert {SELF, FREE_TEXT} <= {c["side"] for c in report.checks}
    by_name = {c["name"]: c for c in report.checks}
    # the gain the gate asks for is measured as the index searches; the pool re-ranking is only reported
    assert by_name["held-out labels, searched"]["side"] == SELF
    assert by_name["held-out labels"]["side"] == REPORTED
    assert (tmp_path / "idx.adapt" / "gate").is_dir()
    start = report.candidates["start"]
    if report.kept != "start":
        kept = report.candidates[report.kept]
        for name, c in by_name.items():
            delta = kept[name][c["primary"]] - start[name][c["primary"]]
            if c["side"] != REPORTED:  # free text: within the default 1-point margin
                assert delta >= (1.0 if c["side"] == SELF else -1.0) - 0.01, (name, delta)
    else:
        assert "start model is kept" in report.reason
        assert not (tmp_path / "idx.adapt" / "model").exists()
    on_disk = read_report(out)
    assert on_disk["kept"] == report.kept and on_disk["reason"] == report.reason

    # the index is built with the kept model, records the adaptation, and searches with it without flags
    index = load_index(out)
    dense = index.manifest["dense"]
    assert dense["adapted"]["kept"] == report.kept
    if report.kept != "start":  # the fusion chosen for the kept model is recorded, and search uses it
        assert dense["fusion"] == {"method": "rrf", "weights": report.fusion["weights"]}
        assert Searcher(index).resolve(SearchOptions()).fusion.weights == tuple(report.fusion["weights"])
    else:
        assert "fusion" not in dense and not report.fusion
    assert set(report.candidates_dense) == set(report.candidates)
    assert dense["encoder"]["model"] == report.kept_model
    if report.kept != "start":
        assert report.kept_model == str((tmp_path / "idx.adapt" / "model").resolve())
        card = json.loads((tmp_path / "idx.adapt" / "model" / "capr.json").read_text())
        assert card["adapted"]["kept"] == report.kept
    searcher = Searcher(index)
    assert searcher.default_retriever().value == "hybrid"
    res = searcher.search("gout symptoms", SearchOptions(k=3))
    assert res.hits and "gout" in (res.hits[0].passage.title + res.hits[0].passage.text).lower()
    assert index.encoder().config.model == report.kept_model
    # the stored vectors are the kept model's reading of the passage
    from capr.index.segment import passage_index_text

    enc = Encoder(EncoderConfig(model=report.kept_model), cache=False)
    p = index.passage(0)
    expect = enc.encode_passages([enc.passage_text(p, passage_index_text(p, True))])[0]
    assert float(index.row_vectors(np.array([0]))[0] @ expect) > 0.999

    # the second stage (the start model + the trained one) was gated on every check, with and without it
    second = report.second_stage
    assert set(second["table"]) == set(by_name) and second["spec"].startswith("bi:minilm,bi:")
    kept_scores = report.candidates[report.kept]
    for name, row in second["table"].items():  # "without" is the kept first stage the gate scored
        assert abs(row["without"] - kept_scores[name][row["primary"]]) < 0.01, name
    gains = [row["with"] - row["without"] for name, row in second["table"].items() if by_name[name]["side"] != REPORTED]
    free_checked = any(by_name[name]["side"] == FREE_TEXT for name in second["table"])
    assert second["kept"] == (free_checked and max(gains) >= 1.0 - 1e-9 and min(gains) >= -1.0 - 1e-9), (second, gains)
    if second["kept"]:  # recorded in the index, naming a copy of the trained model: search uses it without flags
        assert dense["reranker"]["spec"] == second["spec"]
        assert second["spec"].endswith(str((tmp_path / "idx.adapt" / "second-stage").resolve()))
    else:
        assert "reranker" not in dense and not (tmp_path / "idx.adapt" / "second-stage").exists()

    # --add: the same settings over both corpora, training from the model kept before
    more = tmp_path / "more"
    more.mkdir()
    shutil.copy(sorted(demo_dir.glob("*.txt"))[20], more)
    cfg = config_for_more(out, [str(more)], time_budget_min=1)
    assert cfg.corpora == [str(corpus), str(more)] and cfg.time_budget_min == 1 and cfg.max_steps == 2
    assert (cfg.init_model is None) == (report.kept == "start")


def test_inverse_cloze_queries_are_cut_from_their_passage_and_only_match_it():
    import random

    from capr.labels.generate import LabeledPassage
    from capr.train import TrainArgs
    from capr.train.data import TrainingSet

    labels = []
    for k in range(12):
        sents = [f"Sentence one about condition {k} and its many effects on patients.",
                 f"Condition {k} is treated with a common drug in most of the adult cases.",
                 f"Follow-up visits for condition {k} happen every three months or so in clinics."]
        text = " ".join(sents)
        offsets, pos = [], 0
        for s in sents:
            offsets.append((pos, pos + len(s)))
            pos += len(s) + 1
        labels.append(LabeledPassage(f"p{k}", f"d{k}", text, "treatment", [f"condition {k}"], f"Condition {k}", "",
                                     sentences=offsets))
    args = TrainArgs(batch_size=12, ict_prob=1.0, hard_negatives=1, dev_fraction=0.0)
    data = TrainingSet(labels, args)
    batch = next(iter(data.batches(random.Random(0), with_selection_query=False)))
    assert all(q.removed for q in batch.queries)
    cut = sum(q.text not in batch.passages[i] for i, q in enumerate(batch.queries))
    assert cut >= len(batch.queries) // 2  # 90 % cut, 10 % left in place
    assert (batch.positives == np.eye(len(batch.queries), len(batch.passages), dtype=bool)).all()
    assert all(cols == [] for cols in batch.hard_columns)  # in-batch negatives only


def _check(name, side, relevant_lex_rank, relevant_dense_rank, n=10, queries=4):
    """Queries whose relevant candidate (index 0) is ranked ``relevant_*_rank`` by BM25 and by the model; the
    candidate the other retriever puts first (index 1) is ranked first where the relevant one is not."""
    check = DevCheck(name, side, "", ["q"] * queries, [], [list(range(n))] * queries,
                     [[1.0] + [0.0] * (n - 1)] * queries, primary="MRR")

    def scores(rank_of_relevant):
        order = [1] + [k for k in range(2, n)]  # the others, best first
        order.insert(rank_of_relevant - 1, 0)
        s = np.zeros(n)
        for r, k in enumerate(order):
            s[k] = n - r
        return s

    check._lexical = [scores(relevant_lex_rank)] * queries
    return check, [scores(relevant_dense_rank)] * queries


def test_the_kept_model_gets_more_dense_weight_only_when_held_out_labels_gain_and_free_text_holds():
    from capr.adapt.gate import choose_fusion, fusion_with_share

    labels, label_sims = _check("labels", SELF, relevant_lex_rank=10, relevant_dense_rank=1)
    free_ok, free_sims = _check("free", FREE_TEXT, relevant_lex_rank=1, relevant_dense_rank=1)
    start = Candidate("start", "minilm", 0.0)
    start.scores.per_query["free"] = {"MRR": np.array([100.0] * 4)}
    kept = Candidate("trained", "x", 1.0)
    kept.sims = {"labels": label_sims, "free": free_sims}
    got = choose_fusion(kept, start, [labels, free_ok], (0.67, 0.8, 0.9, 1.0), min_gain=1.0, margin=1.0)
    # at the default 1 : 4 the BM25 favourite still wins; a share of 0.9 already ranks the relevant one first
    assert got["table"]["0.8"]["labels"] == 50.0 and got["table"]["0.9"]["labels"] == 100.0
    assert got["dense_weight"] == 0.9 and got["weights"] == [0.1, 0.9]
    # the same gain, but the free-text check would lose what BM25 gave it: the default share stays
    free_bad, bad_sims = _check("free", FREE_TEXT, relevant_lex_rank=1, relevant_dense_rank=10)
    kept.sims["free"] = bad_sims
    got = choose_fusion(kept, start, [labels, free_bad], (0.67, 0.8, 0.9, 1.0), min_gain=1.0, margin=1.0)
    assert got["dense_weight"] == fusion_with_share().weights[1] and "default" in got["reason"]


def test_a_recorded_fusion_is_what_search_and_eval_use(tmp_path, demo_dir):
    from capr.corpus import read_documents
    from capr.eval.runner import EvalConfig
    from capr.index import IndexWriter, load_index
    from capr.models.encoder import EncoderConfig
    from capr.search import SearchOptions, Searcher
    from capr.search.config import DEFAULT_FUSION

    docs = list(read_documents(demo_dir))[:4]
    plain, adapted = tmp_path / "plain", tmp_path / "adapted"
    for root, fusion in ((plain, None), (adapted, [0.1, 0.9])):
        w = IndexWriter(root, dense=EncoderConfig())
        if fusion:
            w.dense_info["fusion"] = {"method": "rrf", "weights": fusion}
        with w:
            for d in docs:
                w.add(d)
    assert Searcher(load_index(plain)).resolve(SearchOptions()).fusion.weights == DEFAULT_FUSION.weights
    searcher = Searcher(load_index(adapted))
    assert searcher.resolve(SearchOptions()).fusion.weights == (0.1, 0.9)
    assert searcher.resolve(SearchOptions(fusion=DEFAULT_FUSION)).fusion.weights == DEFAULT_FUSION.weights  # asked
    assert searcher.search("gout attack", k=3).options.fusion.weights == (0.1, 0.9)
    cfg = EvalConfig(benchmark="mediqa2019", query_field="question", pipeline="default", model=str(adapted))
    assert cfg.search_options().fusion.weights == (0.1, 0.9)
    assert EvalConfig(benchmark="mediqa2019", query_field="question", pipeline="default").search_options().fusion is None


def test_a_recorded_second_stage_is_what_search_eval_and_the_service_use(tmp_path, demo_dir, runner):
    """An index that records a second stage (as `capr adapt` writes one) is re-ranked with it by `capr search`,
    `capr eval --model IDX --pipeline default` and the service, unless they ask for none."""
    from fastapi.testclient import TestClient

    from capr.corpus import read_documents
    from capr.eval.runner import EvalConfig
    from capr.index import IndexWriter
    from capr.models.encoder import EncoderConfig
    from capr.service import ServiceConfig, create_app

    root, spec = tmp_path / "idx", "bi:minilm,bi:minilm"
    w = IndexWriter(root, dense=EncoderConfig())
    w.dense_info["reranker"] = {"spec": spec, "depth": 20}
    with w:
        for d in list(read_documents(demo_dir))[:6]:
            w.add(d)
    found = json.loads(capr_in_process(runner, "search", str(root), "gout attack", "-k", "3", "--json").stdout)
    plain = json.loads(capr_in_process(runner, "search", str(root), "gout attack", "-k", "3", "--json", "--reranker",
                                       "none").stdout)
    assert found["reranker"] == spec and plain["reranker"] is None
    # an ensemble of MiniLM with itself re-ranks alone: the hits' scores are its summed z-scores, not the fusion's
    assert [h["score"] for h in found["results"]] != [h["score"] for h in plain["results"]]
    assert EvalConfig(benchmark="mediqa2019", query_field="question", pipeline="default", model=str(root)).effective_reranker == spec
    assert EvalConfig(benchmark="mediqa2019", query_field="question", pipeline="default", model=str(root),
                      reranker="none").effective_reranker is None
    # capr adapt fills the embedding cache with a recorded member's vectors of every passage, so first searches are fast
    from capr.index import load_index
    from capr.models.cache import EmbeddingCache
    from capr.index.segment import passage_index_text
    from capr.search.second_stage import load_reranker, warm_passage_vectors

    ensemble = load_reranker(spec)
    member = ensemble.members[1]
    member.encoder.cache = EmbeddingCache(tmp_path / "fresh.sqlite")
    index = load_index(root)
    # what the member reads of each passage: the passage, or the windows of a long one
    texts = [w for p in index.passages(np.flatnonzero(index.live))
             for w in member.read_windows(p, passage_index_text(p, index.includes_titles()))]
    assert all(v is None for v in member.encoder.cache.get_many(member.encoder.passage_side.key, texts))
    advanced = []
    assert warm_passage_vectors(ensemble, index, advanced.append) == index.live_count() == sum(advanced)
    assert all(v is not None for v in member.encoder.cache.get_many(member.encoder.passage_side.key, texts))
    client = TestClient(create_app(root, ServiceConfig()))
    assert client.post("/search", json={"text": "gout attack", "k": 3}).json()["reranker"] == spec
    assert client.post("/search", json={"text": "gout attack", "k": 3, "reranker": "none"}).json()["reranker"] is None
    assert spec in client.get("/stats").json()["rerankers"]


def test_the_searched_check_ranks_held_out_documents_as_capr_search_does(tmp_path, demo_dir):
    """The gate's "must gain" check searches an index of whole held-out documents through the Searcher: its
    relevance is the labels' (the asked aspect's section of a document naming the entity), its ranks are the
    Searcher's, and a relevance that does not match the queries scores (near) zero."""
    from dataclasses import replace

    from capr.adapt.checks import searched_labels_check
    from capr.corpus import read_documents
    from capr.index import load_index
    from capr.labels import LabelConfig, LabelGenerator
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    docs = list(read_documents(demo_dir))
    labels = list(LabelGenerator(LabelConfig())(docs))
    check = searched_labels_check(labels, docs, max_tokens=200, n_queries=40)
    assert check is not None and check.side == SELF and len(check) >= 8
    assert {d.doc_id for d in check.documents} <= {lp.doc_id for lp in labels}
    for (entity, aspect), rel in zip(check.queries, check.relevant):
        assert rel and all(a == aspect for _, a in rel)
    folder = check.build("minilm", tmp_path / "gate")
    got = check.metrics(folder)
    assert set(got) == {"P@1", "MRR", "MAP", "nDCG@10"} and len(got["MRR"]) == len(check)
    assert got["MRR"].mean() > 60  # entity tiers and the aspect prior find a named disease's section
    # the first query's P@1 is exactly whether the Searcher's top hit is a relevant section
    searcher = Searcher(load_index(folder))
    entity, aspect = check.queries[0]
    top = searcher.search(searcher.parse(Query("0", entity=entity, aspect=aspect), validate=False),
                          SearchOptions(k=10, highlights=False)).hits[0].passage
    assert got["P@1"][0] == 100 * float((top.doc_id, top.aspect) in check.relevant[0])
    # each query judged by another query's sections: the ranks no longer match the relevance
    shifted = replace(check, relevant=check.relevant[1:] + check.relevant[:1])
    assert shifted.metrics(folder)["MRR"].mean() < got["MRR"].mean() - 30


def test_a_budget_too_small_to_train_says_what_would_do(tmp_path, demo_dir):
    """The budget covers training and the gate (reading and labelling come on top); one too small for both says
    how much would do, before any training."""
    from capr.errors import CaprError

    with pytest.raises(CaprError, match=r"min to train after the gate .*; give at least \d"):
        adapt(AdaptConfig(corpora=[str(demo_dir)], out=str(tmp_path / "idx"), time_budget_min=0.2, min_labels=16),
              log=lambda m: None, progress=False)
    assert not (tmp_path / "idx.adapt" / "trained").exists()


def test_an_out_that_cannot_be_an_index_is_refused_before_any_work(tmp_path, demo_dir, runner):
    """--out a file, a folder of other things (the corpus itself), or OUT.adapt a file: one error before labelling
    and training (it came only once the whole time budget was spent, when the index was written; OUT.adapt as a
    file was a FileExistsError traceback), and nothing of the run is left in OUT.adapt/."""
    from capr.errors import CaprError

    calls: list[str] = []
    (tmp_path / "afile").write_text("mine\n")
    notes = tmp_path / "notes"
    shutil.copytree(demo_dir, notes)
    for out, match in ((tmp_path / "afile", "afile: exists and is not a directory"),
                       (notes, "notes: directory is not empty and is not a capr index")):
        with pytest.raises(CaprError, match=match):
            adapt(AdaptConfig(corpora=[str(demo_dir)], out=str(out), time_budget_min=1), log=calls.append, progress=False)
        assert not calls and not (tmp_path / f"{out.name}.adapt").exists()
    assert (tmp_path / "afile").read_text() == "mine\n" and sorted(p.name for p in notes.iterdir()) == \
        sorted(p.name for p in demo_dir.iterdir())
    (tmp_path / "idx.adapt").write_text("")
    proc = capr_in_process(runner, "adapt", str(demo_dir), "--out", str(tmp_path / "idx"), "--time-budget", "1",
                           check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "idx.adapt: exists and is not a directory" in proc.stderr and not (tmp_path / "idx").exists()


def test_a_corpus_without_headings_is_told_why_it_gave_no_labels(tmp_path):
    """Labels take their aspect from section headings: notes with none give no labels, and the reason says so
    (it used to end at "too few labels", which reads as "add more notes")."""
    src = tmp_path / "notes.jsonl"
    src.write_text("".join(json.dumps({"id": f"n{i}", "text": f"Patient {i} has hypertension and takes lisinopril "
                                        f"{i + 5} mg daily; blood pressure is stable on review today."}) + "\n"
                           for i in range(6)))
    messages: list[str] = []
    report = adapt(AdaptConfig(corpora=[str(src)], out=str(tmp_path / "idx"), time_budget_min=1), log=messages.append,
                   progress=False)
    assert "none of the 6 documents has section headings" in report.reason


def test_the_gates_second_stage_check_ranks_as_search_does_at_the_rerankers_share():
    """A second stage that prefers a wrong candidate: alone (share 1) it costs the check its first place; at a share
    that leaves the first stage most of the say (as Searcher.rerank fuses them) the relevant candidate stays first."""
    from capr.adapt.checks import CheckPassage, reranked_check_metrics
    from capr.search.config import DEFAULT_FUSION

    check, sims = _check("free", FREE_TEXT, relevant_lex_rank=1, relevant_dense_rank=1, queries=1)
    check.pool = [CheckPassage(text=f"passage {i}") for i in range(10)]

    class PrefersTheSecond:  # candidate 1 above the relevant one (0), which it ranks second
        def __init__(self, share):
            self.default_share = share

        def score_passages(self, query, passages, index_texts):
            return np.asarray([{"passage 1": 2.0, "passage 0": 1.0}.get(p.text, 0.0) for p in passages])

    alone = reranked_check_metrics(check, sims, DEFAULT_FUSION, PrefersTheSecond(1.0), depth=5)
    fused = reranked_check_metrics(check, sims, DEFAULT_FUSION, PrefersTheSecond(0.3), depth=5)
    assert alone["MRR"][0] == 50.0 and fused["MRR"][0] == 100.0


NUMERIC_ADAPT_OPTIONS = [
    ("--max-tokens", "0", "--max-tokens must be at least 1, got 0"),
    ("--max-steps", "0", "--max-steps must be at least 1, got 0"),
    ("--seed", "-1", "--seed must be between 0 and 4294967295, got -1"),
    ("--free-text-margin", "nan", "--free-text-margin must be a number >= 0, got nan")]


@pytest.mark.parametrize("option, value, message", NUMERIC_ADAPT_OPTIONS)
def test_numeric_adapt_options_out_of_range_are_refused_before_the_labels(tmp_path, demo_dir, runner, option, value,
                                                                          message):
    """A zero --max-tokens labelled and indexed anyway, a zero --max-steps was refused only after the labels were
    written, a negative --seed was a numpy traceback after them and a NaN margin was taken: one line naming the option,
    before any document is read."""
    out = tmp_path / "idx"
    # a budget too short to train: were the option let through, the run would stop after the labels, not train
    real = (option, value, message) == NUMERIC_ADAPT_OPTIONS[0]  # the real command once, the rest in process
    proc = capr_real_or_in_process(runner, real, "adapt", str(demo_dir), "--out", str(out), "--time-budget", "0.1",
                                   option, value, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    assert message in proc.stderr and not out.exists() and not (tmp_path / "idx.adapt").exists()
    with pytest.raises(CaprError, match="--max-tokens must be at least 1"):  # the Python API refuses it too
        adapt(AdaptConfig(corpora=[str(demo_dir)], out=str(out), max_tokens=0), log=lambda m: None, progress=False)
    assert not (tmp_path / "idx.adapt").exists()


DAMAGED_REPORTS = [
    ('{"config": {"corpora": ["a"], "ou', "the `capr adapt` report is not valid JSON"),  # cut short (disk full)
    ("[]", 'not a `capr adapt` report (no "config" object)'),
    ('{"config": {"corpora": ["a"]}}', "its \"config\" is not one `capr adapt` can continue"),
    ('{"config": {"corpora": ["a"], "out": "o", "alphas": 5}}', "its \"config\" is not one `capr adapt` can continue")]


@pytest.mark.parametrize("report, message", DAMAGED_REPORTS)
def test_adapt_add_with_a_damaged_report_is_one_line_naming_it(tmp_path, demo_dir, runner, report, message):
    """`capr adapt --add` continues from OUT.adapt/adapt.json: a truncated or hand-edited one was a JSONDecodeError,
    KeyError or TypeError traceback. It is one line naming the file, before anything is read or written."""
    out = tmp_path / "idx"
    out.mkdir()
    (tmp_path / "idx.adapt").mkdir()
    path = tmp_path / "idx.adapt" / "adapt.json"
    path.write_text(report)
    real = (report, message) == DAMAGED_REPORTS[0]  # the real command once, the rest in process
    proc = capr_real_or_in_process(runner, real, "adapt", str(demo_dir), "--out", str(out), "--add", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    assert f"{path}: {message}" in proc.stderr and "without --add" in proc.stderr
    assert path.read_text() == report and sorted(p.name for p in tmp_path.iterdir()) == ["idx", "idx.adapt"]
    with pytest.raises(CaprError, match="without --add"):
        config_for_more(out, [str(demo_dir)])


def test_adapt_add_refuses_settings_it_would_pass_over(tmp_path, demo_dir, runner):
    """`capr adapt --add` continues with the first run's settings: a --max-tokens, --seed or --format typed beside
    it was passed over without a word. Only --time-budget (and --json) apply to the added run."""
    out = tmp_path / "idx"
    proc = capr_cli("adapt", str(demo_dir), "--out", str(out), "--add", "--max-tokens", "120", "--seed", "3",
                    "-f", "text", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    assert "--format, --max-tokens, --seed cannot change them" in proc.stderr and "without --add" in proc.stderr
    assert not out.exists() and not (tmp_path / "idx.adapt").exists()
    # the settings it takes get as far as the earlier run's report (absent here)
    proc = capr_in_process(runner, "adapt", str(demo_dir), "--out", str(out), "--add", "--time-budget", "1", check=False)
    assert proc.returncode != 0 and "cannot change" not in proc.stderr and "adapt.json" in proc.stderr, proc.stderr
