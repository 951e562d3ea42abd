"""TREC topic files, as most clinical IR collections ship their questions: classic SGML topics (``<top> <num>
Number: 301 <title> … <desc> Description: … <narr> Narrative: … </top>``, tags often left open) and XML
``<topic number="N">`` elements: TREC Clinical Decision Support 2014-2016 (``description``, ``summary``, ``note``),
Precision Medicine 2017-2020 (``disease``, ``gene``, ``demographic``, ``other``, …), Clinical Trials 2021-2022 (the
patient's description as the topic's text, the field ``text``) and 2023 (``<field name="…">`` answers, each the field
it names).

A topic's question is its first field of ``DEFAULT_TOPIC_FIELDS`` (the short form a collection's topics are searched
by), else all its fields joined; Clinical Trials 2023's answers are joined as "name: answer." pairs, since an answer
alone ("45", "yes") does not say what it answers. A caller may name other fields: a topic without them is searched by
its default question, and a field no topic has is refused."""

from __future__ import annotations

import gzip
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from xml.parsers import expat

from capr.corpus.files import (BOM, READ_ERRORS, check_text_file, is_gzip_name, read_error_reason, read_head,
                               read_text, xml_declared_encoding, xml_root_name)
from capr.errors import BadInputError
from capr.records import Query

DEFAULT_TOPIC_FIELDS = ("title", "summary", "query")

_TOP_RE = re.compile(r"<top\s*>(.*?)(?:</top\s*>|(?=<top\s*>)|\Z)", re.S | re.I)
_TAG_RE = re.compile(r"<(/?)([A-Za-z][\w.-]*)\s*>")
# only entities closed by ";": html.unescape alone also takes HTML's legacy ones without it ("&notes" → "¬es")
_ENTITY_RE = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
# the labels classic topics repeat after their tags ("<num> Number: 301", "<title> Topic: …" in TREC-1/2)
_LABEL_RE = re.compile(r"\s*(?:number|topic|title|description|narrative|summary|domain|nationality|"
                       r"concept|definition|factor)(?:s|\(s\))?\s*:", re.I)


@dataclass(slots=True)
class _Topic:
    where: str
    number: str | None = None
    fields: dict[str, list[str]] = field(default_factory=dict)
    # Clinical Trials 2023's <field name="…"> elements: each field's name as the file writes it
    field_names: dict[str, str] = field(default_factory=dict)


def topics_format(path: Path) -> str | None:
    """``"sgml"`` (classic ``<top>`` topics) or ``"xml"`` when ``path`` holds TREC topics, else None. Decided by the
    first bytes: no JSON or tab-separated question file opens with ``<``; a ``.xml`` name is XML whatever it holds."""
    head = read_head(path, 4096)
    if not head.lstrip().startswith(b"<") and not path.name.lower().endswith((".xml", ".xml.gz")):
        return None
    root = xml_root_name(head)
    return "sgml" if root is not None and root.lower() == "top" else "xml"


def _clean(text: str, label: bool = False) -> str:
    if label and (m := _LABEL_RE.match(text)):
        text = text[m.end():]
    return " ".join(text.split())


def _unescape(text: str) -> str:
    return _ENTITY_RE.sub(lambda m: html.unescape(m.group()), text)


def _sgml_topics(path: Path) -> Iterator[_Topic]:
    text = read_text(path)
    line, counted = 1, 0
    for m in _TOP_RE.finditer(text):
        line += text.count("\n", counted, m.start())
        counted = m.start()
        topic = _Topic(f"line {line}")
        body = m.group(1)
        tags = list(_TAG_RE.finditer(body))
        for i, tag in enumerate(tags):
            if tag.group(1):
                continue  # a closing tag only ends its field, as the next opening tag would
            end = tags[i + 1].start() if i + 1 < len(tags) else len(body)
            value = _clean(_unescape(body[tag.end():end]), label=True)
            topic.fields.setdefault(tag.group(2).lower(), []).append(value)
        numbers = topic.fields.pop("num", [])
        topic.number = " ".join(numbers) or None
        yield topic


