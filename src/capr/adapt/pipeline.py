"""`capr adapt`: self-supervised adaptation of the dense retriever to a user's own unlabeled corpus, in one call.

labels (headings → aspects, NER → entities) → a bi-encoder trained from the start model with document context
(some passages read without it, so title-less corpora still work) → weight-space merges with the start model
(WiSE-FT) → a gate that keeps a candidate only if it beats the start model on held-out self-labelled queries and
is at or above it on every free-text check → the index built with the kept model. The decision and every number
behind it go into the report, the kept model's card and the index manifest."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Sequence

from capr.adapt.checks import (
    REPORTED,
    SELF,
    SearchedCheck,
    free_text_check,
    inverse_cloze_check,
    outside_sets,
    searched_labels_check,
    self_labelled_check,
)
from capr.adapt.gate import (START, Candidate, choose_fusion, choose_second_stage, fusion_with_share, gate,
                             reranker_member, score_candidates)
from capr.corpus import Format, ReadReport, read_documents
from capr.corpus.segment import SegmenterConfig
from capr.errors import CaprError
from capr.eval.significance import paired_randomisation_p
from capr.search.config import record_profile
from capr.records import Document

REPORT_FILE = "adapt.json"


class KeepPolicy(str, Enum):
    auto = "auto"  # the gate decides
    trained = "trained"  # keep the fully trained model whatever the gate says (experiments, tests)
    start = "start"  # keep the start model (labels and training only, e.g. to inspect them)


@dataclass
class AdaptConfig:
    corpora: list[str]
    out: str  # the index folder; its work folder (labels, models, report) is OUT + ".adapt"
    format: str = Format.auto.value
    time_budget_min: float = 30.0  # training and gate; building the index comes on top
    start_model: str = "minilm"  # the zero-shot model the gate compares with, and the merges mix with
    init_model: str | None = None  # where training starts (`--add`: the model kept before); None: start_model
    max_tokens: int = 200  # passage length, in labels and in the index alike
    context: str = "title"
    context_dropout: float = 0.25
    ict_prob: float = 0.3  # inverse-cloze share of training queries (free-text matching kept while training)
    alphas: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25)  # trained share of the candidates (1: the trained model itself)
    free_text: tuple[str, ...] = ()  # extra free-text dev sets: "mediqa2019-train" or JSONL files
    # a data folder whose question pairs (capr.labels.questions: MedQuAD, RQE, Curai MQP) are trained on beside
    # the corpus' labels; the gate is the same (held-out labels and free-text checks against the start model)
    question_pairs: str | None = None
    data_dir: str | None = None
    exclude_medquad_test: str | None = None  # data folder holding medquad_cdv_test: its documents are left out
    split: str | None = None  # mtsamples-capr "train" / "test"
    keep: str = KeepPolicy.auto.value
    min_gain: float = 1.0  # MRR points a candidate must gain on held-out labels
    # free-text checks: a candidate may trail the start model by at most this many points (non-inferiority margin;
    # a ~200-query check moves by about a point between equally good models, the regressions to stop are 5-15)
    free_text_margin: float = 1.0
    # dense shares of the hybrid fusion (BM25 : dense reciprocal-rank weights) the kept model may search with; the
    # default pipeline's share is one of them, and another is chosen only when it gains min_gain on held-out labels
    dense_weights: tuple[float, ...] = (0.67, 0.8, 0.9, 1.0)
    max_steps: int = 100_000  # the time budget stops training first
    batch_size: int | None = None  # None: the bi-encoder's default
    min_labels: int = 64
    # auto: an ensemble second stage (the start model + the trained one, capr.search.second_stage.EnsembleReranker) is
    # gated like a candidate and recorded in the index when it passes; off: no second stage
    second_stage: str = "auto"
    seed: int = 13
    skip_bad: bool = False

    @property
    def work_dir(self) -> Path:
        return Path(str(Path(self.out)) + ".adapt")


@dataclass
class AdaptReport:
    config: dict[str, Any]
    documents: int = 0
    labeled_passages: int = 0
    held_out_passages: int = 0
    training: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    candidates: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # hybrid, as searched
    candidates_dense: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # the model alone
    fusion: dict[str, Any] = field(default_factory=dict)  # the kept model's fusion weights, and the table behind them
    paired: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # candidate → check → p-values
    kept: str = START
    kept_model: str = "minilm"
    reason: str = ""
    # the second stage's decision: kept or not, its spec, why, and every check with and without it
    second_stage: dict[str, Any] = field(default_factory=dict)
    index: dict[str, Any] = field(default_factory=dict)
    minutes: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_corpus(config: AdaptConfig, report: ReadReport, log: Callable[[str], None] = print) -> list[Document]:
    """The documents `capr adapt` trains on and indexes: every corpus, less the medquad-cdv test documents and
    outside the split when asked."""
    from capr.labels.splits import exclude_test_documents, medquad_test_exclusion, select_split

    docs: list[Document] = []
    for source in config.corpora:
        docs += list(read_documents(source, config.format, report))
    if config.exclude_medquad_test:
        exclusion = medquad_test_exclusion(config.exclude_medquad_test)
        docs = list(exclude_test_documents(docs, exclusion))
        log(f"left out {exclusion.excluded_docs} medquad-cdv test documents")
    if config.split:
        docs = list(select_split(docs, config.split))
    if not docs:
        raise CaprError(f"no documents in {', '.join(config.corpora)}")
    return docs


def _labels(docs: Sequence[Document], config: AdaptConfig, path: Path) -> int:
    from capr.labels import LabelConfig, LabelGenerator, write_labels

    exclusion = None
    if config.exclude_medquad_test:
        from capr.labels.splits import medquad_test_exclusion

        exclusion = medquad_test_exclusion(config.exclude_medquad_test)
    gen = LabelGenerator(LabelConfig(segmenter=SegmenterConfig(max_tokens=config.max_tokens)),
                         exclude_passage=exclusion.is_test_text if exclusion is not None else None)
    return write_labels(path, gen(docs))


def _question_records(config: AdaptConfig, log: Callable[[str], None]) -> list[Any]:
    """The question pairs trained on beside the labels (none without ``question_pairs``). Their held-out share is
    the trainer's, by group; the gate's checks come from the corpus' labels alone."""
    if not config.question_pairs:
        return []
    from capr.labels.questions import as_labeled, question_pairs

    pairs = as_labeled(question_pairs(config.question_pairs))
    log(f"{len(pairs):,} question pairs from {config.question_pairs} trained on beside the labels")
    return pairs


