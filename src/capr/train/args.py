"""Training configuration shared by every capr trainer."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from capr.records import SEED_MAX, OptionRange, check_option, check_options  # noqa: F401 (the trainers' names)


class ModelKind(str, Enum):
    bi = "bi"
    poly = "poly"
    cross = "cross"


@dataclass
class TrainArgs:
    kind: ModelKind = ModelKind.bi
    base_model: str = "minilm"  # "minilm" (bundled), any HF id or local path
    max_steps: int = 300
    time_budget_min: float | None = None  # stop (and keep the best checkpoint) after this many minutes
    batch_size: int = 32
    lr: float = 5e-5
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_length: int = 128  # passage tokens
    query_max_length: int = 48
    scale: float = 20.0  # cosine → logits (sentence-transformers' MNR default)
    shared: bool = True  # bi: one encoder for queries and passages, told apart by markers
    query_marker: str = "[QUERY] "
    passage_marker: str = "[PASSAGE] "
    multi_positive: bool = True  # in-batch passages that also answer the sampled query are masked, not punished
    hard_negatives: int = 1  # BM25 negatives per query (cross: per positive group)
    sentence_selection: bool = True  # SPBERTQA: long passages keep their BM25-best sentences, not their head
    context: str = "off"  # off | title | title+heading: what of its document a passage is read with
    # share of training passages read without their context: corpora (and indexes) whose documents have no titles
    # must not meet an input format the model never saw
    context_dropout: float = 0.0
    # share of training queries that are a sentence of their passage, which is read without it (the inverse cloze
    # task, Lee et al. 2019): free-text matching the ⟨entity, aspect⟩ queries alone would let the model forget
    ict_prob: float = 0.0
    question_prob: float = 0.3  # share of queries written as questions (templates or the corpus' own questions)
    title_prob: float = 0.6  # chance of sampling the document's title entity when the passage has others
    synonym_prob: float = 0.3  # chance of writing the aspect with one of its synonyms
    # cross: a trained bi-encoder (folder) the cross-encoder re-ranks. The cross-encoder then learns a correction
    # to that bi-encoder's scores (its head starts at zero, so step 0 ranks exactly as the bi-encoder), on hard
    # negatives from the bi-encoder's own top candidates, and is saved with it
    first_stage: str | None = None
    # batches of whole documents' passages (shuffled by document), not of random passages: in-batch negatives
    # then include the same document's other passages
    group_batches: bool = False
    # a data folder whose question pairs (capr.labels.questions) are trained on beside the labels; kept in the card
    question_pairs: str | None = None
    poly_codes: int = 16
    dev_fraction: float = 0.05  # documents held out for early stopping
    dev_queries: int = 256
    eval_every: int = 50
    patience: int = 4  # evaluations without dev improvement before stopping
    seed: int = 13
    device: str | None = None  # None: cuda when available

    @classmethod
    def for_kind(cls, kind: "ModelKind | str", **overrides: Any) -> "TrainArgs":
        """The arguments `capr train KIND` starts from: the dataclass defaults with KIND_DEFAULTS on top, then
        `overrides`. An override of None keeps the default (so unset command-line options can be passed through);
        no field whose default is not None needs None."""
        kind = ModelKind(kind)
        unknown = set(overrides) - set(cls.__dataclass_fields__)
        if unknown:
            raise TypeError(f"TrainArgs has no field(s) {', '.join(sorted(unknown))}")
        given = {k: v for k, v in overrides.items() if v is not None}
        if given.get("first_stage") and kind is ModelKind.cross:
            # a residual cross-encoder starts from its bi-encoder's transformer and reads passages as it does
            from capr.models.card import card_context, read_card
            from capr.models.loading import resolve_model

            given.setdefault("base_model", given["first_stage"])
            given.setdefault("context", card_context(read_card(resolve_model(given["first_stage"]))).value)
        args = cls(**{**KIND_DEFAULTS[kind], **given, "kind": kind})
        args.check()
        return args

    def check(self) -> None:
        """Refuses values no training can use, before any is read or written (the loop's own settings, steps,
        rate, budget, evaluation and seed, are checked by capr.train.loop.check_loop_args)."""
        R = OptionRange
        check_options([("--batch-size", self.batch_size, R.count), ("--max-length", self.max_length, R.count),
                       ("--query-max-length", self.query_max_length, R.count),
                       ("--hard-negatives", self.hard_negatives, R.count0), ("--poly-codes", self.poly_codes, R.count),
                       ("--context-dropout", self.context_dropout, R.share), ("--ict-prob", self.ict_prob, R.share),
                       ("--question-prob", self.question_prob, R.share), ("--seed", self.seed, R.seed)])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = ModelKind(self.kind).value
        return d


# Training defaults per model kind (what `capr train KIND` and TrainArgs.for_kind use; the dataclass defaults alone
# are a bi-encoder's, apart from sentence selection). A cross-encoder reads every (query, passage) pair, so it
# trains on smaller batches at a lower learning rate, with more hard negatives per query, and selects the
# sentences of long passages that matter for the query; bi- and poly-encoders encode passages without the query at
# indexing, so they must learn from what selection-free indexing will show them.
KIND_DEFAULTS: dict[ModelKind, dict[str, Any]] = {
    ModelKind.bi: {"batch_size": 32, "lr": 5e-5, "hard_negatives": 1, "sentence_selection": False},
    ModelKind.poly: {"batch_size": 32, "lr": 5e-5, "hard_negatives": 1, "sentence_selection": False},
    ModelKind.cross: {"batch_size": 8, "lr": 3e-5, "hard_negatives": 2, "sentence_selection": True},
}
