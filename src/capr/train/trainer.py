"""One training loop for bi-, poly- and cross-encoders: step and time budgets, dev-based early stopping (the
saved model is the best dev checkpoint, so training can never end below its starting point on dev), GPU when
present, a progress bar, and a model card."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from capr import __version__
from capr.errors import BadInputError
from capr.models.context import parse_context
from capr.labels.generate import LabeledPassage, read_labels
from capr.train.args import ModelKind, TrainArgs
from capr.train.data import TrainingSet
from capr.train.models import CARD_FILE, build_model, pick_device


@dataclass
class TrainResult:
    out_dir: Path
    steps: int
    seconds: float
    stopped: str  # max_steps | time_budget | early_stopping
    losses: list[float] = field(default_factory=list)
    dev: list[dict[str, float]] = field(default_factory=list)
    best: dict[str, float] = field(default_factory=dict)
    card: dict[str, Any] = field(default_factory=dict)


def use_cpu_threads() -> None:
    """Every core, unless OMP_NUM_THREADS says otherwise (two jobs sharing a small machine run far faster with one
    thread each than with oversubscribed cores)."""
    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(max(1, os.cpu_count() or 1))


class BudgetSchedule:
    """Linear warm-up, then linear decay to zero at the last step that will run: min(max_steps, the steps the time
    budget allows at the measured pace, re-estimated as training goes). A horizon of max_steps alone would leave a
    time-limited run in warm-up, or at a high learning rate, when the budget stops it."""

    def __init__(self, max_steps: int, warmup: float, time_budget_min: float | None) -> None:
        self.max_steps, self.warmup = max_steps, warmup
        self.budget_s = time_budget_min * 60 if time_budget_min else None
        self.horizon = max_steps
        self.t_loop: float | None = None

    def factor(self, s: int) -> float:
        warm = max(1, int(self.warmup * self.horizon))
        if s < warm:
            return (s + 1) / warm
        return max(0.0, (self.horizon - s) / max(1, self.horizon - warm))

    def observe(self, step: int, t0: float) -> None:
        """After each step; `t0` is when the budget started counting (setup and dev evaluations included)."""
        now = time.time()
        if self.t_loop is None:
            self.t_loop = now
            return
        if self.budget_s is None or step < 3 or (step > 10 and step % 10):
            return
        per_step = (now - self.t_loop) / max(1, step - 1)
        fits = step + int(max(0.0, self.budget_s - (now - t0)) / max(per_step, 1e-6))
        self.horizon = max(step + 1, min(self.max_steps, fits))


def seed_everything(seed: int) -> None:
    """The setup every trainer shares: python, numpy and torch seeds, and the thread policy above."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    use_cpu_threads()


def dev_metrics(scores: list[np.ndarray], relevant: list[list[bool]]) -> dict[str, float]:
    """R@1 and MRR over candidate lists; ties are broken against the model (stable sort on a shuffled list
    would favour position 0)."""
    r1, rr = [], []
    for s, rel in zip(scores, relevant):
        rel = np.asarray(rel, dtype=bool)
        s = np.asarray(s, dtype=np.float64)
        # rank of the best relevant candidate, counting ties with non-relevant ones as losses
        best = s[rel].max()
        rank = int((s[~rel] >= best).sum()) + 1
        r1.append(float(rank == 1))
        rr.append(1.0 / rank)
    return {"R@1": 100 * float(np.mean(r1)) if r1 else 0.0, "MRR": 100 * float(np.mean(rr)) if rr else 0.0}


class EarlyStopping:
    """Dev-based checkpoint selection shared by the trainers: a checkpoint is kept when (MRR, R@1) improves on the
    best so far (the untrained start included); `patience` evaluations without improvement stop training."""

    def __init__(self, start: dict[str, float], patience: int) -> None:
        self.best, self.best_step, self.bad, self.patience = start, 0, 0, patience

    def update(self, step: int, metrics: dict[str, float]) -> str:
        """'improved' (save this checkpoint), 'stop' or 'continue'."""
        if (metrics["MRR"], metrics["R@1"]) > (self.best["MRR"], self.best["R@1"]):
            self.best, self.best_step, self.bad = metrics, step, 0
            return "improved"
        self.bad += 1
        return "stop" if self.bad >= self.patience else "continue"


class StepLog:
    """After-step bookkeeping shared by the trainers: divergence check, loss history, running loss on the progress
    bar, dev evaluation every `eval_every` steps (and at the last step, or when time runs out) with early stopping,
    and the time budget. `after(step, loss)` says whether training stops."""

    def __init__(self, result: Any, stopper: EarlyStopping, *, max_steps: int, eval_every: int,
                 time_budget_min: float | None, t0: float, evaluate: Callable[[], dict[str, float]],
                 save: Callable[[int], None], say: Callable[[str], None], bar: Any, has_dev: bool,
                 what: str = "training") -> None:
        self.result, self.stopper, self.bar, self.has_dev, self.what = result, stopper, bar, has_dev, what
        self.max_steps, self.eval_every, self.budget, self.t0 = max_steps, eval_every, time_budget_min, t0
        self.evaluate, self.save, self.say = evaluate, save, say
        self.running: float | None = None

    def after(self, step: int, value: float) -> bool:
        if not math.isfinite(value):
            raise RuntimeError(f"{self.what} diverged at step {step} (loss {value}); lower --lr")
        self.result.losses.append(value)
        self.running = value if self.running is None else 0.9 * self.running + 0.1 * value
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{self.running:.4f}", dev=f"{self.stopper.best.get('R@1', float('nan')):.1f}")
        out_of_time = self.budget is not None and time.time() - self.t0 > self.budget * 60
        if self.has_dev and (step % self.eval_every == 0 or step == self.max_steps or out_of_time):
            m = self.evaluate()
            self.result.dev.append({"step": step, **m})
            self.say(f"step {step}: loss {self.running:.4f} dev R@1 {m['R@1']:.2f} MRR {m['MRR']:.2f}")
            verdict = self.stopper.update(step, m)
            if verdict == "improved":
                self.save(step)
            elif verdict == "stop":
                self.result.stopped = "early_stopping"
                return True
        if out_of_time:
            self.result.stopped = "time_budget"
            return True
        return False