def _finished_training(trained_dir: Path, args: Any) -> dict[str, Any] | None:
    """The training summary of a model already in `trained_dir` that these arguments (budget aside) trained."""
    from capr.models.card import read_card

    card = read_card(trained_dir) if (trained_dir / "capr.json").exists() else {}
    if not card or card.get("kind") != "bi" or "steps_run" not in card:  # steps_run: written when training ended
        return None
    mine = {k: v for k, v in args.to_dict().items() if k != "time_budget_min"}
    theirs = {k: v for k, v in (card.get("args") or {}).items() if k != "time_budget_min"}
    if mine != theirs:
        return None
    return {"model": str(trained_dir), "steps": card.get("steps_run"), "minutes": round(card.get("seconds", 0) / 60, 2),
            "stopped": card.get("stopped"), "kept_step": card.get("best_step", card.get("steps")),
            "dev_start": card.get("dev_start"), "dev_best": card.get("dev_best"), "args": card.get("args")}


def held_out_fraction(n_labels: int) -> float:
    """5 % of a large corpus is plenty; a small one needs a larger share for a gate that means anything (the
    trainer's early stopping uses the same documents)."""
    return min(0.25, max(0.05, 400 / max(1, n_labels)))


def gate_checks(records: Sequence[Any], args: Any, config: AdaptConfig,
                documents: Sequence[Document] = ()) -> tuple[list[Any], list[Any]]:
    """The gate's checks and the held-out labeled passages they come from: the trainer's dev split (`args`:
    the TrainArgs training uses), never trained on. What a candidate must gain is measured by searching held-out
    documents as the index will (``SearchedCheck``); the re-ranking of a BM25 pool is reported beside it."""
    from capr.train.data import TrainingSet

    held_out = TrainingSet(records, args).dev if records else []
    checks: list[Any] = []
    n_q, pool = 192, 384  # per check: enough queries for a paired test, few enough to score six candidates
    if held_out:
        searched = searched_labels_check(held_out, documents, config.max_tokens, n_q) if documents else None
        checks.append(searched)
        checks.append(self_labelled_check(held_out, n_q, pool, titles=True,
                                          side=REPORTED if searched is not None else SELF))
        if any(lp.title for lp in held_out):  # without titles anywhere, the title-less check would repeat the first
            checks.append(self_labelled_check(held_out, n_q, pool, titles=False))
        checks.append(inverse_cloze_check(held_out, n_q, pool))
    out = [c for c in checks if c is not None]
    for spec in config.free_text:
        out.append(free_text_check(spec, config.data_dir))
    for spec in outside_sets(config.question_pairs, config.free_text, config.data_dir):
        out.append(free_text_check(spec, config.data_dir or config.question_pairs))
    return out, held_out


