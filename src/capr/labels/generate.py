"""Self-supervised labels: each passage gets aspect labels from its document's structure and entity labels
from dictionary NER (affirmed mentions only), the document's title entity and in-document abbreviations."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from capr.text.deid import mask_placeholders
from capr.corpus.files import parse_json
from capr.corpus.segment import SegmenterConfig, segment
from capr.errors import BadInputError, CaprError
from capr.labels.gazetteer import Gazetteer, Mention, normalize_name
from capr.records import Document, Passage

# "Prostatitis - Recheck", "Laparoscopic Gastric Bypass Consult - 2" → the entity alone.
_TITLE_SUFFIX_RE = re.compile(
    r"(\s+-\s+.*|\s*\b(consult(ation)?|follow-?up|recheck|note|evaluation|h&p|discharge summary)\s*)$", re.I)


@dataclass
class LabelConfig:
    ner: bool = True  # dictionary NER over the passage text (HPO, diseases, drugs)
    title_entity: bool = True  # the document's title/focus entity labels every passage of the document
    abbreviations: bool = True  # "chronic kidney disease (CKD)" makes later "CKD" mentions count
    assertions: bool = True  # ConText: drop negated / family / hypothetical / uncertain mentions
    max_entities: int = 12
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)


@dataclass
class LabeledPassage:
    pid: str
    doc_id: str
    text: str
    aspect: str
    entities: list[str]  # canonical names; the title entity first when there is one
    title: str = ""
    heading: str = ""
    questions: list[str] = field(default_factory=list)  # questions the corpus itself pairs with the passage
    dropped: list[dict[str, str]] = field(default_factory=list)  # mentions ConText excluded, with the reason
    sentences: list[tuple[int, int]] = field(default_factory=list)  # passage-relative offsets

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "doc_id": self.doc_id,
            "aspect": self.aspect,
            "entities": self.entities,
            "title": self.title,
            "heading": self.heading,
            "questions": self.questions,
            "dropped": self.dropped,
            "sentences": [list(s) for s in self.sentences],
            "text": self.text,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LabeledPassage":
        return cls(
            pid=d["pid"], doc_id=d["doc_id"], text=d["text"], aspect=d["aspect"], entities=list(d["entities"]),
            title=d.get("title", ""), heading=d.get("heading", ""), questions=list(d.get("questions") or []),
            dropped=list(d.get("dropped") or []), sentences=[(int(a), int(b)) for a, b in d.get("sentences", [])],
        )


@dataclass
class LabelStats:
    documents: int = 0
    passages: int = 0
    labeled: int = 0
    no_entity: int = 0
    no_aspect: int = 0
    mentions: int = 0
    rejected_titles: int = 0
    excluded: int = 0
    dropped: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    entities: Counter = field(default_factory=Counter)
    aspects: Counter = field(default_factory=Counter)

    def to_dict(self, top: int = 20) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "passages": self.passages,
            "labeled": self.labeled,
            "excluded_passages": self.excluded,
            "skipped_no_entity": self.no_entity,
            "skipped_no_aspect": self.no_aspect,
            "affirmed_mentions": self.mentions,
            "rejected_titles": self.rejected_titles,
            "dropped_mentions": dict(self.dropped),
            "dropped_share": round(sum(self.dropped.values()) / max(1, self.mentions + sum(self.dropped.values())), 4),
            "mention_kinds": dict(self.kinds),
            "distinct_entities": len(self.entities),
            "distinct_aspects": len(self.aspects),
            "top_entities": self.entities.most_common(top),
            "top_aspects": self.aspects.most_common(top),
        }


def title_entity(doc: Document) -> str:
    """MedQuAD's focus; an MTSamples sample name without its "- 2" numbering."""
    title = (doc.metadata.get("focus") or doc.title or "").strip()
    entity = title
    while (shorter := _TITLE_SUFFIX_RE.sub("", entity).strip()) != entity:
        entity = shorter
    return entity or title


class _Abbreviations:
    def __init__(self) -> None:
        import scispacy.abbreviation  # noqa: F401  (registers the "abbreviation_detector" factory)
        import spacy

        self.nlp = spacy.blank("en")
        self.nlp.add_pipe("abbreviation_detector")

    def definitions(self, text: str) -> dict[str, str]:
        import warnings

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*\[W036\]")  # "matcher has no patterns": expected
            doc = self.nlp(text[:200_000])
        return {a.text: a._.long_form.text for a in doc._.abbreviations if len(a.text) >= 2}


