"""Documents as CDV sees them: the ordered sentences of a whole document, with structural flags, the passage
each sentence belongs to and (for training) the passage's entity and aspect labels."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from capr.labels.generate import LabeledPassage

# begin/end of document, begin/end of passage (section or paragraph), list item, heading-like line
FLAG_NAMES = ("doc_begin", "doc_end", "passage_begin", "passage_end", "list_item", "heading_like")
N_FLAGS = len(FLAG_NAMES)
_LIST_RE = re.compile(r"^\s*([-*•·▪]|\d{1,2}[.)]|[a-z][.)])\s+")


def clean_sentence(text: str) -> str:
    return " ".join(text.split())


def _heading_like(text: str) -> bool:
    t = text.strip()
    return bool(t) and len(t) < 80 and not t.endswith((".", "?", "!", ";")) and len(t.split()) <= 8


@dataclass
class DocSentences:
    doc_id: str
    texts: list[str]  # cleaned sentence texts, document order
    passage_of: np.ndarray  # (n,) index of the sentence's passage within `passages`
    passages: list[str]  # pids, document order
    spans: list[tuple[int, int]] = field(default_factory=list)  # document (or passage-relative) character offsets
    entities: list[list[str]] = field(default_factory=list)  # per passage, title entity first (training)
    aspects: list[str] = field(default_factory=list)  # per passage (training)
    titles: list[str] = field(default_factory=list)  # per passage: the document's title entity, "" when none

    def __len__(self) -> int:
        return len(self.texts)

    def flags(self) -> np.ndarray:
        n = len(self.texts)
        f = np.zeros((n, N_FLAGS), dtype=np.float32)
        if n == 0:
            return f
        f[0, 0] = 1.0
        f[-1, 1] = 1.0
        p = self.passage_of
        f[:, 2] = np.r_[1.0, (p[1:] != p[:-1]).astype(np.float32)]
        f[:, 3] = np.r_[(p[1:] != p[:-1]).astype(np.float32), 1.0]
        for i, t in enumerate(self.texts):
            f[i, 4] = 1.0 if _LIST_RE.match(t) else 0.0
            f[i, 5] = 1.0 if _heading_like(t) else 0.0
        return f


def _passage_sentences(text: str, offsets: Sequence[tuple[int, int]]) -> list[tuple[int, int, str]]:
    out = []
    for a, b in offsets or [(0, len(text))]:
        s = clean_sentence(text[a:b])
        if s:
            out.append((a, b, s))
    return out or [(0, len(text), clean_sentence(text) or text)]


def _title_entity(lps: Sequence[LabeledPassage]) -> str:
    """The label generator puts an accepted title entity first in every passage of its document."""
    first = lps[0].entities[0] if lps[0].entities else ""
    if not first or any(not lp.entities or lp.entities[0] != first for lp in lps):
        return ""
    if len(lps) == 1 and first.lower() not in (lps[0].title or "").lower():
        return ""
    return first


def documents_from_labels(records: Iterable[LabeledPassage]) -> list[DocSentences]:
    """Group labeled passages into documents (labels files keep each document's passages in order)."""
    by_doc: dict[str, list[LabeledPassage]] = {}
    for lp in records:
        by_doc.setdefault(lp.doc_id, []).append(lp)
    docs = []
    for doc_id, lps in by_doc.items():
        title = _title_entity(lps)
        texts, owner, spans = [], [], []
        for j, lp in enumerate(lps):
            for a, b, s in _passage_sentences(lp.text, lp.sentences):
                texts.append(s)
                owner.append(j)
                spans.append((a, b))
        docs.append(DocSentences(
            doc_id=doc_id, texts=texts, passage_of=np.asarray(owner, dtype=np.int64), passages=[lp.pid for lp in lps],
            spans=spans, entities=[list(lp.entities) for lp in lps], aspects=[lp.aspect for lp in lps],
            titles=[title] * len(lps),
        ))
    return docs


__all__ = ["FLAG_NAMES", "N_FLAGS", "DocSentences", "clean_sentence", "documents_from_labels"]