MIN_TRAIN_MIN = 0.5  # minutes of training below which a run cannot show anything
SECOND_STAGE_DIR = "second-stage"  # OUT.adapt/…: the trained member of the recorded ensemble (stable across --add)


def adapt(config: AdaptConfig, log: Callable[[str], None] = print, progress: bool = True,
          index_progress: Any = None) -> AdaptReport:
    """Runs the whole adaptation and returns its report (also written to OUT.adapt/adapt.json and recorded in the
    index manifest and the kept model's card)."""
    t_start = time.time()
    keep = check_config(config)
    work = config.work_dir
    report = AdaptReport(config=asdict(config))
    docs = read_corpus(config, ReadReport(skip_bad=config.skip_bad), log)
    # made once the corpus is read: a corpus that cannot be read leaves no empty OUT.adapt/ behind (what a
    # later step leaves in it is kept on purpose: a rerun reuses labels and a finished training)
    work.mkdir(parents=True, exist_ok=True)
    report.documents = len(docs)
    records, same_labels = label_corpus(docs, config, report, log)
    candidates, checks = train_candidates(docs, records, same_labels, config, report, log, progress)
    kept = keep_candidate(candidates, checks, keep, config, report, log)
    save_kept_model(kept, candidates[0], config, report)
    decide_second_stage(kept, candidates, checks, config, report, log)
    _write_report(work / REPORT_FILE, report)  # the gate's numbers survive an interrupted index build
    build_index(docs, config, report, log, index_progress)
    report.minutes["total"] = round((time.time() - t_start) / 60, 2)
    _write_report(work / REPORT_FILE, report)
    return report


def check_config(config: AdaptConfig) -> KeepPolicy:
    """Refuses settings no adaptation can use, and an --out that cannot be written, before any work (minutes of
    labels, training and the gate); returns the keep policy."""
    keep = KeepPolicy(config.keep)
    if config.time_budget_min <= 0:
        raise CaprError("--time-budget must be positive (minutes)")
    from capr.train.args import OptionRange as R
    from capr.train.args import check_options

    check_options([("--max-tokens", config.max_tokens, R.count), ("--max-steps", config.max_steps, R.count),
                   ("--batch-size", config.batch_size, R.count), ("--context-dropout", config.context_dropout, R.share),
                   ("--ict-prob", config.ict_prob, R.share), ("--free-text-margin", config.free_text_margin, R.rate),
                   ("--seed", config.seed, R.seed)])
    if any(not 0 < a <= 1 for a in config.alphas):
        raise CaprError("merge weights (--alphas) must be in (0, 1]")
    work = config.work_dir
    # --out is refused before the labels, the training and the gate (minutes), not when the index is written at the end
    from capr.index.directory import check_root

    check_root(Path(config.out))
    if work.exists() and not work.is_dir():
        raise CaprError(f"{work}: exists and is not a directory (capr adapt keeps its labels, models and report there)")
    return keep


