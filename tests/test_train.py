"""CAPR trainers on a tiny corpus: loss falls, the saved model ranks a planted answer first, models reload."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from capr.errors import QueryError
from capr.labels.generate import LabeledPassage
from capr.train import ModelKind, TrainArgs, train
from capr.train.losses import multi_positive_listwise_loss
from capr.search import search
from conftest import capr_cli, capr_in_process, capr_real_or_in_process

DISEASES = ["Zorvex syndrome", "Kalimba fever", "Dunmore disease", "Ostrava palsy", "Venn anemia", "Brisk pox",
            "Tolland ataxia", "Marrow cough"]
ASPECTS = {
    "symptoms": "{d} causes itching of the palms, night sweats and a hoarse voice in most patients.",
    "treatment": "{d} is treated with daily hydration, rest and a short course of oral steroids.",
    "causes": "{d} is caused by a mutation in a single gene inherited from one parent.",
}


def tiny_labels() -> list[LabeledPassage]:
    out = []
    for i, d in enumerate(DISEASES):
        for aspect, text in ASPECTS.items():
            t = text.format(d=d)
            out.append(LabeledPassage(pid=f"d{i}-{aspect}", doc_id=f"d{i}", text=t, aspect=aspect, entities=[d],
                                      title=d, heading=aspect.title(), sentences=[(0, len(t))]))
    return out


def tiny_args(kind: str, **kw) -> TrainArgs:
    base = dict(kind=ModelKind(kind), max_steps=12, batch_size=8 if kind != "cross" else 4, lr=1e-4,
                max_length=48, query_max_length=16, dev_fraction=0.0, hard_negatives=1, question_prob=0.0,
                synonym_prob=0.0, seed=3)
    base.update(kw)
    return TrainArgs(**base)


def planted_rank(kind: str, model_dir) -> tuple[float, float]:
    """Score of the planted answer and the best distractor for "Zorvex syndrome treatment"."""
    from capr.search.second_stage import load_reranker

    gold = "Zorvex syndrome is treated with daily hydration, rest and a short course of oral steroids."
    distractors = [
        "Zorvex syndrome causes itching of the palms, night sweats and a hoarse voice in most patients.",
        "Zorvex syndrome is caused by a mutation in a single gene inherited from one parent.",
        "Kalimba fever is treated with daily hydration, rest and a short course of oral steroids.",
        "The clinic is open on weekdays from nine to five.",
    ]
    scores = load_reranker(f"{kind}:{model_dir}").score("Zorvex syndrome treatment", [gold] + distractors)
    return float(scores[0]), float(max(scores[1:]))


@pytest.mark.parametrize("kind", ["bi", "poly", "cross"])
def test_training_lowers_loss_and_ranks_planted_answer(tmp_path, kind):
    out = tmp_path / kind
    result = train(tiny_labels(), out, tiny_args(kind, max_steps=16 if kind == "cross" else 12), progress=False)
    assert result.steps == (16 if kind == "cross" else 12)
    first, last = np.mean(result.losses[:4]), np.mean(result.losses[-4:])
    assert last < first, result.losses
    card = json.loads((out / "capr.json").read_text())
    assert card["kind"] == kind and card["steps"] == result.steps and card["train_passages"] == 24
    assert (out / "README.md").read_text().startswith(f"# capr {kind}-encoder")
    gold, best_other = planted_rank(kind, out)
    assert gold > best_other, (gold, best_other)
    if kind == "cross":  # the ONNX int8 export ranks the same way
        gold, best_other = planted_rank("cross-int8", out)
        assert gold > best_other, (gold, best_other)


def test_separate_bi_encoders_and_index_uses_markers(tmp_path):
    out = tmp_path / "bi-sep"
    train(tiny_labels(), out, tiny_args("bi", shared=False, max_steps=2), progress=False)
    assert (out / "query" / "config.json").exists()
    from capr.models.encoder import Encoder, EncoderConfig

    enc = Encoder(EncoderConfig(model=str(out)), cache=False)
    assert enc.config.query_model == str(out / "query") and enc.config.query_prefix == ""
    shared = tmp_path / "bi-shared"
    train(tiny_labels(), shared, tiny_args("bi", max_steps=1), progress=False)
    enc = Encoder(EncoderConfig(model=str(shared)), cache=False)
    assert enc.config.query_prefix == "[QUERY] " and enc.config.passage_prefix == "[PASSAGE] "
    assert enc.encode_queries(["Zorvex syndrome treatment"]).shape == (1, 384)


def test_early_stopping_keeps_the_best_dev_checkpoint(tmp_path):
    labels = tiny_labels() * 1
    for k, lp in enumerate(labels):  # more documents so a dev split exists
        lp.doc_id = f"doc{k}"
    out = tmp_path / "bi-dev"
    result = train(labels, out, tiny_args("bi", dev_fraction=0.3, dev_queries=8, eval_every=2, max_steps=6, lr=1e-3,
                                          patience=1), progress=False)
    card = json.loads((out / "capr.json").read_text())
    assert result.dev and result.dev[0]["step"] == 0
    best = max(result.dev, key=lambda d: (d["MRR"], d["R@1"]))
    assert card["steps"] == best["step"]  # the kept checkpoint is the best evaluation, possibly the start
    assert card["dev_best"]["MRR"] == pytest.approx(best["MRR"])


def test_multi_positive_masking():
    scores = torch.tensor([[5.0, 4.9, 0.0], [1.0, 2.0, 0.0]])
    positives = torch.tensor([[True, True, False], [False, True, False]])
    targets = torch.tensor([0, 1])
    masked = multi_positive_listwise_loss(scores, positives, targets, True)
    plain = multi_positive_listwise_loss(scores, positives, targets, False)
    # query 0's second passage also answers it: masking removes it from the softmax instead of punishing it
    expected0 = torch.nn.functional.cross_entropy(torch.tensor([[5.0, 0.0]]), torch.tensor([0]))
    expected1 = torch.nn.functional.cross_entropy(scores[1:], torch.tensor([1]))
    assert masked.item() == pytest.approx(((expected0 + expected1) / 2).item(), rel=1e-5)
    assert plain.item() > masked.item()


def test_rerank_scores_keeps_tail_order():
    from capr.search.second_stage import rerank_scores

    def reverse(top):  # prefers the first stage's last candidate
        return -np.arange(len(top), dtype=float)[::-1]

    first = np.array([0.9, 0.1, 0.5, 0.7, 0.3])
    out = rerank_scores(first, reverse, depth=3)
    order = list(np.argsort(-out, kind="stable"))
    assert order == [2, 3, 0, 4, 1]  # top-3 (0, 3, 2) reversed, then the rest in first-stage order
    # a share fuses the two ranks among the top, as Searcher.rerank does: 0 keeps the first stage's order, and at
    # 0.4 the first stage's favourite (its rank 1, the re-ranker's 3) keeps first place
    assert list(np.argsort(-rerank_scores(first, reverse, depth=3, share=0.0), kind="stable")) == [0, 3, 2, 4, 1]
    assert list(np.argsort(-rerank_scores(first, reverse, depth=3, share=0.4), kind="stable"))[0] == 0
    assert list(np.argsort(-rerank_scores(first, reverse, depth=3, share=0.6), kind="stable"))[0] == 2


def test_bad_reranker_and_trainer_input(tmp_path, runner):
    from capr.search.second_stage import load_reranker

    with pytest.raises(QueryError, match="KIND:PATH"):
        load_reranker("nonsense")
    with pytest.raises(QueryError, match="no such model folder"):
        load_reranker(f"cross:{tmp_path / 'missing'}")
    proc = capr_cli("train", "tri", "--labels", str(tmp_path / "l.jsonl"), "--out", str(tmp_path / "m"), check=False)
    assert proc.returncode == 2 and "unknown model kind" in proc.stderr
    proc = capr_in_process(runner, "train", "bi", "--labels", str(tmp_path / "l.jsonl"), "--out", str(tmp_path / "m"),
                           check=False)
    assert proc.returncode == 2 and "labels file not found" in proc.stderr


def test_passage_context_text():
    from capr.models.context import PassageContext, contextual_text, parse_context

    assert contextual_text("It is rare.", "Zorvex syndrome", "Frequency", PassageContext.off) == "It is rare."
    assert contextual_text("It is rare.", "Zorvex syndrome", "Frequency", PassageContext.title) == "Zorvex syndrome: It is rare."
    assert (contextual_text("It is rare.", "Zorvex syndrome", "Frequency", PassageContext.title_heading)
            == "Zorvex syndrome › Frequency: It is rare.")
    # a question heading restates the query: it is left out, never replaced by the aspect label
    assert (contextual_text("It is rare.", "Zorvex syndrome", "How many people have Zorvex syndrome?",
                            PassageContext.title_heading) == "Zorvex syndrome: It is rare.")
    assert parse_context(True) is PassageContext.title_heading and parse_context(None) is PassageContext.off
    with pytest.raises(Exception, match="unknown passage context 'chapter'"):
        parse_context("chapter")


def test_context_model_indexes_passages_with_their_title(tmp_path):
    """A passage that never names its disease is found through its document title, when the model was trained
    with --context title: the index and the bi re-ranker read "title: text", as in training."""
    from capr.index import IndexWriter, load_index
    from capr.models.encoder import Encoder, EncoderConfig
    from capr.records import Document
    from capr.search.second_stage import load_reranker, reranker_text

    out = tmp_path / "bi-ctx"
    train(tiny_labels(), out, tiny_args("bi", context="title", max_steps=1), progress=False)
    assert json.loads((out / "capr.json").read_text())["args"]["context"] == "title"
    same = "It is treated with daily hydration, rest and a short course of oral steroids."
    docs = [Document(doc_id=f"doc-{i}", title=t, text=f"Treatment\n{same}") for i, t in
            enumerate(["Kalimba fever", "Zorvex syndrome", "Dunmore disease"])]
    from capr.corpus.segment import SegmenterConfig

    with IndexWriter(tmp_path / "idx", dense=EncoderConfig(model=str(out)), segmenter=SegmenterConfig(include_title=False)) as w:
        for d in docs:
            w.add(d)
    idx = load_index(tmp_path / "idx")
    enc = Encoder(EncoderConfig(model=str(out)), cache=False)
    p = idx.passage(0)
    assert enc.passage_text(p) == f"{p.title}: {p.text}"
    qv = enc.encode_queries(["Zorvex syndrome treatment"])[0]
    stored = idx.dense_scores(qv, np.array([0]))[0]
    assert stored == pytest.approx(float(enc.encode_passages([f"{p.title}: {p.text}"])[0] @ qv), abs=1e-4)
    assert stored != pytest.approx(float(enc.encode_passages([p.text])[0] @ qv), abs=1e-4)
    hits = search(idx, "Zorvex syndrome treatment", k=3, retriever="dense", aspect_boost=0)
    assert hits[0].passage.title == "Zorvex syndrome", [h.passage.title for h in hits]
    bi = load_reranker(f"bi:{out}")
    assert reranker_text(bi, p) == f"{p.title}: {p.text}"


def test_budget_schedule_decays_to_zero_at_the_last_step_the_budget_allows(monkeypatch):
    from capr.train import loop
    from capr.train.loop import BudgetSchedule

    clock = [1000.0]
    monkeypatch.setattr(loop.time, "time", lambda: clock[0])
    sched = BudgetSchedule(max_steps=1000, warmup=0.1, time_budget_min=1.0)  # 60 s at 2 s/step: ~30 steps fit
    t0 = clock[0]
    for step in range(1, 21):
        clock[0] += 2.0
        sched.observe(step, t0)
    assert 28 <= sched.horizon <= 31, sched.horizon
    assert sched.factor(sched.horizon) == 0.0 and sched.factor(sched.horizon // 2) > 0.0
    no_budget = BudgetSchedule(max_steps=1000, warmup=0.1, time_budget_min=None)
    no_budget.observe(1, t0), no_budget.observe(5, t0)
    assert no_budget.horizon == 1000 and no_budget.factor(50) == pytest.approx(0.51)


def test_merge_interpolates_a_trained_bi_encoder_with_its_start(tmp_path):
    from sentence_transformers import SentenceTransformer

    from capr.errors import BadInputError, CaprError
    from capr.models.encoder import resolve_model
    from capr.train.merge import merge_with_start

    out = tmp_path / "bi"
    train(tiny_labels(), out, tiny_args("bi", max_steps=3, lr=1e-3), progress=False)
    card = merge_with_start(out, tmp_path / "merged", 0.25)
    assert card["merged"]["alpha"] == 0.25 and card["merged"]["tensors_mixed"] > 50 and card["kind"] == "bi"

    def weight(path):
        st = SentenceTransformer(str(path), device="cpu")
        return next(v for k, v in st.state_dict().items() if k.endswith("layer.0.attention.self.query.weight")).numpy()

    start, trained, merged = weight(resolve_model("minilm")), weight(out), weight(tmp_path / "merged")
    assert not np.allclose(start, trained)
    np.testing.assert_allclose(merged, 0.75 * start + 0.25 * trained, atol=1e-6)
    with pytest.raises(CaprError, match="between 0 and 1"):
        merge_with_start(out, tmp_path / "m2", 1.5)
    (tmp_path / "notbi").mkdir()
    with pytest.raises(BadInputError, match="not a capr bi-encoder"):
        merge_with_start(tmp_path / "notbi", tmp_path / "m3", 0.5)


def test_residual_cross_encoder_starts_as_its_bi_encoder_and_moves_the_planted_answer_up(tmp_path, monkeypatch):
    """`capr train cross --first-stage BI`: before any update the re-ranker's scores are exactly the bi-encoder's
    (scaled cosine), so its dev start is the bi-encoder's; training moves the planted answer up against them."""
    from capr.models.encoder import Encoder, EncoderConfig
    from capr.search.second_stage import load_reranker

    monkeypatch.setenv("CAPR_CACHE", str(tmp_path / "cache"))
    query = "Zorvex syndrome treatment"
    gold = "Zorvex syndrome is treated with daily hydration, rest and a short course of oral steroids."
    others = ["Zorvex syndrome causes itching of the palms, night sweats and a hoarse voice in most patients.",
              "Zorvex syndrome is caused by a mutation in a single gene inherited from one parent.",
              "Kalimba fever is treated with daily hydration, rest and a short course of oral steroids."]
    enc = Encoder(EncoderConfig(model="minilm"), cache=False)
    bi = 20.0 * (enc.encode_passages([gold] + others) @ enc.encode_queries([query])[0])

    settings = dict(first_stage="minilm", batch_size=4, max_length=48, query_max_length=16, dev_fraction=0.0,
                    hard_negatives=1, question_prob=0.0, synonym_prob=0.0, seed=3)
    untouched = tmp_path / "untouched"
    train(tiny_labels(), untouched, TrainArgs.for_kind("cross", max_steps=1, lr=0.0, **settings), progress=False)
    card = json.loads((untouched / "capr.json").read_text())
    assert card["first_stage"]["folder"] == "first_stage" and (untouched / "first_stage" / "modules.json").exists()
    assert card["args"]["base_model"] == "minilm" and card["args"]["context"] == "off"
    start = load_reranker(f"cross:{untouched}").score(query, [gold] + others)
    np.testing.assert_allclose(start, bi, atol=1e-4)

    trained = tmp_path / "trained"
    result = train(tiny_labels(), trained, TrainArgs.for_kind("cross", max_steps=60, lr=5e-4, **settings), progress=False)
    assert np.mean(result.losses[-5:]) < np.mean(result.losses[:5]), result.losses
    after = load_reranker(f"cross:{trained}").score(query, [gold] + others)
    # the gold answer's lead over the best distractor grows (2.14 → 2.66 when written)
    assert after[0] - after[1:].max() > bi[0] - bi[1:].max() + 0.25, (after, bi)


