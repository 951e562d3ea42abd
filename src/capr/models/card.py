"""The model card: every model trained by capr is a folder with `capr.json` (what the model is, how it was
trained, and how it must be read: query/passage markers, a separate query encoder, document context, max length)
and a README.md for people. This is the one reader and writer of it; loaders take their settings from here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capr.models.context import PassageContext, parse_context

CARD_FILE = "capr.json"
README_FILE = "README.md"


def read_card(model_dir: str | Path) -> dict[str, Any]:
    """The folder's capr.json; {} for a model capr did not train (a hub id, a plain sentence-transformers folder)."""
    path = Path(model_dir) / CARD_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def write_card(folder: Path, card: dict[str, Any], readme: str) -> None:
    """capr.json and README.md into `folder` (a temporary folder the caller renames into place, or through a
    temporary file: see `replace_card`)."""
    (folder / CARD_FILE).write_text(json.dumps(card, indent=2))
    (folder / README_FILE).write_text(readme)


def replace_card(folder: Path, card: dict[str, Any], readme: str) -> None:
    """Rewrite the card of a model already in place: capr.json through a temporary file and a rename, so a reader
    never sees half a card."""
    import os

    tmp = folder / f".{CARD_FILE}.tmp"
    tmp.write_text(json.dumps(card, indent=2))
    os.replace(tmp, folder / CARD_FILE)
    (folder / README_FILE).write_text(readme)


def card_context(card: dict[str, Any]) -> PassageContext:
    """What of its document a passage is read with, as the model was trained (cards keep it with the training
    arguments; older cards stored a bool)."""
    return parse_context((card.get("args") or {}).get("context"))


__all__ = ["CARD_FILE", "README_FILE", "card_context", "read_card", "replace_card", "write_card"]