def label_corpus(docs: Sequence[Document], config: AdaptConfig, report: AdaptReport,
                 log: Callable[[str], None]) -> tuple[list[Any], bool]:
    """The corpus' labels (OUT.adapt/labels.jsonl), and whether they are the ones an earlier run wrote."""
    from capr.labels.generate import read_labels
    from capr.train.loop import file_sha1

    labels_path = config.work_dir / "labels.jsonl"
    log(f"labelling {len(docs):,} documents")
    t0 = time.time()
    previous_labels = file_sha1(labels_path)
    report.labeled_passages = _labels(docs, config, labels_path)
    same_labels = previous_labels != "" and previous_labels == file_sha1(labels_path)
    report.minutes["labels"] = round((time.time() - t0) / 60, 2)
    log(f"{report.labeled_passages:,} labeled passages ({report.minutes['labels']} min)")
    return list(read_labels(labels_path)), same_labels


def train_candidates(docs: Sequence[Document], records: list[Any], same_labels: bool, config: AdaptConfig,
                     report: AdaptReport, log: Callable[[str], None],
                     progress: bool = True) -> tuple[list[Candidate], list[Any]]:
    """The gate's checks, and its candidates: the start model, and (with enough labels) the model trained on them
    within the budget left after the gate, with its merges with the start model."""
    from capr.train import ModelKind, TrainArgs

    args = TrainArgs.for_kind(ModelKind.bi, base_model=config.init_model or config.start_model, context=config.context,
                              context_dropout=config.context_dropout, ict_prob=config.ict_prob, max_steps=config.max_steps,
                              seed=config.seed, batch_size=config.batch_size, question_pairs=config.question_pairs,
                              # a question pair among random passages is too easy to learn from; among its
                              # document's other answers it is not
                              group_batches=bool(config.question_pairs))
    args.dev_fraction = held_out_fraction(len(records))
    checks, held_out = gate_checks(records, args, config, docs)
    report.held_out_passages = len(held_out)
    report.checks = [{"name": c.name, "side": c.side, "primary": c.primary, "queries": len(c), "what": c.description}
                     for c in checks]
    candidates = [Candidate(START, config.start_model, 0.0)]
    if report.labeled_passages < config.min_labels or len(held_out) < 4:
        report.reason = (f"too few labels to train on ({report.labeled_passages} labeled passages, "
                         f"{len(held_out)} held out; at least {config.min_labels} needed)")
        if not report.labeled_passages and docs:
            from capr.corpus.segment import detect_headings

            if not any(d.sections or detect_headings(d.text) for d in docs):
                # say why: a label's aspect is its section's heading, and this corpus has none
                report.reason += (f"; none of the {len(docs)} documents has section headings, and labels take "
                                  "their aspect from them (the index is built; --aspect searches get no section prior)")
        log(report.reason)
        return candidates, checks
    # the gate encodes every check once per candidate: its share of the budget grows with the candidates
    gate_passages = sum((c.labeled_passages if isinstance(c, SearchedCheck) else len(c.pool)) + len(c)
                        for c in checks) * (len(config.alphas) + 1)
    gate_min = min(config.time_budget_min * 0.3, gate_passages / 25 / 60)  # ~25 passages/s with context, CPU
    # the budget covers training and the gate (README): reading and labelling the corpus come on top
    budget = config.time_budget_min - gate_min
    if budget < MIN_TRAIN_MIN:
        raise CaprError(f"--time-budget {config.time_budget_min:g} min leaves {max(budget, 0):.1f} min to train after "
                        f"the gate (~{gate_min:.1f} min); give at least {gate_min + MIN_TRAIN_MIN:.1f}")
    args.time_budget_min = budget
    trained_dir = config.work_dir / "trained"
    report.training = _trained(trained_dir, records, args, same_labels, config, log, progress)
    from capr.train.merge import merge_with_start

    candidates.append(Candidate("trained", str(trained_dir), 1.0))
    for alpha in config.alphas:
        if alpha < 1.0:
            merged = config.work_dir / f"merged-{alpha:g}"
            merge_with_start(trained_dir, merged, alpha, start=config.start_model)
            candidates.append(Candidate(f"merge α={alpha:g}", str(merged), alpha))
    return candidates, checks