class _XmlTopics:
    """Every top-level ``<topic>`` (or ``<top>``) element, whatever the root, with its child elements as fields; built
    from expat's events, whose line numbers name each topic's place in the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.topics: list[_Topic] = []
        self.open: list[str] = []
        self.topic: _Topic | None = None
        self.depth = 0
        self.texts: list[str] = []  # the topic's own text: a Clinical Trials 2021-2022 topic has no child element
        self.field: str | None = None
        self.field_texts: list[str] = []
        self.parser = expat.ParserCreate()
        self.parser.buffer_text = True
        self.parser.StartElementHandler = self.start
        self.parser.EndElementHandler = self.end
        self.parser.CharacterDataHandler = self.chars

    def start(self, name: str, attrs: dict[str, str]) -> None:
        local = name.rsplit(":", 1)[-1].lower()
        self.open.append(local)
        if self.topic is None:
            if local in ("topic", "top"):
                self.topic = _Topic(f"line {self.parser.CurrentLineNumber}", attrs.get("number"))
                self.depth, self.texts = len(self.open), []
        elif len(self.open) == self.depth + 1:
            # TREC CT 2023: <field name="…">; elsewhere the element's own name
            written = " ".join(attrs.get("name", "").split()) if local == "field" else ""
            self.field = written.lower() or local
            if written:
                self.topic.field_names.setdefault(self.field, written)
            self.field_texts = []

    def chars(self, data: str) -> None:
        if self.topic is not None:
            self.texts.append(data)
            if self.field is not None:
                self.field_texts.append(data)

    def end(self, name: str) -> None:
        topic = self.topic
        if topic is not None and self.field is not None and len(self.open) == self.depth + 1:
            topic.fields.setdefault(self.field, []).append(_clean("".join(self.field_texts)))
            self.field = None
        elif topic is not None and len(self.open) == self.depth:
            if not topic.fields:
                topic.fields["text"] = [_clean("".join(self.texts))]
            if topic.number is None and "num" in topic.fields:
                topic.number = " ".join(topic.fields.pop("num"))
            else:
                topic.fields.pop("num", None)
            topic.number = _clean(topic.number or "", label=True) or None
            self.topics.append(topic)
            self.topic = None
        self.open.pop()

    def read(self) -> list[_Topic]:
        path = self.path
        # the parser honours an XML declaration's encoding, so the text check must too
        check_text_file(path, xml_declared_encoding(read_head(path, 256)) or "utf-8")
        try:
            with (gzip.open(path, "rb") if is_gzip_name(path) else open(path, "rb")) as fh:
                data = fh.read()
        except READ_ERRORS as e:
            raise BadInputError(str(path), read_error_reason(e)) from None
        try:
            self.parser.Parse(data, True)
        except expat.ExpatError as e:
            reason = expat.ErrorString(e.code)
            if self.open and e.code == expat.errors.codes[expat.errors.XML_ERROR_NO_ELEMENTS]:
                reason = f"the file ends inside <{self.open[-1]}> (cut short?)"  # expat says "no element found"
            where = f"line {e.lineno}, column {e.offset}"
            raise BadInputError(str(path), f"not well-formed XML: {reason}", where) from None
        if not self.topics:
            root = xml_root_name(data[:4096].removeprefix(BOM))
            raise BadInputError(str(path), f"no TREC topics: expected <topic number=\"…\"> elements (the root "
                                f"element is <{root}>)")
        return self.topics


def _searchable(values: list[str]) -> list[str]:
    # Precision Medicine 2017 writes an absent <other> as "None": no words to search for
    return [v for v in values if v and v.lower() != "none"]


def _default_question(topic: _Topic) -> tuple[tuple[str, ...], str]:
    """(the fields read, the text) of a topic's default question."""
    first = next((name for name in DEFAULT_TOPIC_FIELDS if name in topic.fields), None)
    if first is not None:
        return (first,), " ".join(_searchable(topic.fields[first]))
    if topic.field_names:
        pairs = [f"{topic.field_names.get(name, name)}: {value}" for name, values in topic.fields.items()
                 for value in _searchable(values)]
        return tuple(topic.fields), " ".join(p if p.endswith((".", "?", "!")) else p + "." for p in pairs)
    return tuple(topic.fields), " ".join(v for values in topic.fields.values() for v in _searchable(values))


