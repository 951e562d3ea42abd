"""Training for the similar-case pipeline: a TSDAE-adapted encoder, a cross-encoder pre-trained on question
similarity (RQE), and its fine-tuning by distant supervision from multiple-choice questions.

Both trainers run capr's one training loop (capr.train.loop): ``max_steps`` and ``time_budget_min``, a progress
bar, the folder replaced atomically, and a model card (``capr.json`` + README.md)."""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from capr._version import __version__
from capr.errors import BadInputError, CaprError

if TYPE_CHECKING:
    from capr.cases.candidates import CandidateSet
    from capr.cases.data import MCQuestion
    from capr.train.loop import TrainResult

Log = Callable[[str], None]


class CaseStage(str, Enum):
    candidates = "candidates"  # steps 1-2 for the S+/S- questions, saved (train elsewhere with --candidates)
    pretrain = "pretrain"  # cross-encoder on RQE similarity pairs
    distant = "distant"  # fine-tune it on S+ / S- from multiple-choice questions
    all = "all"


@dataclass
class TsdaeArgs:
    base_model: str = "minilm"
    max_steps: int = 1000
    time_budget_min: float | None = None
    batch_size: int = 8  # the TSDAE paper's
    lr: float = 3e-5  # the TSDAE paper's
    max_length: int = 96  # tokens per training sentence
    del_ratio: float = 0.6  # share of words deleted from the input
    max_sentences: int = 100_000
    seed: int = 13
    device: str | None = None


@dataclass
class PairArgs:
    """A cross-encoder trained pointwise with binary cross-entropy (the paper: batch 8, lr 2e-5)."""

    base_model: str = "minilm"
    max_steps: int = 1000
    time_budget_min: float | None = None
    batch_size: int = 8
    lr: float = 2e-5
    warmup: float = 0.1
    max_length: int = 256  # description (~200 tokens in MedQA) + passage, truncated longest first
    seed: int = 13
    device: str | None = None


@dataclass
class DistantArgs:
    """How S+ / S- are built: for each (question, option), the top-k supports after steps 1-2, re-ranked by the
    pre-trained cross-encoder; the correct option's become positives, the others' negatives."""

    k: int = 1
    dense_k: int = 20  # step 2 depth before the pre-trained cross-encoder re-ranks (CPU: below the paper's 50)
    max_questions: int = 600
    sources: tuple[str, ...] = ("headqa-train", "medmcqa-train", "medqa-train")
    seed: int = 13


def _bar(total: int, desc: str, progress: bool):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step")


def _tail(losses: Sequence[float]) -> float:
    """The README's "loss first → last": the mean of the last 20 steps, not one noisy step."""
    return sum(losses[-20:]) / len(losses[-20:])


# --------------------------------------------------------------------------- TSDAE
def corpus_sentences(texts: Iterable[str], max_sentences: int, seed: int, min_words: int = 6) -> list[str]:
    """Sentences of at least ``min_words`` words (a reservoir sample when there are more than wanted)."""
    from capr.corpus.segment import split_sentences

    rng = random.Random(seed)
    out: list[str] = []
    seen = 0
    for text in texts:
        for s, e in split_sentences(text):
            sent = " ".join(text[s:e].split())
            if len(sent.split()) < min_words:
                continue
            seen += 1
            if len(out) < max_sentences:
                out.append(sent)
            else:
                j = rng.randrange(seen)
                if j < max_sentences:
                    out[j] = sent
    return out


def delete_noise(text: str, ratio: float, rng: random.Random) -> str:
    """TSDAE's deletion noise on whitespace words (sentence-transformers' own needs NLTK's tokenizer data)."""
    words = text.split()
    kept = [w for w in words if rng.random() > ratio]
    return " ".join(kept or [rng.choice(words)]) if words else text


def cycle_batches(n: int, batch_size: int, rng: random.Random) -> Iterator[list[int]]:
    """Batches of indices into ``n`` items in a shuffled order, shuffled again when the next batch would run past
    the end (every trainer here owns its data order this way)."""
    order = list(range(n))
    rng.shuffle(order)
    pos = 0
    while True:
        if pos + batch_size > n:
            rng.shuffle(order)
            pos = 0
        yield order[pos : pos + batch_size]
        pos += batch_size


