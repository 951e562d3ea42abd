"""The one training loop every capr trainer runs (bi/poly/cross encoders, CDV, TSDAE, the case cross-encoder), in
the way sentence-transformers' trainers share a base trainer: the trainer builds its model and data and supplies
hooks (a step that returns the loss, an optional dev evaluation, a writer for the weights, its card fields and its
README); the loop owns everything the trainers used to repeat:

- setup: python/numpy/torch seeds and the CPU thread policy, done when the loop is created so that the model the
  trainer builds next starts from the seed;
- AdamW with gradient clipping, and optionally linear warm-up and decay whose horizon follows the time budget
  (BudgetSchedule);
- the step and time budgets, a divergence check, the loss history and a progress bar;
- dev evaluation every `eval_every` steps (and at the last step, or when time runs out) with early stopping: the
  saved model is the best dev checkpoint, the untrained start included, so training never ends below its start;
- every save atomic (a temporary folder renamed into place), with the model card written beside the weights and,
  when the kept checkpoint is an earlier one, its card rewritten with the whole run's history."""

from __future__ import annotations

import hashlib
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

from capr.errors import CaprError
from capr.models.card import CARD_FILE, read_card, replace_card, write_card
from capr.models.loading import pick_device
from capr.rank_metrics import reciprocal_rank, relevance_by_score, success_at
from capr.train.args import OptionRange, check_option

Log = Callable[[str], None]


@dataclass
class LoopArgs:
    """What the loop needs of a trainer's arguments (each trainer maps its own *Args onto it)."""

    max_steps: int
    lr: float
    seed: int
    weight_decay: float = 0.01
    warmup: float | None = None  # share of steps warming up, then linear decay; None: a constant learning rate
    time_budget_min: float | None = None  # stop (and keep the best checkpoint) after this many minutes
    eval_every: int = 50
    patience: int = 4  # dev evaluations without improvement before stopping
    clip: float = 1.0  # gradient norm


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


def seed_everything(seed: int) -> None:
    """python, numpy and torch seeds, and the thread policy above."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    use_cpu_threads()


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


def dev_metrics(scores: list[np.ndarray], relevant: list[list[bool]]) -> dict[str, float]:
    """R@1 (whether a relevant candidate ranks first) and MRR over candidate lists; ties are broken against the
    model (capr.rank_metrics.relevance_by_score: a stable sort on a shuffled list would favour position 0)."""
    r1, rr = [], []
    for s, rel in zip(scores, relevant):
        hits = relevance_by_score(s, rel)
        r1.append(success_at(hits, 1))
        rr.append(reciprocal_rank(hits))
    return {"R@1": 100 * float(np.mean(r1)) if r1 else 0.0, "MRR": 100 * float(np.mean(rr)) if rr else 0.0}


class EarlyStopping:
    """Dev-based checkpoint selection: a checkpoint is kept when (MRR, R@1) improves on the best so far (the
    untrained start included); `patience` evaluations without improvement stop training."""

    def __init__(self, start: dict[str, float], patience: int) -> None:
        self.best, self.best_step, self.bad, self.patience = start, 0, 0, patience

    def update(self, step: int, metrics: dict[str, float]) -> str:
        """'improved' (save this checkpoint), 'stop' or 'continue'."""
        if (metrics["MRR"], metrics["R@1"]) > (self.best["MRR"], self.best["R@1"]):
            self.best, self.best_step, self.bad = metrics, step, 0
            return "improved"
        self.bad += 1
        return "stop" if self.bad >= self.patience else "continue"


def check_loop_args(args: LoopArgs) -> None:
    """One clear error for settings no training can run with, before anything is read or written (a zero
    --eval-every was a ZeroDivisionError after the starting checkpoint was saved; a zero --time-budget saved a
    one-step model)."""
    if args.max_steps < 1:
        raise CaprError(f"--max-steps must be at least 1, got {args.max_steps}")
    if not (math.isfinite(args.lr) and args.lr >= 0):  # 0: a model saved as it starts (the tests read one)
        raise CaprError(f"--lr must be a number >= 0, got {args.lr:g}")
    if args.time_budget_min is not None and not (args.time_budget_min > 0):
        raise CaprError(f"--time-budget must be positive (minutes), got {args.time_budget_min:g}")
    if args.eval_every < 1:
        raise CaprError(f"--eval-every must be at least 1, got {args.eval_every}")
    if args.patience < 0:
        raise CaprError(f"--patience must be 0 or more, got {args.patience}")
    check_option("--seed", args.seed, OptionRange.seed)


def check_save_dir(out_dir: str | Path) -> None:
    """Refuses an `out_dir` that a model must not replace: a file, or a folder of other things (one that is neither
    empty nor a capr model, with its capr.json): replacing it would delete them (`capr train bi --out ~/notes`)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise CaprError(f"{out_dir}: exists and is not a folder; --out names the model folder to write")
    if out_dir.is_dir() and not (out_dir / CARD_FILE).is_file() and any(out_dir.iterdir()):
        raise CaprError(f"{out_dir}: folder is not empty and is not a capr model (no {CARD_FILE}); refusing to "
                        "replace it")


