"""Weight-space ensembling of a fine-tuned bi-encoder with the model it started from (WiSE-FT, Wortsman et al.
2022): θ = (1 − α)·θ_start + α·θ_trained. Fine-tuning on tuple labels forgets some of what the pretrained model
knew about free-text questions; interpolating the weights keeps most of the in-domain gain and much of the
zero-shot skill, at no training cost. α is chosen on dev data (`experiments/merge_alpha_dev.py`), never on a test set."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from capr.errors import BadInputError, CaprError
from capr.models.card import README_FILE, read_card, write_card
from capr.models.loading import local_path, quiet_transformers


def _interpolate(trained: Any, start: Any, alpha: float) -> int:
    """In place on `trained` (a SentenceTransformer); returns how many tensors were mixed. Parameters the start
    model lacks, or has in another shape, keep their trained values."""
    import torch

    base = start.state_dict()
    mixed = 0
    state = trained.state_dict()
    with torch.no_grad():
        for name, t in state.items():
            b = base.get(name)
            if b is None or b.shape != t.shape or not t.is_floating_point():
                continue
            t.copy_((1 - alpha) * b.to(t.dtype) + alpha * t)
            mixed += 1
    return mixed


def merge_with_start(model_dir: str | Path, out_dir: str | Path, alpha: float, start: str | None = None) -> dict[str, Any]:
    """Writes the interpolated bi-encoder to `out_dir` (atomically) with its model card; returns the card."""
    from sentence_transformers import SentenceTransformer

    from capr.models.loading import resolve_model
    from capr.train.loop import atomic_save_dir, check_save_dir

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not 0.0 <= alpha <= 1.0:
        raise CaprError(f"--alpha must be between 0 and 1 (the trained model's share), got {alpha}")
    card = read_card(model_dir)
    if card.get("kind") != "bi":
        raise BadInputError(str(model_dir), "not a capr bi-encoder (capr.json with kind 'bi'); merging needs one")
    start = start or (card.get("args") or {}).get("base_model") or "minilm"
    if out_dir.resolve() == model_dir.resolve():
        raise CaprError("--out must differ from the model folder")
    check_save_dir(out_dir)  # before the models are loaded
    quiet_transformers()
    start_model = SentenceTransformer(local_path(resolve_model(start)), device="cpu")
    sides = ["."] + (["query"] if card.get("query_model") else [])
    mixed = 0

    def write(tmp: Path) -> None:
        nonlocal mixed
        for side in sides:
            trained = SentenceTransformer(local_path(str(model_dir / side)), device="cpu")
            mixed += _interpolate(trained, start_model, alpha)
            trained.save(str(tmp / side))
        merged = {**card, "merged": {"from": str(model_dir), "start": start, "alpha": alpha, "tensors_mixed": mixed}}
        readme = model_dir / README_FILE
        note = (f"\n\n## Weight-space merge\n\nθ = {1 - alpha:.2f}·θ(`{start}`) + {alpha:.2f}·θ(`{model_dir}`) over "
                f"{mixed} tensors (WiSE-FT), written by `capr merge`.\n")
        write_card(tmp, merged, (readme.read_text() if readme.exists() else "") + note)

    atomic_save_dir(out_dir, write)
    if mixed == 0:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise CaprError(f"{start!r} shares no weights with {model_dir}; is it the model training started from?")
    return read_card(out_dir)


__all__ = ["merge_with_start"]