def _question(path: Path, topic: _Topic, chosen: tuple[str, ...] | None) -> Query:
    if topic.number is None:
        raise BadInputError(str(path), "a topic without a number (<num>, or the number=\"…\" attribute)", topic.where)
    present = tuple(name for name in chosen if name in topic.fields) if chosen is not None else ()
    if not present:
        chosen, text = _default_question(topic)
    else:
        chosen = present
        text = " ".join(v for name in chosen for v in _searchable(topic.fields[name]))
    if not text:
        which = "" if chosen == ("text",) else f" in field{'s' * (len(chosen) > 1)} {', '.join(map(repr, chosen))}"
        raise BadInputError(str(path), f"topic {topic.number!r} has no text{which}", topic.where)
    return Query(topic.number, text=text)


def _fallback_notes(path: Path, topics: list[_Topic], chosen: tuple[str, ...]) -> list[str]:
    """What to tell of the topics without the chosen fields: those with none of them are searched by their default
    question, those with some by the ones they have. Raises when no topic has one of the chosen fields: the name is
    wrong for this file."""
    seen = list(dict.fromkeys(name for topic in topics for name in topic.fields))
    absent = [name for name in chosen if name not in seen]
    if absent:
        raise BadInputError(str(path), f"no topic has the field{'s' * (len(absent) > 1)} "
                            f"{', '.join(map(repr, absent))} (its topics have: {', '.join(seen) or 'none'})")
    default = (f"default question (the first of {', '.join(DEFAULT_TOPIC_FIELDS[:-1])} and {DEFAULT_TOPIC_FIELDS[-1]}, "
               "else all fields)")
    notes = []
    for has_some in (False, True):
        lacking = [t for t in topics if any(name not in t.fields for name in chosen)
                   and any(name in t.fields for name in chosen) == has_some]
        if not lacking:
            continue
        one = len(lacking) == 1
        named = ", ".join(repr(t.number) for t in lacking[:5]) + (", …" if len(lacking) > 5 else "")
        told = (f"{path}: {'topic' if one else 'topics'} {named} ({len(lacking)} of {len(topics)}) "
                f"{'has' if one else 'have'} ")
        if has_some:
            told += (f"only some of the fields {', '.join(map(repr, chosen))}: searched by those "
                     f"{'it has' if one else 'they have'}")
        else:
            told += f"no field {' or '.join(map(repr, chosen))}: searched by {'its' if one else 'their'} {default}"
        notes.append(told)
    return notes


def read_topics(path: Path, kind: str, chosen: tuple[str, ...] | None,
                notes: list[str] | None = None) -> Iterator[tuple[str, Query]]:
    """(where, question) for every topic of a TREC topics file of ``kind`` (:func:`topics_format`), in file order;
    ``chosen``: the fields whose text is the question (lower-case names), None for the default. A topic with only some
    of the chosen fields is searched by those, one with none of them by its default question, each said once in
    ``notes``; a field no topic has is refused."""
    topics = list(_sgml_topics(path)) if kind == "sgml" else _XmlTopics(path).read()
    if chosen is not None:
        told = _fallback_notes(path, topics, chosen)
        if notes is not None:
            notes += told
    for topic in topics:
        yield topic.where, _question(path, topic, chosen)