def atomic_save_dir(out_dir: Path, write: Callable[[Path], None]) -> None:
    """`write` fills a temporary folder beside `out_dir`, which then replaces it: a reader sees the old model or
    the new one, never half of one, and a crash leaves the old one in place. Only a capr model folder (or an empty
    one) is replaced (:func:`check_save_dir`)."""
    check_save_dir(out_dir)
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


def file_sha1(path: Path | None) -> str:
    """The training data's fingerprint for the card ("" when it did not come from a file)."""
    if path is None or not path.exists():
        return ""
    h = hashlib.sha1()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def loss_history(losses: Iterable[float]) -> list[float]:
    """At most ~200 points of the loss curve for the card."""
    losses = list(losses)
    return [round(x, 4) for x in losses[:: max(1, len(losses) // 200)]]


class TrainingLoop:
    """Create it before building the model (it seeds everything and picks the device), then `run` with hooks:

    - ``step() -> loss``: one forward pass on the next batch (the trainer owns its data order and any autocast);
      the loop does zero_grad, backward, clipping, the optimizer and schedule steps;
    - ``write(folder) -> dict``: the weights into `folder`; returns card fields the model needs to be read back;
    - ``card() -> dict``: the trainer's card fields (kind, arguments, data); the loop adds steps, seconds, stop
      reason, loss history and, for trainers with a dev evaluation, the dev history and the kept step;
    - ``readme(card, result) -> str``: README.md for people;
    - ``evaluate() -> metrics`` (optional): {"R@1", "MRR"} on the trainer's dev set, {} when it has none. With an
      evaluation the saved model is the best dev checkpoint; without, the last step;
    - ``module`` (optional): put in training mode before the first step (after the starting checkpoint is saved)."""

    def __init__(self, args: LoopArgs, out_dir: str | Path, *, what: str = "training", desc: str = "training",
                 progress: bool = True, log: Log | None = None, device: str | None = None) -> None:
        check_save_dir(out_dir)  # before any training, not when the trained model is saved over the user's folder
        check_loop_args(args)
        seed_everything(args.seed)
        self.args, self.out_dir = args, Path(out_dir)
        self.what, self.desc, self.progress = what, desc, progress
        self.say: Log = log or (lambda m: None)
        self.device = pick_device(device)

    def run(self, params: list[torch.nn.Parameter], step: Callable[[], torch.Tensor], *,
            write: Callable[[Path], dict[str, Any]], card: Callable[[], dict[str, Any]],
            readme: Callable[[dict[str, Any], TrainResult], str],
            evaluate: Callable[[], dict[str, float]] | None = None,
            module: torch.nn.Module | None = None) -> TrainResult:
        a = self.args
        opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay)
        schedule = BudgetSchedule(a.max_steps, a.warmup, a.time_budget_min) if a.warmup is not None else None
        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule.factor) if schedule else None
        t0 = time.time()
        result = TrainResult(out_dir=self.out_dir, steps=0, seconds=0.0, stopped="max_steps")
        start = evaluate() if evaluate is not None else {}
        stopper = EarlyStopping(start, a.patience)
        has_dev = bool(start)
        if has_dev:
            result.dev.append({"step": 0, **start})
            self.say(f"dev at start: R@1 {start['R@1']:.2f} MRR {start['MRR']:.2f}")

        def full_card(steps: int) -> dict[str, Any]:
            c = {**card(), "steps": steps, "seconds": round(time.time() - t0, 1), "stopped": result.stopped}
            if evaluate is not None:
                c.update(dev_start=start, dev_best=stopper.best, best_step=stopper.best_step, dev_history=result.dev)
            c["loss_history"] = loss_history(result.losses)
            return c

        def save(steps: int) -> None:
            def fill(tmp: Path) -> None:
                c = {**full_card(steps), **write(tmp)}
                write_card(tmp, c, readme(c, result))
                result.card = c

            atomic_save_dir(self.out_dir, fill)

        if has_dev:
            save(0)  # the starting point is the checkpoint to beat
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=a.max_steps, desc=self.desc, unit="step")
        if module is not None:
            # after the first save: a CrossEncoder's save_pretrained leaves the model in eval mode
            module.train()
        running: float | None = None
        n = 0
        while n < a.max_steps:
            loss = step()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, a.clip)
            opt.step()
            if sched is not None:
                sched.step()
            n += 1
            if schedule is not None:
                schedule.observe(n, t0)
            value = float(loss.detach())
            if not math.isfinite(value):
                raise CaprError(f"{self.what} diverged at step {n} (loss {value}); lower --lr")
            result.losses.append(value)
            running = value if running is None else 0.9 * running + 0.1 * value
            if bar is not None:
                if schedule is not None and schedule.budget_s is not None and bar.total != schedule.horizon:
                    bar.total = schedule.horizon  # the steps the time budget allows, not --max-steps
                    bar.refresh()
                bar.update(1)
                bar.set_postfix(loss=f"{running:.4f}", **({"dev": f"{stopper.best['R@1']:.1f}"} if has_dev else {}))
            out_of_time = a.time_budget_min is not None and time.time() - t0 > a.time_budget_min * 60
            if has_dev and (n % a.eval_every == 0 or n == a.max_steps or out_of_time):
                m = evaluate()
                result.dev.append({"step": n, **m})
                self.say(f"step {n}: loss {running:.4f} dev R@1 {m['R@1']:.2f} MRR {m['MRR']:.2f}")
                verdict = stopper.update(n, m)
                if verdict == "improved":
                    save(n)
                elif verdict == "stop":
                    result.stopped = "early_stopping"
                    break
            if out_of_time:
                result.stopped = "time_budget"
                break
        if bar is not None:
            bar.close()
        result.steps, result.seconds, result.best = n, time.time() - t0, stopper.best
        if not has_dev:
            save(n)
        else:
            # the kept checkpoint's card was written when it was saved: it gets the whole run's history
            c = read_card(self.out_dir)
            run = full_card(n)
            c.update({k: run[k] for k in ("seconds", "stopped", "dev_history", "loss_history")})
            c["steps_run"], c["steps"] = n, stopper.best_step
            replace_card(self.out_dir, c, readme(c, result))
            result.card = c
        return result


__all__ = ["BudgetSchedule", "EarlyStopping", "LoopArgs", "TrainResult", "TrainingLoop",
           "atomic_save_dir", "check_loop_args", "check_save_dir", "dev_metrics", "file_sha1", "loss_history", "seed_everything", "use_cpu_threads"]
