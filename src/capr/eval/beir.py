"""Any benchmark in BEIR's layout, read as a capr benchmark: ``corpus.jsonl`` (``_id``, ``title``, ``text``),
``queries.jsonl`` (``_id``, ``text``) and ``qrels/<split>.tsv`` (``query-id corpus-id score`` under a header line,
graded). The corpus is indexed as ``capr index`` indexes documents (cut into passages, the title in front when the
index reads titles); runs and metrics are at the document level, a document ranking as its best passage, as
``capr search --group-by doc`` ranks them. Queries without judgements in the split are left out (as BEIR does).

    data = load_beir("../shared/data/nfcorpus_dev", "/tmp/nf-index", dense=EncoderConfig())
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

from capr.corpus.files import open_text
from capr.corpus.segment import SegmenterConfig
from capr.errors import BadInputError, CaprError
from capr.index import AnalyzerConfig
from capr.models.encoder import EncoderConfig
from capr.records import Document, Qrel, Query

BEIR_PREFIX = "beir:"
# What a BEIR benchmark reports (BEIR's own headline metric first)
BEIR_METRICS = ("nDCG@10", "P@1", "MRR@10", "R@100", "MAP")


def beir_folder(path: str | Path) -> Path:
    folder = Path(path)
    missing = [name for name in ("corpus.jsonl", "queries.jsonl", "qrels") if not (folder / name).exists()]
    if missing:
        raise CaprError(f"{folder}: not a BEIR folder (missing {', '.join(missing)})")
    return folder


def beir_splits(path: str | Path) -> list[str]:
    return sorted(p.name[: -len(".tsv")] for p in (beir_folder(path) / "qrels").glob("*.tsv"))


def default_split(path: str | Path) -> str:
    """``test`` when the folder has it (BEIR's evaluation split), else ``dev``, else its only split."""
    splits = beir_splits(path)
    for name in ("test", "dev"):
        if name in splits:
            return name
    if len(splits) == 1:
        return splits[0]
    raise CaprError(f"{path}: choose a split with --split ({', '.join(splits) or 'no qrels/*.tsv'})")


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInputError(str(path), f"not JSON: {e.msg}", f"line {lineno}") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("_id"), (str, int)) or str(rec["_id"]) == "":
                raise BadInputError(str(path), "a record needs a non-empty \"_id\"", f"line {lineno}")
            if not isinstance(rec.get("text", ""), str) or not isinstance(rec.get("title", ""), str):
                raise BadInputError(str(path), "\"text\" and \"title\" must be strings", f"line {lineno}")
            yield lineno, rec


def read_beir_corpus(path: str | Path) -> Iterator[Document]:
    for _, rec in _records(beir_folder(path) / "corpus.jsonl"):
        yield Document(doc_id=str(rec["_id"]), title=(rec.get("title") or "").strip(), text=rec.get("text") or "")


def read_beir_qrels(path: str | Path, split: str) -> list[Qrel]:
    file = beir_folder(path) / "qrels" / f"{split}.tsv"
    if not file.exists():
        raise CaprError(f"{file}: no such split; available: {', '.join(beir_splits(path))}")
    out = []
    with open_text(file) as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts or (lineno == 1 and not parts[-1].lstrip("-").isdigit()):
                continue  # the header line
            if len(parts) != 3:
                raise BadInputError(str(file), f"qrels lines have 3 columns (query-id corpus-id score), found {len(parts)}",
                                    f"line {lineno}")
            try:
                out.append(Qrel(parts[0], parts[1], int(parts[2])))
            except ValueError:
                raise BadInputError(str(file), f"score must be an integer: {parts[2]!r}", f"line {lineno}") from None
    return out


def read_beir_queries(path: str | Path, qids: set[str]) -> list[Query]:
    file = beir_folder(path) / "queries.jsonl"
    out = []
    for lineno, rec in _records(file):
        qid = str(rec["_id"])
        if qid not in qids:
            continue
        if not (rec.get("text") or "").strip():
            raise BadInputError(str(file), f"query {qid!r} has no text", f"line {lineno}")
        out.append(Query(qid, text=" ".join(rec["text"].split())))
    return out


def corpus_stamp(path: str | Path) -> str:
    """Names the corpus file's version (path, size, modification time): a changed corpus gets a new index."""
    file = (beir_folder(path) / "corpus.jsonl").resolve()
    st = file.stat()
    return hashlib.sha1(f"{file}\x00{st.st_size}\x00{st.st_mtime_ns}".encode()).hexdigest()[:12]


def load_beir(path: str | Path, data_dir: str | Path, index_dir: str | Path, analyzer: AnalyzerConfig | None = None,
              dense: EncoderConfig | None = None, progress: Any = None, titled: bool = True, split: str | None = None,
              name: str | None = None):
    """The BEIR folder at ``path`` (relative paths are read from the working directory, not ``data_dir``) as a
    benchmark over the ``split`` judgements (default: :func:`default_split`)."""
    from capr.eval.benchmarks import BenchmarkData, _benchmark_index, document_of_rows

    folder = beir_folder(path)
    split = split or default_split(folder)
    qrels = read_beir_qrels(folder, split)
    queries = read_beir_queries(folder, {q.qid for q in qrels})
    known = {q.qid for q in queries}
    unknown = sorted({q.qid for q in qrels} - known)
    if unknown:
        raise CaprError(f"{folder / 'qrels' / (split + '.tsv')}: query {unknown[0]!r} is judged but not in queries.jsonl")
    index = _benchmark_index(index_dir, lambda: read_beir_corpus(folder), analyzer, dense,
                             SegmenterConfig(include_title=titled), progress)
    return BenchmarkData(name or f"{BEIR_PREFIX}{folder}", index, queries, qrels,
                         {"document_of_row": document_of_rows(index), "metrics": BEIR_METRICS, "split": split})


__all__ = ["BEIR_METRICS", "BEIR_PREFIX", "beir_folder", "beir_splits", "corpus_stamp", "default_split", "load_beir",
           "read_beir_corpus", "read_beir_qrels", "read_beir_queries"]
