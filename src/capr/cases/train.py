"""Training for the similar-case pipeline: a TSDAE-adapted encoder, a cross-encoder pre-trained on question
similarity (RQE), and its fine-tuning by distant supervision from multiple-choice questions.

All three follow capr's trainer conventions: ``max_steps`` and ``time_budget_min``, a progress bar, the folder
replaced atomically, and a model card (``capr.json`` + README.md)."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from capr import __version__
from capr.errors import BadInputError, CaprError

Log = Callable[[str], None]


class CaseStage(str, Enum):
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


@dataclass
class TrainReport:
    out_dir: Path
    steps: int
    seconds: float
    stopped: str
    losses: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def _setup(seed: int) -> Any:
    import torch

    from capr.train.trainer import seed_everything

    seed_everything(seed)
    return torch


def _save_model(out_dir: str | Path, save_weights: Callable[[str], Any], card: dict, readme: str, log: "Log | None",
                message: str) -> None:
    """Weights, capr.json and README into `out_dir` atomically, then one log line."""
    from capr.train.trainer import _atomic_dir_save

    def write(tmp: Path) -> None:
        save_weights(str(tmp))
        _write_card(tmp, card, readme)

    _atomic_dir_save(Path(out_dir), write)
    if log:
        log(message)


def _bar(total: int, desc: str, progress: bool):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step")


def _write_card(tmp: Path, card: dict[str, Any], readme: str) -> None:
    (tmp / "capr.json").write_text(json.dumps(card, indent=2))
    (tmp / "README.md").write_text(readme)


def _loss_history(losses: Sequence[float]) -> list[float]:
    return [round(x, 4) for x in losses[:: max(1, len(losses) // 200)]]


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



def _after_step(what: str, step: int, value: float, losses: list[float], bar: Any, budget_min: float | None,
                t0: float) -> bool:
    """Divergence check, loss history and progress bar after a step; True when the time budget is spent."""
    if not math.isfinite(value):
        raise CaprError(f"{what} diverged at step {step} (loss {value}); lower --lr")
    losses.append(value)
    if bar is not None:
        bar.update(1)
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    return budget_min is not None and time.time() - t0 > budget_min * 60

def train_tsdae(sentences: Sequence[str], out_dir: str | Path, args: TsdaeArgs | None = None, progress: bool = True,
                log: Log | None = None, source: str = "") -> TrainReport:
    """Adapt a sentence encoder to a corpus with TSDAE (Wang et al. 2021): encode a noisy sentence, decode the
    original from the embedding with a tied decoder (sentence-transformers' DenoisingAutoEncoderLoss)."""
    from capr.models.encoder import resolve_model
    from capr.train.models import _local, _quiet_transformers, pick_device

    args = args or TsdaeArgs()
    if len(sentences) < args.batch_size:
        raise BadInputError(source or "corpus", f"only {len(sentences)} usable sentences; TSDAE needs at least {args.batch_size}")
    torch = _setup(args.seed)
    _quiet_transformers()
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

    device = pick_device(args.device)
    path = _local(resolve_model(args.base_model))
    model = SentenceTransformer(path, device=str(device))
    model.max_seq_length = args.max_length
    loss_fn = DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True).to(device)
    params = [p for p in loss_fn.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr)
    rng = random.Random(args.seed)
    order = list(range(len(sentences)))
    rng.shuffle(order)
    t0, step, pos, losses, stopped = time.time(), 0, 0, [], "max_steps"
    bar = _bar(args.max_steps, "training tsdae", progress)
    model.train()
    while step < args.max_steps:
        if pos + args.batch_size > len(order):
            rng.shuffle(order)
            pos = 0
        batch = [sentences[i] for i in order[pos : pos + args.batch_size]]
        pos += args.batch_size
        noisy = [delete_noise(s, args.del_ratio, rng) for s in batch]
        feats = [model.tokenize(noisy), model.tokenize(batch)]
        feats = [{k: (v.to(device) if hasattr(v, "to") else v) for k, v in f.items()} for f in feats]
        loss = loss_fn(feats, None)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if _after_step("TSDAE", step, float(loss.detach()), losses, bar, args.time_budget_min, t0):
            stopped = "time_budget"
            break
    if bar is not None:
        bar.close()
    seconds = time.time() - t0
    model.eval()
    card = {"kind": "tsdae", "capr_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "device": str(device), "args": asdict(args), "source": source, "sentences": len(sentences),
            "steps": step, "seconds": round(seconds, 1), "stopped": stopped, "loss_history": _loss_history(losses),
            "query_prefix": "", "passage_prefix": "", "query_model": None}
    readme = (f"# capr TSDAE encoder\n\n{args.base_model} adapted to `{source or 'a corpus'}` "
              f"({len(sentences):,} sentences) with TSDAE: {step} steps, batch {args.batch_size}, lr {args.lr}, "
              f"deletion ratio {args.del_ratio}, {seconds / 60:.1f} min ({stopped}); loss {losses[0]:.3f} → "
              f"{sum(losses[-20:]) / len(losses[-20:]):.3f}.\n\nUse: `capr index CORPUS --dense --model THIS_DIR`.\n")

    _save_model(out_dir, model.save, card, readme, log, f"tsdae: {step} steps in {seconds / 60:.1f} min ({stopped})")
    return TrainReport(Path(out_dir), step, seconds, stopped, losses, {"sentences": len(sentences)})


