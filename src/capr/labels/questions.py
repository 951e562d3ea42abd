"""Question pairs that exist in the data folder, for training a bi-encoder on questions in users' own words: each
named set is read by one function from the data folder into typed records.

- ``medquad``: MedQuAD's own questions with their answers (the answer is the passage);
- ``rqe``: RQE's training pairs judged entailed (AMIA 2016): a long consumer or clinical question and the short
  question it asks (the short question is the passage: a question with the same answer);
- ``curai-mqp``: Curai's doctor-rewritten question pairs labelled similar (question 1 → its rewrite).

What the dev sets are built from never becomes training data: the medquad-cdv test documents and documents sharing
their focus entity, the MedQuAD dev sample (capr.labels.splits.medquad_dev_documents), every MedQuAD document
about an entity a consumer dev question asks for (RQE test FAQs) and any answer repeating a gold answer, an answer
of the dev sample or a judged MEDIQA 2019 Task 3 answer, and every RQE training pair whose question is an RQE test
question. Each exclusion applies when the files it is built from are in the data folder."""

from __future__ import annotations

import csv
import gzip
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from capr.errors import CaprError
from capr.labels.generate import LabeledPassage
from capr.labels.gazetteer import normalize_name

# the aspect of a LabeledPassage that stands for a question pair: its `questions` hold the question, its text the
# answer; training asks that question of it and nothing else, and no other passage counts as its answer
QUESTION_PAIR = "question pair"
MEDQUAD_FILE = Path("medquad") / "MedQuAD.tar.gz"
RQE_TRAIN_FILE = Path("rqe") / "RQE_Train_8588_AMIA2016.xml.gz"
MQP_FILE = Path("curai_mqp") / "mqp.csv"
# the RQE test pairs the consumer dev sets ask (capr.eval.devsets)
RQE_FILES = ("rqe/RQE_Test_302_pairs_AMIA2016.xml", "mediqa2019/Task2_RQE/MEDIQA2019-Task2-RQE-TestSet-wLabels.xml")


@dataclass(frozen=True)
class QuestionPair:
    question: str
    answer: str  # the answer, or another question with the same answer
    source: str  # the named set
    group: str  # pairs of one group (a document, a question) are held out together
    title: str = ""  # the answer's document title, when it has one


# FAQ phrasings (RQE's test FAQs are NIH FAQ questions) → the MedQuAD question type they ask; the first match wins
_FAQ_PATTERNS = (
    (r"(?:symptoms|signs) of (.+)", "symptoms"),
    (r"(?:prognosis|outlook)(?: after| for| of)? (?:people with )?(.+)", "outlook"),
    (r"what causes (.+)", "causes"),
    (r"how (?:is|are) (.+?) diagnosed", "exams and tests"),
    (r"how (?:is|are) (.+?) treated", "treatment"),
    (r"(?:treatments?|cure|therapy|therapies)(?: options)? (?:for|of) (.+)", "treatment"),
    (r"how (?:to|do you|can i) (?:treat|cure|get rid of) (?:an? )?(.+)", "treatment"),
    (r"(?:is|can) (.+?) (?:be )?inherited", "inheritance"),
    (r"how to prevent (.+)", "prevention"),
    (r"^what (?:is|are) (?:an? |the )?(.+)", "information"),
)


def faq_targets(faq: str) -> list[tuple[str, str]]:
    """(entity, MedQuAD question type) pairs an FAQ asks about ("How is lupus treated?" → (lupus, treatment))."""
    out = []
    for part in re.split(r"\s*\|\s*|;\s*|\?\s+(?=[A-Z])", faq):
        low = re.sub(r"[\[\]\"“”]", "", part).strip().rstrip("?.! ").strip().lower()
        for pattern, aspect in _FAQ_PATTERNS:
            m = re.search(pattern, low)
            if m:
                out.append((re.sub(r"^(?:an? |the )", "", m.group(1).strip()), aspect))
                break
    return out


def target_names(entity: str) -> list[str]:
    """The names a FAQ's entity is looked up by among MedQuAD's focus entities (as written, then singular)."""
    return list(dict.fromkeys((entity, entity[:-1] if entity.endswith("s") else entity)))