def finish_card(out_dir: Path, run_card: dict[str, Any], steps_run: int, best_step: int,
                markdown: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """Rewrite the kept checkpoint's card with the whole run's history (it was written when the checkpoint was)."""
    c = json.loads((out_dir / CARD_FILE).read_text())
    c.update({k: v for k, v in run_card.items() if k in ("seconds", "stopped", "dev_history", "loss_history")})
    c["steps_run"], c["steps"] = steps_run, best_step
    tmp = out_dir / f".{CARD_FILE}.tmp"
    tmp.write_text(json.dumps(c, indent=2))
    os.replace(tmp, out_dir / CARD_FILE)
    (out_dir / "README.md").write_text(markdown(c))
    return c


def _atomic_dir_save(out_dir: Path, write: Callable[[Path], None]) -> None:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        write(tmp)
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        old = None
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _labels_fingerprint(path: Path | None) -> str:
    if path is None or not path.exists():
        return ""
    h = hashlib.sha1()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
    args = args or TrainArgs()
    out_dir = Path(out_dir)
    labels_path = Path(labels) if isinstance(labels, (str, Path)) else None
    records = read_labels(labels_path) if labels_path is not None else labels
    seed_everything(args.seed)
    device = pick_device(args.device)
    data = TrainingSet(records, args)
    if len(data) < 2:
        raise BadInputError(str(labels_path or "labels"), "need at least two labeled passages to train")
    model = build_model(args, device)
    kind = ModelKind(args.kind)
    if kind is ModelKind.cross:
        model.selector = data.selector
    # cross-encoders score every (query, candidate) pair, so their dev set is smaller
    dev = data.dev_set(args.dev_queries if kind is not ModelKind.cross else min(args.dev_queries, 64),
                       n_candidates=32 if kind is not ModelKind.cross else 16, seed=args.seed)

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    schedule = BudgetSchedule(args.max_steps, args.warmup, args.time_budget_min)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule.factor)
    batches = iter(data.batches(random.Random(args.seed), with_selection_query=args.sentence_selection))
    say = log or (lambda m: None)

    def evaluate() -> dict[str, float]:
        if not dev:
            return {}
        model.eval()
        m = dev_metrics(model.score_dev(dev), dev.relevant)
        model.train()
        return m

    t0 = time.time()
    result = TrainResult(out_dir=out_dir, steps=0, seconds=0.0, stopped="max_steps")
    start = evaluate()
    stopper = EarlyStopping(start, args.patience)
    if start:
        result.dev.append({"step": 0, **start})
        say(f"dev at start: R@1 {start['R@1']:.2f} MRR {start['MRR']:.2f}")

    def card(steps: int) -> dict[str, Any]:
        return {
            "kind": kind.value,
            "capr_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "device": str(device) + (f" ({torch.cuda.get_device_name(0)})" if device.type == "cuda" else ""),
            "args": args.to_dict(),
            "labels_file": str(labels_path) if labels_path else None,
            "labels_sha1": _labels_fingerprint(labels_path),
            "train_passages": len(data.train),
            "dev_passages": len(data.dev),
            "steps": steps,
            "seconds": round(time.time() - t0, 1),
            "stopped": result.stopped,
            "dev_start": start,
            "dev_best": stopper.best,
            "best_step": stopper.best_step,
            "dev_history": result.dev,
            "loss_history": [round(x, 4) for x in result.losses[:: max(1, len(result.losses) // 200)]],
        }

    def save(steps: int) -> None:
        def write(tmp: Path) -> None:
            meta = model.save(tmp)
            c = {**card(steps), **meta, "max_length": args.max_length}
            (tmp / CARD_FILE).write_text(json.dumps(c, indent=2))
            (tmp / "README.md").write_text(_model_card_md(c))
            result.card = c

        _atomic_dir_save(out_dir, write)

    if dev:
        save(0)  # the starting point is the checkpoint to beat
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=args.max_steps, desc=f"training {kind.value}-encoder", unit="step")
    model.train()
    use_amp = device.type == "cuda"
    log_ = StepLog(result, stopper, max_steps=args.max_steps, eval_every=args.eval_every,
                   time_budget_min=args.time_budget_min, t0=t0, evaluate=evaluate, save=save, say=say, bar=bar,
                   has_dev=bool(dev))
    step = 0
    while step < args.max_steps:
        batch = next(batches)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_amp):
            loss = model.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        step += 1
        schedule.observe(step, t0)
        if log_.after(step, float(loss.detach())):
            break
    if bar is not None:
        bar.close()
    result.steps = step
    result.seconds = time.time() - t0
    result.best = stopper.best
    if not dev:
        save(step)
    else:
        result.card = finish_card(out_dir, card(step), step, stopper.best_step, _model_card_md)
    return result