class LabelGenerator:
    def __init__(self, config: LabelConfig | None = None, gazetteer: Gazetteer | None = None,
                 exclude_passage: Callable[[str], bool] | None = None) -> None:
        self.config = config or LabelConfig()
        self.exclude_passage = exclude_passage  # e.g. a test split's passage texts
        self.gazetteer = gazetteer if gazetteer is not None or not self.config.ner else Gazetteer.load()
        self.filter = None
        if self.config.ner and self.config.assertions:
            from capr.labels.context import AssertionFilter

            self.filter = AssertionFilter()
        self.abbrev = _Abbreviations() if self.config.ner and self.config.abbreviations else None
        self.stats = LabelStats()
        self._title = ""

    def _abbreviation_mentions(self, text: str, defs: dict[str, str]) -> list[Mention]:
        out = []
        for short, long in defs.items():
            entry = self.gazetteer.table.get(normalize_name(long)) if self.gazetteer else None
            if entry is None:
                continue
            for m in re.finditer(rf"(?<![A-Za-z0-9]){re.escape(short)}(?![A-Za-z0-9])", text):
                out.append(Mention(m.start(), m.end(), short, entry[0], "abbreviation"))
        return out

    def _title_entity(self, doc: Document) -> str:
        """A note title is an entity only when it names something: a dictionary term, or words the note itself
        uses ("Gen Med Progress" is neither)."""
        t = title_entity(doc)
        if not t:
            return ""
        if doc.metadata.get("focus") or normalize_name(t) in normalize_name(doc.text):
            return t
        if self.gazetteer is not None and self.gazetteer.find(t):
            return t
        self.stats.rejected_titles += 1
        return ""

    def _entities(self, doc: Document, passage: Passage, defs: dict[str, str]) -> tuple[list[str], list[dict]]:
        # de-identification placeholders are blanked (same offsets): a surrogate name is never an entity
        text = mask_placeholders(passage.text)
        found = self.gazetteer.find(text) if self.gazetteer else []
        taken = {(m.start, m.end) for m in found}
        found += [m for m in self._abbreviation_mentions(text, defs) if (m.start, m.end) not in taken]
        kept: list[str] = []
        dropped: list[dict] = []
        if found and self.filter is not None:
            spans = [(s - passage.start, e - passage.start) for s, e in passage.sentences] or [(0, len(passage.text))]
            for s, e in spans:
                inside = [m for m in found if s <= m.start < e]
                for m, why in zip(inside, self.filter.reasons(passage.text[s:e], inside, offset=s)):
                    if why is None:
                        kept.append(m.entity)
                        self.stats.kinds[m.kind] += 1
                    else:
                        dropped.append({"entity": m.entity, "mention": m.text, "reason": why})
                        self.stats.dropped[why] += 1
        else:
            kept = [m.entity for m in found]
            self.stats.kinds.update(m.kind for m in found)
        self.stats.mentions += len(kept)
        entities = []
        if self.config.title_entity and self._title:
            entities.append(self._title)
        seen = {normalize_name(e) for e in entities}
        for e in kept:
            if (key := normalize_name(e)) not in seen:
                seen.add(key)
                entities.append(e)
        return entities[: self.config.max_entities], dropped

    def document(self, doc: Document) -> Iterator[LabeledPassage]:
        self.stats.documents += 1
        defs = self.abbrev.definitions(mask_placeholders(doc.text)) if self.abbrev is not None else {}
        self._title = self._title_entity(doc)
        banned: list[tuple[int, int]] = []
        if self.exclude_passage is not None:
            # whole sections (a MedQuAD answer), so the second half of a split answer is caught too
            banned = [(sec.start, sec.end) for sec in doc.sections or () if self.exclude_passage(doc.text[sec.start : sec.end])]
        questions = {s.heading for s in doc.sections or () if s.heading.rstrip().endswith("?")}
        for p in segment(doc, self.config.segmenter):
            self.stats.passages += 1
            if self.exclude_passage is not None and (
                any(a < p.end and p.start < b for a, b in banned) or self.exclude_passage(p.text)
            ):
                self.stats.excluded += 1
                continue
            if not p.aspect:
                self.stats.no_aspect += 1
                continue
            entities, dropped = self._entities(doc, p, defs)
            if not entities:
                self.stats.no_entity += 1
                continue
            self.stats.labeled += 1
            self.stats.entities.update(entities)
            self.stats.aspects[p.aspect] += 1
            qs = [p.heading] if p.heading in questions else []
            yield LabeledPassage(
                pid=p.pid, doc_id=p.doc_id, text=p.text, aspect=p.aspect, entities=entities, title=doc.title,
                heading=p.heading, questions=qs, dropped=dropped,
                sentences=[(s - p.start, e - p.start) for s, e in p.sentences],
            )

    def __call__(self, docs: Iterable[Document], progress: Callable[[int], None] | None = None) -> Iterator[LabeledPassage]:
        for doc in docs:
            yield from self.document(doc)
            if progress:
                progress(1)


def check_labels_path(path: str | Path, corpus: str | Path | None = None) -> None:
    """Refuses a labels file ``path`` that is a folder or the ``corpus`` itself (see :func:`write_labels`)."""
    path = Path(path)
    if path.is_dir():
        raise CaprError(f"{path}: is a folder; give the labels file to write")
    if corpus is not None and path.exists() and Path(corpus).exists() and path.samefile(corpus):
        raise CaprError(f"{path}: is the corpus being labelled; writing the labels there would replace it")


def write_labels(path: str | Path, labels: Iterable[LabeledPassage], corpus: str | Path | None = None) -> int:
    """Atomic JSONL write (temp file, fsync, rename). ``corpus``: the file or folder the labels are read from; a
    ``path`` that is that file (or a folder) is refused before ``labels`` is consumed, so before anything is read."""
    import os
    import tempfile

    path = Path(path)
    check_labels_path(path, corpus)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for lp in labels:
                fh.write(json.dumps(lp.to_dict(), ensure_ascii=False) + "\n")
                n += 1
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


def read_labels(path: str | Path) -> Iterator[LabeledPassage]:
    path = Path(path)
    if not path.exists():
        raise BadInputError(str(path), "labels file not found (create it with `capr labels CORPUS --out FILE`)")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = parse_json(line, one_line=True)
                lp = LabeledPassage.from_dict(d)
            except (KeyError, TypeError, ValueError) as e:
                raise BadInputError(str(path), f"line {lineno} is not a label record: {e}") from None
            if not lp.entities or not lp.aspect:
                raise BadInputError(str(path), f"line {lineno}: a label record needs entities and an aspect")
            yield lp