def train_tsdae(sentences: Sequence[str], out_dir: str | Path, args: TsdaeArgs | None = None, progress: bool = True,
                log: Log | None = None, source: str = "") -> "TrainResult":
    """Adapt a sentence encoder to a corpus with TSDAE (Wang et al. 2021): encode a noisy sentence, decode the
    original from the embedding with a tied decoder (sentence-transformers' DenoisingAutoEncoderLoss)."""
    from capr.models.loading import local_path, quiet_transformers, resolve_model, st_features
    from capr.train.loop import LoopArgs, TrainingLoop

    args = args or TsdaeArgs()
    if len(sentences) < args.batch_size:
        raise BadInputError(source or "corpus", f"only {len(sentences)} usable sentences; TSDAE needs at least {args.batch_size}")
    # the paper's constant learning rate (no warmup), no dev set: the last step is kept
    loop = TrainingLoop(LoopArgs(max_steps=args.max_steps, lr=args.lr, seed=args.seed,
                                 time_budget_min=args.time_budget_min),
                        out_dir, what="TSDAE", desc="training tsdae", progress=progress, log=log, device=args.device)
    quiet_transformers()
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

    device = loop.device
    model = SentenceTransformer(local_path(resolve_model(args.base_model)), device=str(device))
    model.max_seq_length = args.max_length
    loss_fn = DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True).to(device)
    rng = random.Random(args.seed)
    batches = cycle_batches(len(sentences), args.batch_size, rng)

    def step() -> Any:
        batch = [sentences[i] for i in next(batches)]
        noisy = [delete_noise(s, args.del_ratio, rng) for s in batch]
        feats = [st_features(model, noisy), st_features(model, batch)]
        feats = [{k: (v.to(device) if hasattr(v, "to") else v) for k, v in f.items()} for f in feats]
        return loss_fn(feats, None)

    def card() -> dict[str, Any]:
        return {"kind": "tsdae", "capr_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "device": str(device), "args": asdict(args), "source": source, "sentences": len(sentences),
                "query_prefix": "", "passage_prefix": "", "query_model": None}

    def readme(c: dict[str, Any], r: Any) -> str:
        return (f"# capr TSDAE encoder\n\n{args.base_model} adapted to `{source or 'a corpus'}` "
                f"({len(sentences):,} sentences) with TSDAE: {c['steps']} steps, batch {args.batch_size}, lr {args.lr}, "
                f"deletion ratio {args.del_ratio}, {r.seconds / 60:.1f} min ({c['stopped']}); loss {r.losses[0]:.3f} → "
                f"{_tail(r.losses):.3f}.\n\nUse: `capr index CORPUS --dense --model THIS_DIR`.\n")

    params = [p for p in loss_fn.parameters() if p.requires_grad]
    def write(tmp: Path) -> dict[str, Any]:
        model.save(str(tmp))
        return {}

    result = loop.run(params, step, card=card, readme=readme, write=write, module=model)
    if log:
        log(f"tsdae: {result.steps} steps in {result.seconds / 60:.1f} min ({result.stopped})")
    return result


# --------------------------------------------------------------------------- pointwise cross-encoder
def train_pairs(pairs: Sequence[tuple[str, str, float]], out_dir: str | Path, args: PairArgs | None = None,
                init: str | None = None, progress: bool = True, log: Log | None = None,
                card_extra: dict[str, Any] | None = None, desc: str = "cross-encoder") -> "TrainResult":
    """A CrossEncoder trained on (text_a, text_b, label in {0, 1}) with binary cross-entropy on its logit.
    ``init``: a cross-encoder folder to continue from (otherwise ``args.base_model`` with a fresh head)."""
    from capr.models.loading import local_path, quiet_transformers, resolve_model
    from capr.train.loop import LoopArgs, TrainingLoop

    args = args or PairArgs()
    if len(pairs) < 2:
        raise BadInputError(desc, f"only {len(pairs)} training pairs")
    labels = {p[2] for p in pairs}
    if not labels <= {0.0, 1.0} or len(labels) < 2:
        raise BadInputError(desc, "training pairs need labels 0 and 1, both present")
    loop = TrainingLoop(LoopArgs(max_steps=args.max_steps, lr=args.lr, seed=args.seed, warmup=args.warmup,
                                 time_budget_min=args.time_budget_min),
                        out_dir, what="cross-encoder training", desc=f"training {desc}", progress=progress, log=log,
                        device=args.device)
    quiet_transformers()
    from sentence_transformers import CrossEncoder

    import torch

    device = loop.device
    src = local_path(init or resolve_model(args.base_model))
    ce = CrossEncoder(src, num_labels=1, max_length=args.max_length, device=str(device))
    model = ce.model
    bce = torch.nn.BCEWithLogitsLoss()
    batches = cycle_batches(len(pairs), args.batch_size, random.Random(args.seed))

    def step() -> Any:
        batch = [pairs[i] for i in next(batches)]
        enc = ce.tokenizer([b[0] for b in batch], [b[1] for b in batch], padding=True, truncation="longest_first",
                           max_length=args.max_length, return_tensors="pt")
        enc = {k: v.to(device) for k, v in enc.items()}
        logits = model(**enc).logits.squeeze(-1)
        return bce(logits, torch.tensor([b[2] for b in batch], dtype=logits.dtype, device=device))

    positives = sum(1 for p in pairs if p[2] == 1.0)

    def card() -> dict[str, Any]:
        return {"kind": "cross", "capr_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "device": str(device), "args": asdict(args), "init": init or args.base_model, "pairs": len(pairs),
                "positives": positives, "max_length": args.max_length, "sentence_selection": False,
                "loss": "binary cross-entropy", **(card_extra or {})}

    def readme(c: dict[str, Any], r: Any) -> str:
        return (f"# capr cross-encoder ({desc})\n\nFrom `{init or args.base_model}`, trained pointwise with binary "
                f"cross-entropy on {len(pairs):,} pairs ({positives:,} positive): {c['steps']} steps, batch "
                f"{args.batch_size}, lr {args.lr}, max length {args.max_length}, {r.seconds / 60:.1f} min "
                f"({c['stopped']}); loss {r.losses[0]:.3f} → {_tail(r.losses):.3f}.\n\nUse: `capr cases --index DIR "
                f"--model THIS_DIR ...` or `--reranker cross:THIS_DIR`.\n")

    params = [p for p in model.parameters() if p.requires_grad]
    def write(tmp: Path) -> dict[str, Any]:
        ce.save_pretrained(str(tmp))
        return {}

    result = loop.run(params, step, card=card, readme=readme, write=write, module=model)
    if log:
        log(f"{desc}: {result.steps} steps in {result.seconds / 60:.1f} min ({result.stopped}), loss "
            f"{result.losses[0]:.3f} -> {_tail(result.losses):.3f}")
    return result


