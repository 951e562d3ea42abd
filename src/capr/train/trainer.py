"""Training bi-, poly- and cross-encoders from self-supervised labels: the data (sampled queries, hard negatives,
a dev split by document) and the model families plug into capr's one training loop (capr.train.loop), which
owns budgets, the schedule, dev-based early stopping, the progress bar, atomic saves and the model card."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from capr._version import __version__
from capr.errors import BadInputError
from capr.labels.generate import LabeledPassage, read_labels
from capr.models.context import parse_context
from capr.train.args import ModelKind, TrainArgs
from capr.train.data import TrainingSet
from capr.train.loop import LoopArgs, TrainingLoop, TrainResult, dev_metrics, file_sha1
from capr.train.models import build_model


def _model_card_md(card: dict[str, Any]) -> str:
    a = card["args"]
    dev = card.get("dev_best") or {}
    lines = [
        f"# capr {card['kind']}-encoder",
        "",
        f"Trained by capr {card['capr_version']} on {card['created']} ({card['device']}), self-supervised from "
        f"`{card.get('labels_file') or 'labels'}` ({card['train_passages']:,} training passages, "
        f"{card['dev_passages']:,} held out for early stopping).",
        "",
        f"- base model: `{a['base_model']}`",
        f"- steps: {card['steps']} (stopped by {card['stopped']}), {card['seconds'] / 60:.1f} min",
        f"- batch {a['batch_size']}, lr {a['lr']}, max length {a['max_length']}, hard negatives {a['hard_negatives']}, "
        f"multi-positive masking {'on' if a['multi_positive'] else 'off'}, sentence selection "
        f"{'on' if a['sentence_selection'] else 'off'}, document context {parse_context(a['context']).value}"
        + (f", weights {'shared' if a['shared'] else 'separate'}" if card["kind"] == "bi" else ""),
        f"- dev R@1 {dev.get('R@1', float('nan')):.2f} / MRR {dev.get('MRR', float('nan')):.2f} at step "
        f"{card.get('best_step', 0)} (start: R@1 {card['dev_start'].get('R@1', float('nan')):.2f})"
        if card.get("dev_start") else "- no dev split",
        "",
        "Load: " + {
            "bi": "`capr index DIR --dense --model THIS_DIR` or `SentenceTransformer(THIS_DIR)` "
                  "(prefix queries with the query marker in capr.json).",
            "poly": "`capr eval ... --reranker poly:THIS_DIR` / `capr search ... --reranker poly:THIS_DIR`.",
            "cross": "`capr search ... --reranker cross:THIS_DIR` or `CrossEncoder(THIS_DIR)`.",
        }[card["kind"]],
        "",
    ]
    return "\n".join(lines)


def train(
    labels: str | Path | Iterable[LabeledPassage],
    out_dir: str | Path,
    args: TrainArgs | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train a bi-, poly- or cross-encoder (`args.kind`; `TrainArgs.for_kind` gives each kind's defaults) into
    `out_dir`, keeping the best dev checkpoint."""
    args = args or TrainArgs()
    args.check()
    out_dir = Path(out_dir)
    labels_path = Path(labels) if isinstance(labels, (str, Path)) else None
    records = read_labels(labels_path) if labels_path is not None else labels
    kind = ModelKind(args.kind)
    loop = TrainingLoop(LoopArgs(max_steps=args.max_steps, lr=args.lr, seed=args.seed, weight_decay=args.weight_decay,
                                 warmup=args.warmup, time_budget_min=args.time_budget_min, eval_every=args.eval_every,
                                 patience=args.patience),
                        out_dir, desc=f"training {kind.value}-encoder", progress=progress, log=log, device=args.device)
    device = loop.device
    data = TrainingSet(records, args)
    if len(data) < 2:
        raise BadInputError(str(labels_path or "labels"), "need at least two labeled passages to train")
    model = build_model(args, device)
    if kind is ModelKind.cross:
        model.attach(data)
    # cross-encoders score every (query, candidate) pair, so their dev set is smaller; a residual one starts at its
    # bi-encoder's high dev score, and telling its checkpoints apart needs more queries
    cross_queries = 128 if args.first_stage else 64
    dev = data.dev_set(args.dev_queries if kind is not ModelKind.cross else min(args.dev_queries, cross_queries),
                       n_candidates=32 if kind is not ModelKind.cross else 16, seed=args.seed)
    batches = iter(data.batches(random.Random(args.seed), with_selection_query=args.sentence_selection))
    use_amp = device.type == "cuda"

    def step() -> torch.Tensor:
        batch = next(batches)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_amp):
            return model.loss(batch)

    def evaluate() -> dict[str, float]:
        if not dev:
            return {}
        model.eval()
        m = dev_metrics(model.score_dev(dev), dev.relevant)
        model.train()
        return m

    def card() -> dict[str, Any]:
        return {
            "kind": kind.value,
            "capr_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "device": str(device) + (f" ({torch.cuda.get_device_name(0)})" if device.type == "cuda" else ""),
            "args": args.to_dict(),
            "labels_file": str(labels_path) if labels_path else None,
            "labels_sha1": file_sha1(labels_path),
            "train_passages": len(data.train),
            "dev_passages": len(data.dev),
        }

    params = [p for p in model.parameters() if p.requires_grad]
    return loop.run(params, step, evaluate=evaluate, card=card, module=model,
                    write=lambda tmp: {**model.save(tmp), "max_length": args.max_length},
                    readme=lambda c, _: _model_card_md(c))