def _trained(trained_dir: Path, records: list[Any], args: Any, same_labels: bool, config: AdaptConfig,
             log: Callable[[str], None], progress: bool) -> dict[str, Any]:
    """The bi-encoder trained on the labels (and question pairs) into ``trained_dir``, or the one an earlier run on
    the same labels with the same settings trained there; the training's summary for the report."""
    from capr.train import train

    done = _finished_training(trained_dir, args) if same_labels else None
    if done is not None:
        # an earlier run on the same labels with the same settings trained it (and was interrupted later,
        # e.g. while indexing): its model is reused, not retrained
        log(f"reusing {trained_dir}: trained on the same labels with the same settings")
        return {**done, "reused": True}
    log(f"training the bi-encoder for at most {args.time_budget_min:.1f} min")
    result = train(records + _question_records(config, log), trained_dir, args, progress=progress, log=log)
    return {"model": str(trained_dir), "steps": result.steps, "minutes": round(result.seconds / 60, 2),
            "stopped": result.stopped, "kept_step": result.card.get("best_step"), "dev_start": result.card.get("dev_start"),
            "dev_best": result.best, "args": args.to_dict()}


def keep_candidate(candidates: list[Candidate], checks: Sequence[Any], keep: KeepPolicy, config: AdaptConfig,
                   report: AdaptReport, log: Callable[[str], None]) -> Candidate:
    """Every candidate scored on every check, the one kept (the gate's, or as --keep asks), and, for a model other
    than the start model, the hybrid fusion's dense share it searches with."""
    t0 = time.time()
    score_candidates(candidates, checks, log, config.work_dir / "gate")
    report.candidates = {c.name: c.scores.summary() for c in candidates}
    report.candidates_dense = {c.name: c.dense.summary() for c in candidates}
    report.minutes["gate"] = round((time.time() - t0) / 60, 2)
    start = candidates[0]
    for cand in candidates[1:]:
        report.paired[cand.name] = {c.name: {m: round(paired_randomisation_p(cand.scores.per_query[c.name][m],
                                                               start.scores.per_query[c.name][m]), 4)
                                             for m in ("P@1", "MAP", "nDCG@10")} for c in checks}
    if len(candidates) == 1:
        kept = start
    elif keep is KeepPolicy.trained:
        kept = next(c for c in candidates if c.alpha == 1.0)
        _, why = gate(candidates, checks, config.min_gain, config.free_text_margin)
        report.reason = f"kept the trained model as asked (--keep trained); the gate alone would say: {why}"
    elif keep is KeepPolicy.start:
        kept = start
        report.reason = "kept the start model as asked (--keep start)"
    else:
        kept, report.reason = gate(candidates, checks, config.min_gain, config.free_text_margin)
    report.kept = kept.name
    log(f"gate: {report.reason}")
    if kept is not start:
        report.fusion = choose_fusion(kept, start, checks, config.dense_weights, config.min_gain,
                                      config.free_text_margin)
        log(f"fusion: BM25 : dense = {report.fusion['weights'][0]:g} : {report.fusion['weights'][1]:g} "
            f"({report.fusion['reason']})")
    return kept