# --------------------------------------------------------------------------- pointwise cross-encoder
def train_pairs(pairs: Sequence[tuple[str, str, float]], out_dir: str | Path, args: PairArgs | None = None,
                init: str | None = None, progress: bool = True, log: Log | None = None,
                card_extra: dict[str, Any] | None = None, desc: str = "cross-encoder") -> TrainReport:
    """A CrossEncoder trained on (text_a, text_b, label in {0, 1}) with binary cross-entropy on its logit.
    ``init``: a cross-encoder folder to continue from (otherwise ``args.base_model`` with a fresh head)."""
    from capr.models.encoder import resolve_model
    from capr.train.models import _local, _quiet_transformers, pick_device

    args = args or PairArgs()
    if len(pairs) < 2:
        raise BadInputError(desc, f"only {len(pairs)} training pairs")
    labels = {p[2] for p in pairs}
    if not labels <= {0.0, 1.0} or len(labels) < 2:
        raise BadInputError(desc, "training pairs need labels 0 and 1, both present")
    torch = _setup(args.seed)
    _quiet_transformers()
    from sentence_transformers import CrossEncoder

    device = pick_device(args.device)
    src = _local(init or resolve_model(args.base_model))
    ce = CrossEncoder(src, num_labels=1, max_length=args.max_length, device=str(device))
    model = ce.model
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.01)
    from capr.train.trainer import BudgetSchedule

    schedule = BudgetSchedule(args.max_steps, args.warmup, args.time_budget_min)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule.factor)
    bce = torch.nn.BCEWithLogitsLoss()
    rng = random.Random(args.seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    t0, step, pos, losses, stopped = time.time(), 0, 0, [], "max_steps"
    bar = _bar(args.max_steps, f"training {desc}", progress)
    model.train()
    while step < args.max_steps:
        if pos + args.batch_size > len(order):
            rng.shuffle(order)
            pos = 0
        batch = [pairs[i] for i in order[pos : pos + args.batch_size]]
        pos += args.batch_size
        enc = ce.tokenizer([b[0] for b in batch], [b[1] for b in batch], padding=True, truncation="longest_first",
                           max_length=args.max_length, return_tensors="pt")
        enc = {k: v.to(device) for k, v in enc.items()}
        logits = model(**enc).logits.squeeze(-1)
        loss = bce(logits, torch.tensor([b[2] for b in batch], dtype=logits.dtype, device=device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        schedule.observe(step, t0)
        if _after_step("cross-encoder training", step, float(loss.detach()), losses, bar, args.time_budget_min, t0):
            stopped = "time_budget"
            break
    if bar is not None:
        bar.close()
    model.eval()
    seconds = time.time() - t0
    positives = sum(1 for p in pairs if p[2] == 1.0)
    card = {"kind": "cross", "capr_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "device": str(device), "args": asdict(args), "init": init or args.base_model, "pairs": len(pairs),
            "positives": positives, "steps": step, "seconds": round(seconds, 1), "stopped": stopped,
            "loss_history": _loss_history(losses), "max_length": args.max_length, "sentence_selection": False,
            "loss": "binary cross-entropy", **(card_extra or {})}
    tail = sum(losses[-20:]) / len(losses[-20:])
    readme = (f"# capr cross-encoder ({desc})\n\nFrom `{init or args.base_model}`, trained pointwise with binary "
              f"cross-entropy on {len(pairs):,} pairs ({positives:,} positive): {step} steps, batch {args.batch_size}, "
              f"lr {args.lr}, max length {args.max_length}, {seconds / 60:.1f} min ({stopped}); loss {losses[0]:.3f} → "
              f"{tail:.3f}.\n\nUse: `capr cases --index DIR --model THIS_DIR ...` or `--reranker cross:THIS_DIR`.\n")

    _save_model(out_dir, ce.save_pretrained, card, readme, log,
                f"{desc}: {step} steps in {seconds / 60:.1f} min ({stopped}), loss {losses[0]:.3f} -> {tail:.3f}")
    return TrainReport(Path(out_dir), step, seconds, stopped, losses, {"pairs": len(pairs), "positives": positives})


# --------------------------------------------------------------------------- distant supervision
def distant_pairs(index_dir: str | Path, pretrained: str | Path, data_dir: str | Path, args: DistantArgs | None = None,
                  progress: bool = True, log: Log | None = None) -> tuple[list[tuple[str, str, float]], dict[str, Any]]:
    """S+ / S-: for each training question and option, steps 1-2 of the pipeline, the supports re-ranked by the
    pre-trained cross-encoder, the top-k kept; labelled by whether the option is the correct one. Options no
    passage mentions contribute (description, option) itself, as the pipeline scores them."""
    from capr.cases.config import CaseConfig, CaseScorer
    from capr.cases.data import load_questions, subsample
    from capr.cases.pipeline import CasePipeline
    from capr.index.index import Index

    args = args or DistantArgs()
    # medmcqa-dev is the whole set, held-out part included
    if any(s.endswith(("-heldout", "-test")) or s == "medmcqa-dev" for s in args.sources):
        raise CaprError(f"distant supervision must not read held-out or test questions (sources: {', '.join(args.sources)})")
    questions = []
    for src in args.sources:
        questions += load_questions(data_dir, src)
    questions = subsample(questions, args.max_questions, args.seed)
    index = Index.load(index_dir)
    pipe = CasePipeline(index, CaseConfig(scorer=CaseScorer.cross, cross_model=str(pretrained),
                                          dense_k=args.dense_k, cross_k=args.dense_k))
    pairs: list[tuple[str, str, float]] = []
    found = total = 0
    bar = _bar(len(questions), "building S+/S-", progress)
    for q in questions:
        res = pipe.rank(q.description, q.options, exclude_docs=q.exclude_docs)
        correct = q.options[q.answer]
        for h in res.hypotheses:
            label = float(h.hypothesis == correct)
            total += 1
            if h.supports:
                found += 1
                for s in h.supports[: args.k]:
                    pairs.append((q.description, s.passage.text, label))
            else:
                pairs.append((q.description, h.hypothesis, label))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    stats = {"questions": len(questions), "options": total, "options_found": found,
             "coverage": round(found / max(1, total), 4), "sources": list(args.sources), "k": args.k,
             "dense_k": args.dense_k}
    if log:
        log(f"S+/S-: {len(pairs)} pairs from {len(questions)} questions; {found}/{total} options found in the corpus")
    return pairs, stats


__all__ = ["CaseStage", "DistantArgs", "PairArgs", "TrainReport", "TsdaeArgs", "corpus_sentences", "delete_noise",
           "distant_pairs", "train_pairs", "train_tsdae"]
