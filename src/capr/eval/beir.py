"""Any benchmark in BEIR's layout, read as a capr benchmark: ``corpus.jsonl`` (``_id``, ``title``, ``text``),
``queries.jsonl`` (``_id``, ``text``) and ``qrels/<split>.tsv`` (``query-id corpus-id score`` under a header line,
graded). The corpus is read as ``capr index`` reads a BEIR folder (capr.corpus.beir: one reader of each file) and
indexed as it indexes documents (cut into passages, the title in front when the index reads titles); runs and metrics
are at the document level, a document ranking as its best passage, as ``capr search --group-by doc`` ranks them.
Queries without judgements in the split are left out (as BEIR does).

    data = load_beir("../shared/data/nfcorpus_dev", "/tmp/nf-index", dense=EncoderConfig())
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from capr.corpus import Format, read_documents
from capr.corpus.beir import beir_file, beir_folder, beir_splits, read_beir_qrels, read_beir_queries
from capr.corpus.report import ReadReport
from capr.corpus.segment import SegmenterConfig
from capr.errors import CaprError
from capr.index import AnalyzerConfig
from capr.models.encoder import EncoderConfig

BEIR_PREFIX = "beir:"
# What a BEIR benchmark reports (BEIR's own headline metric first)
BEIR_METRICS = ("nDCG@10", "P@1", "MRR@10", "R@100", "MAP")


def default_split(path: str | Path) -> str:
    """``test`` when the folder has it (BEIR's evaluation split), else ``dev``, else its only split."""
    splits = beir_splits(beir_folder(path))
    for name in ("test", "dev"):
        if name in splits:
            return name
    if len(splits) == 1:
        return splits[0]
    raise CaprError(f"{path}: choose a split with --split ({', '.join(splits) or 'no qrels/*.tsv'})")


def file_stamp(path: str | Path) -> str:
    """Names a file's version (path, size, modification time): a changed file gets a new benchmark index."""
    file = Path(path).resolve()
    st = file.stat()
    return hashlib.sha1(f"{file}\x00{st.st_size}\x00{st.st_mtime_ns}".encode()).hexdigest()[:12]


def corpus_stamp(path: str | Path) -> str:
    """The version of a BEIR folder's corpus file (see :func:`file_stamp`)."""
    return file_stamp(beir_file(beir_folder(path), "corpus"))  # beir_folder refuses a folder without one


def load_beir(path: str | Path, data_dir: str | Path, index_dir: str | Path, analyzer: AnalyzerConfig | None = None,
              dense: EncoderConfig | None = None, progress: Any = None, titled: bool = True, split: str | None = None,
              name: str | None = None):
    """The BEIR folder at ``path`` (relative paths are read from the working directory, not ``data_dir``) as a
    benchmark over the ``split`` judgements (default: :func:`default_split`)."""
    from capr.eval.benchmarks import BenchmarkData, _benchmark_index, document_of_rows

    folder = beir_folder(path)
    split = split or default_split(folder)
    notes: list[str] = []  # said by capr eval before the evaluation (capr.eval.runner.reading_warnings)
    qrels = read_beir_qrels(folder, split, warn=notes.append)
    queries = read_beir_queries(folder, {q.qid for q in qrels})
    known = {q.qid for q in queries}
    unknown = sorted({q.qid for q in qrels} - known)
    if unknown:
        raise CaprError(f"{folder / 'qrels' / (split + '.tsv')}: query {unknown[0]!r} is judged but not in queries.jsonl")
    report = ReadReport()  # read as `capr index` reads the folder: a refused document is named by file and line
    index = _benchmark_index(index_dir, lambda: read_documents(folder, Format.beir, report, require_documents=True),
                             analyzer, dense, SegmenterConfig(include_title=titled), progress, report=report)
    return BenchmarkData(name or f"{BEIR_PREFIX}{folder}", index, queries, qrels,
                         {"document_of_row": document_of_rows(index), "metrics": BEIR_METRICS, "split": split,
                          "warnings": notes})


__all__ = ["BEIR_METRICS", "BEIR_PREFIX", "beir_folder", "beir_splits", "corpus_stamp", "default_split", "file_stamp",
           "load_beir", "read_beir_qrels", "read_beir_queries"]