def save_kept_model(kept: Candidate, start: Candidate, config: AdaptConfig, report: AdaptReport) -> None:
    """The kept model copied to OUT.adapt/model with the gate's decision in its card (an earlier run's copy removed
    when the start model is kept)."""
    from capr.train.loop import atomic_save_dir

    model_dir = config.work_dir / "model"
    if kept is not start:
        from capr.models.card import README_FILE, read_card, write_card

        card = {**read_card(Path(kept.model)), "adapted": {"kept": kept.name, "alpha": kept.alpha,
                                                         "reason": report.reason, "candidates": report.candidates}}

        def write(tmp: Path) -> None:
            import shutil

            shutil.copytree(kept.model, tmp, dirs_exist_ok=True)
            readme = Path(kept.model) / README_FILE
            write_card(tmp, card, (readme.read_text() if readme.exists() else "")
                       + f"\n\n## capr adapt\n\nKept `{kept.name}`: {report.reason}\n")

        atomic_save_dir(model_dir, write)
        report.kept_model = str(model_dir.resolve())
    else:
        report.kept_model = config.start_model
        if model_dir.exists():  # an earlier run's kept model: this index does not use it, nor does --add
            import shutil

            shutil.rmtree(model_dir)


def decide_second_stage(kept: Candidate, candidates: list[Candidate], checks: Sequence[Any], config: AdaptConfig,
                        report: AdaptReport, log: Callable[[str], None]) -> None:
    """Whether the index records the ensemble second stage (the start model + the trained one, a copy of which is
    kept in OUT.adapt/second-stage), by the gate's rule (:func:`capr.adapt.gate.choose_second_stage`)."""
    from capr.train.loop import atomic_save_dir

    trained = next((c for c in candidates if c.alpha == 1.0), None)
    second_dir = config.work_dir / SECOND_STAGE_DIR
    if trained is None or config.second_stage == "off":
        report.second_stage = {"kept": False, "reason": "no trained model" if trained is None else "--second-stage off"}
    else:
        from capr.search.second_stage import DEFAULT_RERANK_DEPTH

        t0 = time.time()
        report.second_stage = choose_second_stage(kept, trained, config.start_model, checks,
                                                  fusion_with_share(report.fusion.get("dense_weight")),
                                                  config.min_gain, config.free_text_margin, DEFAULT_RERANK_DEPTH, log)
        report.minutes["second_stage"] = round((time.time() - t0) / 60, 2)
        log(f"second stage {'kept' if report.second_stage['kept'] else 'not kept'}: {report.second_stage['reason']}")
    if report.second_stage.get("kept"):
        import shutil

        # the index names a copy: a later --add retrains OUT.adapt/trained while this index still searches with it
        atomic_save_dir(second_dir, lambda tmp: shutil.copytree(trained.model, tmp, dirs_exist_ok=True))
        report.second_stage["spec"] = f"{reranker_member(config.start_model)},{reranker_member(str(second_dir))}"
    elif second_dir.exists():
        import shutil

        shutil.rmtree(second_dir)


def build_index(docs: Sequence[Document], config: AdaptConfig, report: AdaptReport, log: Callable[[str], None],
                index_progress: Any = None) -> None:
    """OUT built with the kept model, recording the search profile the gate kept (its fusion, its second stage),
    and the second stage's passage vectors encoded into the embedding cache."""
    from capr.index.directory import DEFAULT_LOCK_WAIT_S
    from capr.index.writer import IndexWriter
    from capr.models.encoder import EncoderConfig

    t0 = time.time()
    log(f"building the index with {report.kept_model}")
    dense = EncoderConfig(model=report.kept_model)
    writer = IndexWriter(config.out, SegmenterConfig(max_tokens=config.max_tokens), dense=dense,
                         report=ReadReport(skip_bad=config.skip_bad), progress=index_progress,
                         lock_wait_s=DEFAULT_LOCK_WAIT_S)  # a server of OUT may be writing it
    # `capr search`, the service and `capr eval --model OUT` search with what the gate kept unless told otherwise
    kept_second = report.second_stage.get("kept")
    record_profile(writer, fusion={"method": "rrf", "weights": report.fusion["weights"]} if report.fusion else None,
                   reranker=report.second_stage["spec"] if kept_second else None,
                   rerank_depth=report.second_stage.get("depth") if kept_second else None,
                   adapted={"kept": report.kept, "reason": report.reason, "report": str(config.work_dir / REPORT_FILE)})
    seen: set[str] = set()
    repeated = 0
    with writer as w:
        for doc in docs:
            if doc.doc_id in seen:  # a corpus that repeats an id (MedQuAD does): the first one is indexed
                repeated += 1
                continue
            seen.add(doc.doc_id)
            w.add(doc)
    if repeated:
        log(f"{repeated} document(s) repeating an earlier id were not indexed again")
    report.index = {"dir": str(config.out), "documents": len(seen), "repeated_ids": repeated, "passages": writer.n_passages,
                    "model": report.kept_model}
    report.minutes["index"] = round((time.time() - t0) / 60, 2)
    if report.second_stage.get("kept"):
        from capr.index import load_index
        from capr.search.second_stage import load_reranker, warm_passage_vectors

        t0 = time.time()
        log("encoding the index's passages for the second stage (its vectors go to the embedding cache)")
        if index_progress is not None:
            index_progress(f"encoding {writer.n_passages}")
        warm_passage_vectors(load_reranker(report.second_stage["spec"]), load_index(config.out),
                             getattr(index_progress, "advance_encoding", None))
        report.minutes["second_stage_vectors"] = round((time.time() - t0) / 60, 2)


