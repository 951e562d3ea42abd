"""MEDIQA 2019 Task 3 (question answering): consumer health questions, each with judged answer passages.
One reader for every use: the `mediqa2019*` benchmarks, the similar-case cross-encoder's pre-training pairs and
experiments/mediqa_paired.py."""

from __future__ import annotations

import gzip
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from capr.corpus.files import is_gzip_name
from capr.errors import BadInputError

TASK3_DIR = Path("mediqa2019") / "Task3_QA"
TASK3_FILES = {
    "mediqa2019": "MEDIQA2019-Task3-QA-ValidationSet.xml.gz",  # 25 questions
    "mediqa2019-train": "MEDIQA2019-Task3-QA-TrainingSet2-Alexa.xml.gz",  # 104 questions
}


@dataclass(slots=True)
class JudgedAnswer:
    qid: str  # "mediqa-<QID>"
    question: str  # as written in the file
    aid: str
    text: str  # whitespace-normalized; never empty
    reference_score: int  # 1-4

    @property
    def relevant(self) -> bool:
        """As in the shared task: ReferenceScore 3 or 4."""
        return self.reference_score >= 3


def task3_path(data_dir: str | Path, name: str) -> Path:
    return Path(data_dir) / TASK3_DIR / TASK3_FILES[name]


def read_task3(path: str | Path) -> Iterator[JudgedAnswer]:
    """Every judged answer with text, in file order (``.xml`` or ``.xml.gz``; an answer without ``ReferenceScore``
    has reference score 0)."""
    path = Path(path)
    try:
        with (gzip.open(path, "rb") if is_gzip_name(path) else open(path, "rb")) as fh:
            root = ET.parse(fh).getroot()
    except ET.ParseError as e:
        raise BadInputError(str(path), f"not MEDIQA XML ({e})") from None
    except (OSError, EOFError) as e:
        raise BadInputError(str(path), f"cannot read ({e})") from None
    for q in root.iter("Question"):
        question = q.findtext("QuestionText") or ""
        for a in q.iter("Answer"):
            text = " ".join((a.findtext("AnswerText") or "").split())
            if text:
                try:
                    score = int(a.get("ReferenceScore", 0))
                except ValueError:
                    raise BadInputError(str(path), f"answer {a.get('AID')!r}: ReferenceScore "
                                        f"{a.get('ReferenceScore')!r} is not a number") from None
                yield JudgedAnswer(f"mediqa-{q.get('QID')}", question, a.get("AID"), text, score)


__all__ = ["JudgedAnswer", "TASK3_FILES", "read_task3", "task3_path"]