def test_first_stage_must_match_the_cross_encoders_context(tmp_path, runner):
    from capr.errors import BadInputError

    args = TrainArgs.for_kind("cross", first_stage="minilm", context="title", max_steps=1, batch_size=4,
                              max_length=48, dev_fraction=0.0)
    with pytest.raises(BadInputError, match="--context off"):
        train(tiny_labels(), tmp_path / "x", args, progress=False)
    r = capr_in_process(runner, "train", "bi", "--labels", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "y"),
                        "--first-stage", str(tmp_path), check=False)
    assert r.returncode != 0 and "--first-stage is for cross-encoders" in r.stderr and "Traceback" not in r.stderr


def test_out_that_is_not_a_model_folder_is_never_replaced(tmp_path, runner):
    """`--out` naming a folder of the user's files, or a file (the labels themselves): refused before any training,
    both left as they were (the trained model used to replace them, deleting the folder's files); a capr model folder
    and an empty folder are replaced as before."""
    from capr.errors import CaprError
    from capr.labels.generate import write_labels
    from capr.train.merge import merge_with_start

    labels = tmp_path / "labels.jsonl"
    write_labels(labels, tiny_labels())
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.txt").write_text("precious\n")
    for out, match in ((mine, "not empty and is not a capr model"), (labels, "exists and is not a folder")):
        with pytest.raises(CaprError, match=match):
            train(labels, out, tiny_args("bi", max_steps=2), progress=False)
    assert (mine / "thesis.txt").read_text() == "precious\n" and labels.is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # nothing set aside
    proc = capr_in_process(runner, "train", "bi", "--labels", str(labels), "--out", str(mine), "--max-steps", "1",
                           check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "refusing to replace it" in proc.stderr
    model = tmp_path / "model"
    (tmp_path / "empty").mkdir()
    for out in (model, model, tmp_path / "empty"):  # new, a capr model again, an empty folder
        train(labels, out, tiny_args("bi", max_steps=2), progress=False)
        assert (out / "capr.json").is_file()
    with pytest.raises(CaprError, match="refusing to replace it"):
        merge_with_start(model, mine, 0.5)
    assert (mine / "thesis.txt").read_text() == "precious\n"


SETTINGS_NO_TRAINING_CAN_RUN_WITH = [
    ("--time-budget", "0", "--time-budget must be positive"), ("--time-budget", "-1", "--time-budget must be positive"),
    ("--eval-every", "0", "--eval-every must be at least 1"), ("--batch-size", "0", "--batch-size must be at least 1"),
    ("--lr", "-0.001", "--lr must be a number >= 0")]


@pytest.mark.parametrize("option, value, message", SETTINGS_NO_TRAINING_CAN_RUN_WITH)
def test_settings_no_training_can_run_with_are_one_line_and_write_no_model(tmp_path, runner, option, value, message):
    """A zero or negative budget trained one step and saved it (exit 0); a zero --eval-every or --batch-size and a
    negative --lr were tracebacks, after the starting checkpoint had been saved as the model."""
    from capr.labels.generate import write_labels

    labels = tmp_path / "labels.jsonl"
    write_labels(labels, tiny_labels())
    real = (option, value, message) == SETTINGS_NO_TRAINING_CAN_RUN_WITH[0]  # the real command once, the rest in process
    proc = capr_real_or_in_process(runner, real, "train", "bi", "--labels", str(labels), "--out", str(tmp_path / "m"),
                                   "--max-steps", "2", option, value, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and message in proc.stderr
    assert not (tmp_path / "m").exists()


NUMERIC_TRAINING_OPTIONS = [
    ("bi", "--max-length", "0", "--max-length must be at least 1, got 0"),
    ("bi", "--hard-negatives", "-1", "--hard-negatives must be 0 or more, got -1"),
    ("bi", "--question-prob", "1.5", "--question-prob must be between 0 and 1, got 1.5"),
    ("bi", "--seed", "-1", "--seed must be between 0 and 4294967295, got -1"),
    ("tsdae", "--max-length", "0", "--max-length must be at least 1, got 0"),
    ("cases", "--top-k", "0", "--top-k must be at least 1, got 0")]


@pytest.mark.parametrize("kind, option, value, message", NUMERIC_TRAINING_OPTIONS)
def test_numeric_training_options_out_of_range_are_refused_before_any_work(tmp_path, demo_dir, runner, kind, option,
                                                                          value, message):
    """A zero --max-length trained (the default silently took its place for tsdae and cases), a negative
    --hard-negatives sampled none, a share above 1 was used as is and a negative --seed was a numpy traceback after the
    labels had been read: each is one line naming the option, before anything is read or written."""
    from capr.errors import CaprError
    from capr.labels.generate import write_labels

    labels = tmp_path / "labels.jsonl"
    write_labels(labels, tiny_labels())
    where = {"bi": ("--labels", str(labels)), "tsdae": (str(demo_dir),), "cases": ("--data-dir", str(tmp_path / "none"))}
    real = (kind, option, value, message) == NUMERIC_TRAINING_OPTIONS[0]  # the real command once, the rest in process
    proc = capr_real_or_in_process(runner, real, "train", kind, *where[kind], "--out", str(tmp_path / "m"), "--max-steps",
                                   "1", option, value, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    assert message in proc.stderr and not (tmp_path / "m").exists()
    with pytest.raises(CaprError, match="--poly-codes must be at least 1"):  # the Python API refuses them too
        TrainArgs.for_kind("poly", poly_codes=0)
    with pytest.raises(CaprError, match="--max-length must be at least 1"):
        train(labels, tmp_path / "m", tiny_args("bi", max_length=0), progress=False)
    assert not (tmp_path / "m").exists()