def _write_report(path: Path, report: AdaptReport) -> None:
    from capr.index.atomic import write_bytes

    write_bytes(path, json.dumps(report.to_dict(), ensure_ascii=False, indent=1).encode("utf-8"))


def report_path(out: str | Path) -> Path:
    return Path(str(Path(out)) + ".adapt") / REPORT_FILE


def read_report(out: str | Path) -> dict[str, Any]:
    """The report of the `capr adapt` run that built ``out``; one clear error when it is missing or damaged (a
    truncated or hand-edited file was a traceback of `capr adapt --add`)."""
    from capr.corpus.files import read_error_reason

    path = report_path(out)
    if not path.exists():
        raise CaprError(f"{out} was not built by `capr adapt` (no {path})")
    rebuild = f"run `capr adapt` without --add to build {out} again"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise CaprError(f"{path}: cannot read the `capr adapt` report ({read_error_reason(e)}); {rebuild}") from None
    except (ValueError, RecursionError) as e:
        raise CaprError(f"{path}: the `capr adapt` report is not valid JSON ({e}); {rebuild}") from None
    if not isinstance(report, dict) or not isinstance(report.get("config"), dict):
        raise CaprError(f"{path}: not a `capr adapt` report (no \"config\" object); {rebuild}")
    return report


def config_for_more(out: str | Path, more: Sequence[str], time_budget_min: float | None = None) -> AdaptConfig:
    """`capr adapt --add MORE`: the earlier run's settings over its corpora and MORE, training from the model it
    kept (its labels and the gate are redone over everything; the gate still compares with the start model)."""
    previous = read_report(out)
    fields = AdaptConfig.__dataclass_fields__
    try:
        config = AdaptConfig(**{k: v for k, v in previous["config"].items() if k in fields})
        config.corpora = list(config.corpora) + [str(m) for m in more]
        config.alphas = tuple(config.alphas)
        config.free_text = tuple(config.free_text)
    except (TypeError, ValueError, CaprError) as e:  # a setting missing, of the wrong type or out of range
        raise CaprError(f"{report_path(out)}: its \"config\" is not one `capr adapt` can continue ({e}); run "
                        f"`capr adapt` without --add to build {out} again") from None
    if previous.get("kept") != START:
        # a copy of the kept model: the run replaces OUT.adapt/model, which training must not read from meanwhile
        import shutil

        warm = config.work_dir / "previous-model"
        shutil.rmtree(warm, ignore_errors=True)
        shutil.copytree(previous["kept_model"], warm)
        config.init_model = str(warm)
    if time_budget_min is not None:
        config.time_budget_min = time_budget_min
    return config


__all__ = ["AdaptConfig", "AdaptReport", "KeepPolicy", "adapt", "build_index", "check_config", "config_for_more",
           "decide_second_stage", "gate_checks", "held_out_fraction", "keep_candidate", "label_corpus", "read_corpus",
           "read_report", "save_kept_model", "train_candidates"]