def _rqe_test_pairs(data_dir: str | Path, entailed_only: bool) -> list[tuple[str, str]]:
    pairs = []
    for rel in RQE_FILES:
        path = Path(data_dir) / rel
        if path.exists():
            for p in ET.parse(path).getroot().iter("pair"):
                if not entailed_only or p.get("value") == "true":
                    pairs.append((" ".join((p.findtext("chq") or "").split()), (p.findtext("faq") or "").strip()))
    return pairs


def consumer_questions(data_dir: str | Path) -> list[tuple[str, str]]:
    """(consumer health question, FAQ) pairs judged entailed, from every RQE test file present."""
    pairs = _rqe_test_pairs(data_dir, entailed_only=True)
    if not pairs:
        raise CaprError(f"no RQE test pairs under {data_dir} ({', '.join(RQE_FILES)})")
    return pairs


def _need(data_dir: str | Path, rel: Path) -> Path:
    path = Path(data_dir) / rel
    if not path.exists():
        raise CaprError(f"{path}: not found (the question sets live in the data folder; see --data-dir)")
    return path


def _key(text: str) -> str:
    from capr.labels.splits import text_key

    return text_key(text)


def _mediqa_answer_keys(data_dir: str | Path) -> set[str]:
    """Every judged MEDIQA 2019 Task 3 answer (the mediqa2019 dev sets), as text keys."""
    from capr.corpus.mediqa import TASK3_FILES, read_task3, task3_path

    keys: set[str] = set()
    for name in TASK3_FILES:
        path = task3_path(data_dir, name)
        if path.exists():
            keys.update(_key(a.text) for a in read_task3(path))
    return keys


def medquad_pairs(data_dir: str | Path) -> list[QuestionPair]:
    """MedQuAD's questions with their answers, less everything the dev sets are built from (module docstring)."""
    from capr.corpus import Format, read_documents
    from capr.corpus.report import ReadReport
    from capr.labels.splits import PREFIX_CHARS, exclude_test_documents, medquad_dev_documents, medquad_test_exclusion

    docs = [d for d in read_documents(_need(data_dir, MEDQUAD_FILE), Format.medquad, ReadReport(skip_bad=True))
            if d.sections]
    held: set[str] = set()  # answer text keys never trained on
    held_docs: set[str] = set()
    if (Path(data_dir) / "medquad_cdv_test").exists():
        exclusion = medquad_test_exclusion(data_dir)
        docs = [d for d in exclude_test_documents(docs, exclusion, strict=True)]
        held |= exclusion.texts
        for d in medquad_dev_documents(data_dir, documents=docs):
            held_docs.add(d.doc_id)
            held.update(_key(d.text[s.start:s.end]) for s in d.sections or [])
    focus_of = {d.doc_id: normalize_name(d.metadata.get("focus") or d.title) for d in docs}
    targets = [t for _, faq in _rqe_test_pairs(data_dir, entailed_only=True) for t in faq_targets(faq)]
    asked = {normalize_name(n) for entity, _ in targets for n in target_names(entity)}
    gold = {(normalize_name(n), aspect) for entity, aspect in targets for n in target_names(entity)}
    for d in docs:
        if focus_of[d.doc_id] in asked:
            held_docs.add(d.doc_id)
            held.update(_key(d.text[s.start:s.end]) for s in d.sections or [] if (focus_of[d.doc_id], s.aspect) in gold)
    held |= _mediqa_answer_keys(data_dir)

    def is_held(answer: str) -> bool:
        k = _key(answer)
        return k in held or (len(k) >= PREFIX_CHARS and k[:PREFIX_CHARS] in held)

    out = []
    for d in docs:
        if d.doc_id in held_docs:
            continue
        for s in d.sections or []:
            answer = " ".join(d.text[s.start:s.end].split())
            if s.heading and answer and not is_held(answer):
                out.append(QuestionPair(" ".join(s.heading.split()), answer, "medquad", f"medquad:{d.doc_id}",
                                        d.metadata.get("focus") or d.title))
    return out


