"""Train/test hygiene: keep the CDV MedQuAD test documents out of training, the MedQuAD dev sample that dev sets
are built from, and split MTSamples notes by note."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from capr.corpus.files import open_text
from capr.errors import BadInputError, CaprError
from capr.labels.gazetteer import normalize_name
from capr.records import Document

DEV_SALT = "capr-medquad-dev-v1"
DEV_DOCUMENTS = 400  # MedQuAD documents in the dev sample (≈1,900 answers)
MTSAMPLES_SPLIT_SALT = "mtsamples-capr-v1"
MTSAMPLES_TRAIN_SHARE = 0.75
PREFIX_CHARS = 200
_NON_WORD_RE = re.compile(r"\W+")


def text_key(text: str) -> str:
    return _NON_WORD_RE.sub(" ", text.lower()).strip()


@dataclass
class TestExclusion:
    doc_ids: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)  # "2_GARD_QA/0002209.xml"
    entities: set[str] = field(default_factory=set)  # normalized focus entities of the test documents
    texts: set[str] = field(default_factory=set)  # normalized test passage texts and their 200-char prefixes
    excluded_docs: int = 0
    excluded_by_entity: int = 0
    excluded_passages: int = 0

    def is_test_text(self, text: str) -> bool:
        """MedQuAD repeats answers across documents and subsets (and boilerplate such as "New types of treatment
        are being tested in clinical trials..."): a training passage equal to a test passage, or starting like
        one, is dropped as well."""
        t = text_key(text)
        hit = t in self.texts or (len(t) >= PREFIX_CHARS and t[:PREFIX_CHARS] in self.texts)
        self.excluded_passages += hit
        return hit

    def is_test(self, doc: Document) -> bool:
        if doc.doc_id in self.doc_ids:
            return True
        f = str(doc.metadata.get("file", "")).replace("\\", "/")
        return "/".join(f.split("/")[-2:]) in self.files

    def shares_entity(self, doc: Document) -> bool:
        focus = doc.metadata.get("focus") or doc.title
        return bool(focus) and normalize_name(focus) in self.entities


def medquad_test_exclusion(data_dir: str | Path) -> TestExclusion:
    """Documents and focus entities of the medquad-cdv test split (from its passages and the CDV source list)."""
    data_dir = Path(data_dir)
    passages = data_dir / "medquad_cdv_test" / "passages.jsonl.gz"
    sources = data_dir / "cdv_annotations" / "MedQuAD" / "MedQuAD_test_sources.tsv"
    if not passages.exists():
        raise BadInputError(str(passages), "medquad-cdv test passages not found; cannot exclude the test split")
    ex = TestExclusion()
    with open_text(passages) as fh:
        for line in fh:
            rec = json.loads(line)
            ex.doc_ids.add(rec["doc_id"])
            key = text_key(rec["text"])
            ex.texts.add(key)
            if len(key) >= PREFIX_CHARS:
                ex.texts.add(key[:PREFIX_CHARS])
            for name in (rec.get("entity"), rec.get("doc_title")):
                if name:
                    ex.entities.add(normalize_name(name))
            if rec.get("medquad_file"):
                ex.files.add(rec["medquad_file"])
    if sources.exists():
        for line in sources.read_text().splitlines():
            line = line.strip()
            if line.endswith(".xml"):
                parts = line.split("/")
                ex.files.add("/".join(parts[-2:]))
    return ex


def exclude_test_documents(docs: Iterable[Document], exclusion: TestExclusion, strict: bool = False) -> Iterator[Document]:
    """Drops test documents; `strict` also drops every document whose focus entity is a test entity."""
    for doc in docs:
        if exclusion.is_test(doc):
            exclusion.excluded_docs += 1
            continue
        if strict and exclusion.shares_entity(doc):
            exclusion.excluded_by_entity += 1
            continue
        yield doc


def mtsamples_split_rank(doc_id: str, salt: str = "") -> float:
    """A note's place in [0, 1): a salted hash of its id, so splits need no list and never change."""
    h = int.from_bytes(hashlib.sha1(f"{MTSAMPLES_SPLIT_SALT}{salt}:{doc_id}".encode()).digest()[:8], "big")
    return h / 2**64


def mtsamples_split(doc_id: str) -> str:
    """'train' or 'test' for a note (mtsamples_split_rank)."""
    return "train" if mtsamples_split_rank(doc_id) < MTSAMPLES_TRAIN_SHARE else "test"


def select_split(docs: Iterable[Document], split: str) -> Iterator[Document]:
    if split not in ("train", "test"):
        raise BadInputError("--split", f"unknown split {split!r}; choose train or test")
    return (d for d in docs if mtsamples_split(d.doc_id) == split)


def _dev_rank(doc_id: str) -> float:
    h = int.from_bytes(hashlib.sha1(f"{DEV_SALT}:{doc_id}".encode()).digest()[:8], "big")
    return h / 2**64


def medquad_dev_documents(data_dir: str | Path, n_documents: int = DEV_DOCUMENTS,
                          documents: Sequence[Document] | None = None) -> list[Document]:
    """A fixed sample (salted hash of the id, so it never changes) of MedQuAD documents with answers, outside the
    medquad-cdv test split and its focus entities: what the dev sets (capr.eval.devsets) are built from.
    ``documents``: MedQuAD already read (default: read from ``data_dir``)."""
    from capr.corpus import Format, read_documents
    from capr.corpus.report import ReadReport

    if documents is None:
        src = Path(data_dir) / "medquad" / "MedQuAD.tar.gz"
        if not src.exists():
            raise CaprError(f"{src}: MedQuAD not found")
        documents = read_documents(src, Format.medquad, ReadReport(skip_bad=True))
    exclusion = medquad_test_exclusion(data_dir)
    docs = [d for d in exclude_test_documents(documents, exclusion, strict=True)
            if d.sections and not any(exclusion.is_test_text(d.text[s.start:s.end]) for s in d.sections)]
    docs = list({d.doc_id: d for d in docs}.values())
    docs.sort(key=lambda d: _dev_rank(d.doc_id))
    return docs[:n_documents]