# --------------------------------------------------------------------------- distant supervision
def distant_questions(data_dir: str | Path, args: DistantArgs) -> "list[MCQuestion]":
    """The training questions of distant supervision: ``args.max_questions`` of ``args.sources`` (fixed by the seed);
    held-out and test questions are refused."""
    from capr.cases.data import load_questions, subsample

    # medmcqa-dev is the whole set, held-out part included
    if any(s.endswith(("-heldout", "-test")) or s == "medmcqa-dev" for s in args.sources):
        raise CaprError(f"distant supervision must not read held-out or test questions (sources: {', '.join(args.sources)})")
    questions = []
    for src in args.sources:
        questions += load_questions(data_dir, src)
    return subsample(questions, args.max_questions, args.seed)


def distant_candidates(index_dir: str | Path, data_dir: str | Path, args: DistantArgs | None = None,
                       progress: bool = True) -> "CandidateSet":
    """Steps 1-2 for the training questions over the case index (``args.dense_k`` supports per option): what the
    pre-trained cross-encoder re-ranks. Saved with :func:`capr.cases.candidates.write_candidates`, they let the
    training run where the index is not (`capr train cases --stage candidates`, then ``--candidates FILE``)."""
    from capr.cases.candidates import collect_candidates
    from capr.cases.config import CaseConfig, CaseScorer
    from capr.cases.pipeline import CasePipeline
    from capr.index.index import Index

    args = args or DistantArgs()
    questions = distant_questions(data_dir, args)
    pipe = CasePipeline(Index.load(index_dir), CaseConfig(scorer=CaseScorer.dense, dense_k=args.dense_k,
                                                          cross_k=args.dense_k))
    bar = _bar(len(questions), "steps 1-2 for S+/S-", progress)

    def tick(qs: Iterable[Any]) -> Iterator[Any]:
        for q in qs:
            yield q
            if bar is not None:
                bar.update(1)

    try:
        cands = collect_candidates(pipe, questions, tick)
        cands.header["sources"] = list(args.sources)
        return cands
    finally:
        if bar is not None:
            bar.close()


def distant_pairs(index_dir: str | Path | None, pretrained: str | Path, data_dir: str | Path | None,
                  args: DistantArgs | None = None, progress: bool = True, log: Log | None = None,
                  candidates: "CandidateSet | None" = None) -> tuple[list[tuple[str, str, float]], dict[str, Any]]:
    """S+ / S-: for each training question and option, steps 1-2 of the pipeline, the supports re-ranked by the
    pre-trained cross-encoder, the top-k kept; labelled by whether the option is the correct one. Options no
    passage mentions contribute (description, option) itself, as the pipeline scores them. ``candidates``: steps 1-2
    saved earlier (a :class:`capr.cases.candidates.CandidateSet`); then no index is read."""
    from capr.cases.candidates import distant_pairs_from_candidates
    from capr.search.second_stage import CrossReranker

    args = args or DistantArgs()
    if candidates is None:
        if index_dir is None or data_dir is None:
            raise CaprError("distant supervision needs the case index (or saved candidates)")
        candidates = distant_candidates(index_dir, data_dir, args, progress)
    pairs, stats = distant_pairs_from_candidates(candidates, CrossReranker(str(pretrained)).score, k=args.k)
    if log:
        log(f"S+/S-: {len(pairs)} pairs from {stats['questions']} questions; {stats['options_found']}/{stats['options']} "
            "options have supports")
    return pairs, stats


__all__ = ["CaseStage", "DistantArgs", "PairArgs", "TsdaeArgs", "corpus_sentences", "delete_noise",
           "distant_candidates", "distant_pairs", "distant_questions", "train_pairs", "train_tsdae"]
