"""The one training loop (capr.train.loop) on a tiny torch model: seeding, early stopping keeping the best
checkpoint, budgets, divergence, the card; and the per-kind training defaults (TrainArgs.for_kind)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from capr.errors import CaprError
from capr.train import KIND_DEFAULTS, LoopArgs, ModelKind, TrainArgs, TrainingLoop


def regression(loop: TrainingLoop, out: Path, evaluate=None, lr_nan: bool = False, seen_modes: list | None = None):
    """y = 3x on fixed data; the model is built after the loop, so the loop's seed decides its initial weights."""
    net = torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.Dropout(0.1)).eval()
    x = torch.linspace(-1, 1, 32).reshape(8, 4)
    y = 3 * x.sum(1, keepdim=True)
    saved: list[torch.Tensor] = []

    def step() -> torch.Tensor:
        if seen_modes is not None:
            seen_modes.append(net.training)
        loss = ((net(x) - y) ** 2).mean()
        return loss * float("nan") if lr_nan else loss

    def write(tmp: Path) -> dict:
        w = net[0].weight.detach().clone()
        torch.save(w, tmp / "w.pt")
        saved.append(w)
        return {"n_weights": int(w.numel())}

    result = loop.run(list(net.parameters()), step, evaluate=evaluate, module=net, write=write,
                      card=lambda: {"kind": "toy"}, readme=lambda c, r: f"# toy, {c['steps']} steps\n")
    return result, net, saved


def test_same_seed_same_run_and_card_without_dev(tmp_path):
    runs = []
    for k in range(2):
        loop = TrainingLoop(LoopArgs(max_steps=5, lr=0.05, seed=7, warmup=0.2), tmp_path / f"m{k}", progress=False)
        runs.append(regression(loop, tmp_path / f"m{k}")[0])
    assert runs[0].losses == runs[1].losses and len(runs[0].losses) == 5
    assert runs[0].losses[-1] < runs[0].losses[0]
    card = json.loads((tmp_path / "m0" / "capr.json").read_text())
    # no dev evaluation: the last step is kept and the card carries no dev fields
    assert card["steps"] == 5 and card["stopped"] == "max_steps" and card["kind"] == "toy" and card["n_weights"] == 4
    assert "dev_history" not in card and len(card["loss_history"]) == 5
    assert (tmp_path / "m0" / "README.md").read_text() == "# toy, 5 steps\n"
    other = TrainingLoop(LoopArgs(max_steps=5, lr=0.05, seed=8, warmup=0.2), tmp_path / "m2", progress=False)
    assert regression(other, tmp_path / "m2")[0].losses != runs[0].losses


def test_early_stopping_keeps_the_best_checkpoint_and_the_whole_history(tmp_path):
    scores = iter([10.0, 20.0, 15.0, 12.0, 99.0])  # start, then steps 2, 4, 6 (8 is never reached)
    logs: list[str] = []

    def evaluate():
        s = next(scores)
        return {"R@1": s, "MRR": s}

    modes: list[bool] = []
    loop = TrainingLoop(LoopArgs(max_steps=10, lr=0.05, seed=1, eval_every=2, patience=2), tmp_path / "m",
                        progress=False, log=logs.append)
    result, net, saved = regression(loop, tmp_path / "m", evaluate=evaluate, seen_modes=modes)
    assert result.stopped == "early_stopping" and result.steps == 6 and len(result.losses) == 6
    assert [d["step"] for d in result.dev] == [0, 2, 4, 6] and result.best["MRR"] == 20.0
    card = json.loads((tmp_path / "m" / "capr.json").read_text())
    assert card["steps"] == 2 and card["steps_run"] == 6 and card["best_step"] == 2
    assert card["stopped"] == "early_stopping" and len(card["dev_history"]) == 4 and len(card["loss_history"]) == 6
    assert len(saved) == 2  # the start, then step 2: the folder holds step 2's weights, not the last step's
    assert torch.equal(torch.load(tmp_path / "m" / "w.pt"), saved[1]) and not torch.equal(saved[1], net[0].weight)
    assert logs[0].startswith("dev at start: R@1 10.00") and logs[1].startswith("step 2:")
    assert modes and all(modes)  # built in eval mode, trained in training mode


def test_divergence_and_time_budget_stop_training(tmp_path):
    loop = TrainingLoop(LoopArgs(max_steps=5, lr=0.05, seed=1), tmp_path / "nan", what="toy training", progress=False)
    with pytest.raises(CaprError, match="toy training diverged at step 1"):
        regression(loop, tmp_path / "nan", lr_nan=True)
    assert not (tmp_path / "nan").exists()  # nothing half-written
    loop = TrainingLoop(LoopArgs(max_steps=1000, lr=0.05, seed=1, time_budget_min=1e-9), tmp_path / "t", progress=False)
    result = regression(loop, tmp_path / "t")[0]
    assert result.stopped == "time_budget" and result.steps == 1
    assert json.loads((tmp_path / "t" / "capr.json").read_text())["stopped"] == "time_budget"


def test_for_kind_gives_each_kind_its_defaults_and_keeps_explicit_settings():
    cross = TrainArgs.for_kind("cross", lr=None, batch_size=None, seed=5)
    assert (cross.kind, cross.lr, cross.batch_size, cross.hard_negatives, cross.sentence_selection, cross.seed) == (
        ModelKind.cross, 3e-5, 8, 2, True, 5)
    bi = TrainArgs.for_kind(ModelKind.bi, hard_negatives=0, sentence_selection=None)
    assert (bi.lr, bi.batch_size, bi.hard_negatives, bi.sentence_selection) == (5e-5, 32, 0, False)
    assert TrainArgs.for_kind("poly", sentence_selection=True).sentence_selection is True
    assert set(KIND_DEFAULTS) == set(ModelKind)
    with pytest.raises(TypeError, match="no field"):
        TrainArgs.for_kind("bi", learning_rate=1e-3)
    with pytest.raises(ValueError):
        TrainArgs.for_kind("tri")