def rqe_pairs(data_dir: str | Path) -> list[QuestionPair]:
    """RQE training pairs judged entailed whose two questions differ, less those asking an RQE test question."""
    with gzip.open(_need(data_dir, RQE_TRAIN_FILE), "rb") as fh:
        root = ET.parse(fh).getroot()
    test = {_key(q) for pair in _rqe_test_pairs(data_dir, entailed_only=False) for q in pair}
    out = []
    for p in root.iter("pair"):
        chq, faq = " ".join((p.findtext("chq") or "").split()), " ".join((p.findtext("faq") or "").split())
        if p.get("value") != "true" or not chq or not faq or _key(chq) == _key(faq):
            continue
        if _key(chq) in test or _key(faq) in test:
            continue
        out.append(QuestionPair(chq, faq, "rqe", f"rqe:{_key(chq)[:80]}"))
    return out


def curai_mqp_pairs(data_dir: str | Path) -> list[QuestionPair]:
    """Curai's Medical Question Pairs labelled similar: a consumer question and a doctor's rewrite of it."""
    path = _need(data_dir, MQP_FILE)
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for n, row in enumerate(csv.reader(fh), 1):
            if len(row) != 4:
                raise CaprError(f"{path}: line {n}: expected dr_id, question_1, question_2, label")
            _, q1, q2, label = row
            if label.strip() == "1" and q1.strip() and q2.strip():
                out.append(QuestionPair(" ".join(q1.split()), " ".join(q2.split()), "curai-mqp", f"mqp:{_key(q1)[:80]}"))
    return out


QUESTION_SETS: dict[str, Callable[[str | Path], list[QuestionPair]]] = {
    "medquad": medquad_pairs,
    "rqe": rqe_pairs,
    "curai-mqp": curai_mqp_pairs,
}
_SET_FILES = {"medquad": MEDQUAD_FILE, "rqe": RQE_TRAIN_FILE, "curai-mqp": MQP_FILE}


def question_pairs(data_dir: str | Path, names: Iterable[str] | None = None) -> list[QuestionPair]:
    """The pairs of the named sets (default: every set whose file is in ``data_dir``)."""
    if names is None:
        names = [n for n, rel in _SET_FILES.items() if (Path(data_dir) / rel).exists()]
        if not names:
            raise CaprError(f"{data_dir}: none of the question sets is there "
                            f"({', '.join(str(p) for p in _SET_FILES.values())})")
    out: list[QuestionPair] = []
    for name in names:
        if name not in QUESTION_SETS:
            raise CaprError(f"unknown question set {name!r}; choose from {', '.join(QUESTION_SETS)}")
        out += QUESTION_SETS[name](data_dir)
    return out


def as_labeled(pairs: Iterable[QuestionPair]) -> list[LabeledPassage]:
    """The pairs as training records (capr.train.data asks each its question; QUESTION_PAIR)."""
    return [LabeledPassage(pid=f"{p.source}:q{n}", doc_id=p.group, text=p.answer, aspect=QUESTION_PAIR, entities=[],
                           title=p.title, questions=[p.question]) for n, p in enumerate(pairs)]


def is_question_pair(lp: LabeledPassage) -> bool:
    return lp.aspect == QUESTION_PAIR


def labels_with_question_pairs(labels: str | Path | None, data_dir: str | Path,
                               log: Callable[[str], None] | None = None) -> list[LabeledPassage]:
    """The records of a labels file (none without one) followed by the question pairs of ``data_dir``, as a
    bi-, poly- or cross-encoder trains on both."""
    from capr.labels.generate import read_labels

    pairs = as_labeled(question_pairs(data_dir))
    if log is not None:
        log(f"{len(pairs):,} question pairs from {data_dir}")
    return (list(read_labels(labels)) if labels is not None else []) + pairs


__all__ = ["QUESTION_PAIR", "QUESTION_SETS", "QuestionPair", "RQE_FILES", "as_labeled", "consumer_questions",
           "curai_mqp_pairs", "faq_targets", "is_question_pair", "labels_with_question_pairs", "medquad_pairs", "question_pairs", "rqe_pairs",
           "target_names"]
