"""Multiple-choice questions (MedQA-USMLE, HEAD-QA, MedMCQA), similarity pairs (RQE, MEDIQA 2019 Task 2)
and the local case corpus, read straight from ``../shared/data``.

The MedQA dev split (1,272 questions; the official test split is not here) is cut once into a training part
and a fixed held-out part by a seeded hash of the question text: ``medqa_part(q) == "heldout"`` for
MEDQA_HELDOUT_SHARE of it; MedMCQA dev is cut the same way (MEDMCQA_HELDOUT_SHARE). Held-out questions are
never used to train or to select a model."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Iterator, TypeVar

from capr.corpus.files import READ_ERRORS, is_gzip_name, open_text, read_error_reason
from capr.corpus.mediqa import read_task3, task3_path
from capr.errors import BadInputError, CaprError
from capr.records import Document

MEDQA_FILE = "medqa_usmle/US_4_options_phrases_no_exclude_dev.jsonl.gz"
MEDQA_SPLIT_SALT = "capr-cases-medqa-v1"
MEDQA_HELDOUT_SHARE = 0.4  # ~509 of 1,272 questions
MEDMCQA_SPLIT_SALT = "capr-cases-medmcqa-v1"
MEDMCQA_HELDOUT_SHARE = 0.2  # ~840 of 4,183 questions
T = TypeVar("T")
HEADQA_ZIP = "headqa_en/HEAD_EN.zip"
MEDMCQA_FILE = "medmcqa_dev/dev.jsonl.gz"


class QuestionSet(str, Enum):
    medqa_train = "medqa-train"  # the part of MedQA dev used for training
    medqa_heldout = "medqa-heldout"  # fixed, for tuning and reporting
    headqa_train = "headqa-train"
    headqa_dev = "headqa-dev"
    headqa_test = "headqa-test"
    medmcqa_dev = "medmcqa-dev"  # all of MedMCQA dev
    medmcqa_train = "medmcqa-train"  # the part used for training
    medmcqa_heldout = "medmcqa-heldout"  # fixed, for reporting


@dataclass(slots=True)
class MCQuestion:
    qid: str
    description: str
    options: list[str]
    answer: int  # index into options
    source: str
    exclude_docs: tuple[str, ...] = ()  # corpus documents written for this question (its own explanation)


def _need(path: Path) -> Path:
    if not path.exists():
        raise CaprError(f"{path}: not found (benchmark data lives in ../shared/data; see --data-dir)")
    return path


def _hash_part(salt: str, share: float, text: str) -> str:
    h = int.from_bytes(hashlib.sha1(f"{salt}:{text}".encode()).digest()[:8], "big")
    return "heldout" if h / 2**64 < share else "train"


def medqa_part(question: str) -> str:
    return _hash_part(MEDQA_SPLIT_SALT, MEDQA_HELDOUT_SHARE, question)


def medmcqa_part(question: str) -> str:
    return _hash_part(MEDMCQA_SPLIT_SALT, MEDMCQA_HELDOUT_SHARE, question)


def read_medqa(data_dir: str | Path, part: str | None = None) -> list[MCQuestion]:
    """MedQA-USMLE dev, 4 options; ``part``: None (all), "train" or "heldout"."""
    path = _need(Path(data_dir) / MEDQA_FILE)
    out = []
    for i, line in _gzip_lines(path):
        try:
            r = json.loads(line)
            keys = sorted(r["options"])
            q = MCQuestion(f"medqa-{i}", r["question"], [r["options"][k] for k in keys], keys.index(r["answer_idx"]), "medqa")
        except (ValueError, KeyError) as e:
            raise BadInputError(f"{path}:{i + 1}", f"not a MedQA record ({type(e).__name__}: {e})") from None
        if part is None or medqa_part(q.description) == part:
            out.append(q)
    return out


def _gzip_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number from 0, line) of each line of a gzipped JSON-lines file that is not blank."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if line.strip():
                yield i, line


def read_headqa(data_dir: str | Path, split: str = "test", category: str | None = None) -> list[MCQuestion]:
    """HEAD-QA (English) ``split`` in train | dev | test; ``category`` e.g. "medicine" (None: all six)."""
    if split not in ("train", "dev", "test"):
        raise CaprError(f"unknown HEAD-QA split {split!r}; choose train, dev or test")
    path = _need(Path(data_dir) / HEADQA_ZIP)
    with zipfile.ZipFile(path) as z:
        data = json.loads(z.read(f"HEAD_EN/{split}_HEAD_EN.json"))
    out = []
    for exam_name, exam in sorted(data["exams"].items()):
        if category and exam.get("category") != category:
            continue
        for r in exam["data"]:
            if r.get("image"):  # the image is not in the data; the question cannot be read without it
                continue
            answers = sorted(r["answers"], key=lambda a: int(a["aid"]))
            aids = [int(a["aid"]) for a in answers]
            out.append(MCQuestion(f"headqa-{exam_name}-{r['qid']}", r["qtext"], [a["atext"] for a in answers],
                                  aids.index(int(r["ra"])), f"headqa-{exam.get('category')}"))
    return out


def medmcqa_doc_id(qid: str) -> str:
    return f"medmcqa-exp:{qid}"


def read_medmcqa(data_dir: str | Path, part: str | None = None) -> list[MCQuestion]:
    """MedMCQA dev; ``part``: None (all), "train" or "heldout" (a fixed hash split, like MedQA's)."""
    path = _need(Path(data_dir) / MEDMCQA_FILE)
    out = []
    for _, line in _gzip_lines(path):
        r = json.loads(line)
        if part is not None and medmcqa_part(r["question"]) != part:
            continue
        out.append(MCQuestion(f"medmcqa-{r['id']}", r["question"], [r["opa"], r["opb"], r["opc"], r["opd"]],
                              medmcqa_answer(r["cop"]), "medmcqa", (medmcqa_doc_id(r["id"]),)))
    return out


MCQA_PREFIX = "mcqa:"
MEDMCQA_LETTERS = "abcd"  # opa…opd


def _cop_number(cop: object) -> int | None:
    """MedMCQA's ``cop`` as a number (an int or its digits), None for anything else."""
    if isinstance(cop, int) and not isinstance(cop, bool):
        return cop
    if isinstance(cop, str) and cop.strip().isdigit():
        return int(cop)
    return None


def medmcqa_answer(cop: object, zero_based: bool = False) -> int:
    """The 0-based option of MedMCQA's ``cop``: 1-4 as the original files write it (a number or its digits), 0-3 as
    Hugging Face's copy does (``zero_based``), or the option's letter a-d (opa…opd), as exports that write the
    label's name do."""
    if isinstance(cop, str) and cop.strip().lower() in tuple(MEDMCQA_LETTERS):
        return MEDMCQA_LETTERS.index(cop.strip().lower())
    n = _cop_number(cop)
    low = 0 if zero_based else 1
    if n is not None and low <= n <= low + 3:
        return n - low
    raise ValueError(f"field \"cop\" must name the correct option: {'0-3' if zero_based else '1-4'} or a letter a-d "
                     f"(opa-opd), got {cop!r}")


def _mcqa_record(r: object, fallback_id: str, zero_based_cop: bool = False) -> MCQuestion:
    """One multiple-choice question in MedQA's layout (``question``, ``options`` as {"A": …} or a list,
    ``answer_idx`` as a letter or 0-based number, or ``answer`` as the option's text or key), MedMCQA's
    (``question``, ``opa``…``opd``, ``cop``; its ``exp`` document is excluded from the support, as in medmcqa-dev) or
    HEAD-QA's (``qtext``, ``answers`` as [{"aid", "atext"}], ``ra`` the correct aid)."""
    if isinstance(r, dict) and "qtext" in r and "question" not in r:
        return _headqa_record(r, fallback_id)
    if not isinstance(r, dict) or not isinstance(r.get("question"), str) or not r["question"].strip():
        raise ValueError("a record needs a non-empty \"question\"")
    qid = str(r.get("id") or r.get("qid") or fallback_id)
    if "opa" in r:
        options = [r.get(k) for k in ("opa", "opb", "opc", "opd")]
        if "cop" not in r:
            raise ValueError("a MedMCQA record needs \"cop\" (the correct option, 1-4)")
        answer, source, exclude = (medmcqa_answer(r["cop"], zero_based_cop), "medmcqa",
                                   (medmcqa_doc_id(str(r["id"])),) if r.get("id") else ())
    elif "options" in r:
        opts = r["options"]
        keys = sorted(opts) if isinstance(opts, dict) else list(range(len(opts)))
        options = [opts[k] for k in keys] if isinstance(opts, (dict, list)) else []
        idx = r.get("answer_idx")
        if isinstance(idx, str) and idx in keys:
            answer = keys.index(idx)
        elif isinstance(idx, int) or (isinstance(idx, str) and idx.isdigit()):
            answer = int(idx)
        elif isinstance(r.get("answer"), str) and r["answer"] in options:
            answer = options.index(r["answer"])
        elif isinstance(r.get("answer"), str) and r["answer"] in keys:  # the option's key ("C"), as some copies write it
            answer = keys.index(r["answer"])
        else:
            raise ValueError("no answer: give \"answer_idx\" (a key of \"options\" or a 0-based number) or "
                             "\"answer\" (an option's text or key)")
        source, exclude = "mcqa", ()
    else:
        raise ValueError("no options: give \"options\" (MedQA layout) or \"opa\"…\"opd\" (MedMCQA layout)")
    if len(options) < 2 or not all(isinstance(o, str) and o.strip() for o in options):
        raise ValueError("a question needs at least two non-empty options")
    if not 0 <= answer < len(options):
        raise ValueError(f"the answer ({answer}) is not one of the {len(options)} options")
    return MCQuestion(qid, r["question"], options, answer, source, exclude)


def _headqa_record(r: dict, fallback_id: str) -> MCQuestion:
    answers = r.get("answers")
    if not isinstance(answers, list) or not all(isinstance(a, dict) and "aid" in a for a in answers):
        raise ValueError("a HEAD-QA record needs \"answers\" as a list of {\"aid\", \"atext\"}")
    answers = sorted(answers, key=lambda a: int(a["aid"]))
    aids = [int(a["aid"]) for a in answers]
    if "ra" not in r or _cop_number(r["ra"]) not in aids:
        raise ValueError(f"field \"ra\" must be the aid of one of the answers ({aids}), got {r.get('ra')!r}")
    options = [a.get("atext") for a in answers]
    if not isinstance(r["qtext"], str) or not r["qtext"].strip():
        raise ValueError("a record needs a non-empty \"qtext\"")
    if len(options) < 2 or not all(isinstance(o, str) and o.strip() for o in options):
        raise ValueError("a question needs at least two non-empty options")
    return MCQuestion(str(r.get("qid") or fallback_id), r["qtext"], options, aids.index(_cop_number(r["ra"])), "headqa")


def _mcqa_records(path: Path) -> Iterator[tuple[str, object]]:
    """(where, record) of a question file: JSON lines (``.jsonl``, ``.jsonl.gz``), one JSON array of records, or
    HEAD-QA's exam file ({"exams": {name: {"data": [...]}}}; a question that needs its image is left out, as in
    the named headqa benchmarks)."""
    lines: list[str] = []
    try:
        with open_text(path) as fh:
            for line in fh:
                lines.append(line)
    except READ_ERRORS as e:  # a damaged gzip stream (zlib.error too, which was a traceback), not UTF-8, I/O
        raise BadInputError(str(path), read_error_reason(e), f"line {len(lines) + 1}") from None
    text = "".join(lines)
    head = text.lstrip()[:1]
    whole = None
    if head in ("[", "{"):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None  # JSON lines: one object per line
    if isinstance(whole, list):
        for n, r in enumerate(whole, 1):
            yield f"{path} [record {n}]", r
        return
    if isinstance(whole, dict) and not isinstance(whole.get("exams"), dict):  # one record (JSON lines of one line)
        yield f"{path}:1", whole
        return
    if isinstance(whole, dict):
        for name, exam in sorted(whole["exams"].items()):
            data = exam.get("data") if isinstance(exam, dict) else None
            if not isinstance(data, list):
                raise BadInputError(f"{path} [exam {name}]", "an exam needs \"data\": a list of questions")
            for n, r in enumerate(data, 1):
                if isinstance(r, dict) and r.get("image"):
                    continue
                if isinstance(r, dict) and "qid" in r:
                    r = {**r, "qid": f"{name}-{r['qid']}"}
                yield f"{path} [exam {name}, question {n}]", r
        return
    for i, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield f"{path}:{i}", json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInputError(f"{path}:{i}", f"not JSON ({e.msg})") from None


def read_mcqa_file(path: str | Path) -> list[MCQuestion]:
    """Any multiple-choice file in MedQA's, MedMCQA's or HEAD-QA's layout, as JSON lines (``.jsonl``,
    ``.jsonl.gz``), a JSON array or HEAD-QA's exam file: e.g. MedQA test, for `capr eval --benchmark mcqa:PATH`.
    MedMCQA's ``cop`` is 1-4 in its own files and 0-3 in Hugging Face's copy: a file holding a 0 is read as the
    latter (the original never has one), and one holding both a 0 and a 4 is refused. A bad record is refused
    naming its line."""
    if not str(path).strip():  # Path("") is the working directory
        raise CaprError("--benchmark 'mcqa:' names no path: write mcqa:PATH (a MedQA-, MedMCQA- or HEAD-QA-style file)")
    path = Path(path)
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "no such question file"
        raise CaprError(f"{path}: {what} (mcqa:PATH names a MedQA-, MedMCQA- or HEAD-QA-style file)")
    records = list(_mcqa_records(path))
    cops = {}
    for where, r in records:
        if isinstance(r, dict) and "opa" in r and _cop_number(r.get("cop")) in (0, 4):
            cops.setdefault(_cop_number(r.get("cop")), where)
    if len(cops) == 2:
        raise BadInputError(cops[4], f"field \"cop\" is 4 here and 0 at {cops[0]}: MedMCQA's files number the "
                            "correct option 1-4, Hugging Face's 0-3; give one of the two")
    out, seen = [], set()
    for n, (where, r) in enumerate(records):
        try:
            q = _mcqa_record(r, f"{path.name.split('.')[0]}-{n}", zero_based_cop=0 in cops)
        except (ValueError, TypeError, KeyError) as e:
            raise BadInputError(where, str(e)) from None
        if q.qid in seen:
            raise BadInputError(where, f"question id {q.qid!r} repeats")
        seen.add(q.qid)
        out.append(q)
    if not out:
        raise BadInputError(str(path), "no questions")
    return out


def load_questions(data_dir: str | Path, which: QuestionSet | str) -> list[MCQuestion]:
    which = QuestionSet(which)
    if which is QuestionSet.medqa_train:
        return read_medqa(data_dir, "train")
    if which is QuestionSet.medqa_heldout:
        return read_medqa(data_dir, "heldout")
    if which is QuestionSet.medmcqa_dev:
        return read_medmcqa(data_dir)
    if which is QuestionSet.medmcqa_train:
        return read_medmcqa(data_dir, "train")
    if which is QuestionSet.medmcqa_heldout:
        return read_medmcqa(data_dir, "heldout")
    return read_headqa(data_dir, which.value.split("-")[1])


def subsample(questions: list[T], n: int | None, seed: int) -> list[T]:
    """A fixed random subset (same n and seed: same questions), in file order."""
    if n is None or n >= len(questions):
        return list(questions)
    keep = sorted(random.Random(seed).sample(range(len(questions)), n))
    return [questions[i] for i in keep]


# --------------------------------------------------------------------------- similarity pairs
def _rqe_pairs(path: Path) -> Iterator[tuple[str, str, float]]:
    opener = gzip.open if is_gzip_name(path) else open
    with opener(path, "rb") as fh:
        root = ET.parse(fh).getroot()
    for pair in root.iter("pair"):
        chq, faq = pair.findtext("chq"), pair.findtext("faq")
        value = (pair.get("value") or "").strip().lower()
        if chq and faq and value in ("true", "false"):
            yield " ".join(chq.split()), " ".join(faq.split()), float(value == "true")


def read_similarity_pairs(data_dir: str | Path) -> list[tuple[str, str, float]]:
    """RQE training pairs (AMIA 2016, 8,588) + MEDIQA 2019 Task 3 training set 2 (question, answer) judgements
    when present. The RQE test files and the MEDIQA validation and test sets are left out (evaluation data)."""
    d = Path(data_dir)
    out = list(_rqe_pairs(_need(d / "rqe" / "RQE_Train_8588_AMIA2016.xml.gz")))
    qa = task3_path(d, "mediqa2019-train")
    if qa.exists():
        out += [(" ".join(a.question.split()), a.text, float(a.relevant)) for a in read_task3(qa)
                if a.question.strip()]
    return out


# --------------------------------------------------------------------------- corpus
CASE_SOURCES = ("medquad", "mtsamples", "pubmedqa", "medmcqa", "e3c", "codiesp", "openstax")
E3C_FILE = "e3c_english/cases.jsonl.gz"
CODIESP_FILE = "codiesp/cases.jsonl.gz"
OPENSTAX_FILES = ("openstax/ap2e.jsonl.gz", "openstax/microbiology.jsonl.gz")
# the CodiEsp split that measures "patients like this one": never in a corpus a model is trained or tuned with
CODIESP_HELDOUT_SPLIT = "dev"


def case_corpus(data_dir: str | Path, include: tuple[str, ...] = CASE_SOURCES,
                mtsamples_notes: int | None = None,
                codiesp_splits: tuple[str, ...] = ("train", "background")) -> Iterator[Document]:
    """See :func:`_case_corpus`; a document id seen before (MedQuAD repeats a few) is skipped.
    ``mtsamples_notes``: only the first N MTSamples notes in file order (encoding them all takes most of an hour
    on a shared 2-core CPU). ``codiesp_splits``: the CodiEsp cases kept (the dev split is held out by default)."""
    from capr.corpus.casereports import CODIESP_SPLITS

    unknown = sorted(set(include) - set(CASE_SOURCES))
    if unknown:
        raise CaprError(f"unknown case source(s) {', '.join(unknown)}; choose from {', '.join(CASE_SOURCES)}")
    unknown = sorted(set(codiesp_splits) - set(CODIESP_SPLITS))
    if unknown:  # it matched no case, and the CodiEsp cases were left out without a word
        raise CaprError(f"unknown CodiEsp split(s) {', '.join(unknown)}; choose from {', '.join(CODIESP_SPLITS)}")
    seen: set[str] = set()
    n_mts = 0
    for doc in _case_corpus(data_dir, include):
        if doc.metadata.get("source") == "codiesp" and doc.metadata.get("split") not in codiesp_splits:
            continue
        if doc.metadata.get("_src") == "mtsamples":
            n_mts += 1
            if mtsamples_notes is not None and n_mts > mtsamples_notes:
                continue
        doc.metadata.pop("_src", None)
        if doc.doc_id not in seen:
            seen.add(doc.doc_id)
            yield doc


def _case_corpus(data_dir: str | Path, include: tuple[str, ...]) -> Iterator[Document]:
    """Every local text source as documents: MedQuAD answers (minus the medquad-cdv test documents, which must
    stay unseen by anything trained), MTSamples notes, PubMedQA abstracts, MedMCQA explanations (one
    document per question, ``medmcqa-exp:ID``, so a question's own explanation can be excluded), E3C case
    narratives, CodiEsp cases (with their codes) and OpenStax textbook sections."""
    from capr.corpus import Format, read_documents

    d = Path(data_dir)
    if "medquad" in include:
        from capr.labels.splits import exclude_test_documents, medquad_test_exclusion

        docs = read_documents(_need(d / "medquad" / "MedQuAD.tar.gz"), Format.medquad)
        yield from exclude_test_documents(docs, medquad_test_exclusion(d))
    if "mtsamples" in include:
        for doc in read_documents(_need(d / "mtsamples" / "mtsamples.csv.gz"), Format.mtsamples):
            doc.metadata["_src"] = "mtsamples"
            yield doc
    if "pubmedqa" in include:
        with gzip.open(_need(d / "pubmedqa_labeled_test" / "test_set.json.gz"), "rt", encoding="utf-8") as fh:
            data = json.load(fh)
        for pmid, r in sorted(data.items()):
            text = " ".join(r.get("CONTEXTS", [])) + ("\n\n" + r["LONG_ANSWER"] if r.get("LONG_ANSWER") else "")
            yield Document(f"pubmedqa:{pmid}", r.get("QUESTION", ""), text, {"source": "pubmedqa"})
    if "medmcqa" in include:
        with gzip.open(_need(d / MEDMCQA_FILE), "rt", encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                exp = (r.get("exp") or "").strip()
                if len(exp.split()) >= 8:
                    yield Document(medmcqa_doc_id(r["id"]), r.get("topic_name") or r.get("subject_name") or "", exp,
                                   {"source": "medmcqa"})
    if "e3c" in include:
        yield from read_documents(_need(d / E3C_FILE), Format.e3c)
    if "codiesp" in include:
        yield from read_documents(_need(d / CODIESP_FILE), Format.codiesp)
    if "openstax" in include:
        for name in OPENSTAX_FILES:
            yield from read_documents(_need(d / name), Format.openstax)


__all__ = ["CASE_SOURCES", "CODIESP_HELDOUT_SPLIT", "MCQuestion", "MEDQA_HELDOUT_SHARE", "MEDQA_SPLIT_SALT", "QuestionSet", "case_corpus", "load_questions",
           "medmcqa_doc_id", "medmcqa_part", "medqa_part", "read_headqa", "read_medmcqa", "read_medqa", "read_similarity_pairs",
           "subsample"]
