"""TREC qrels ("qid 0 docid rel", or BEIR's three columns) and run files ("qid Q0 docid rank score tag"), read and written."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Iterable, Sequence

from capr.corpus.files import numbered_lines, open_text
from capr.errors import BadInputError, CaprError
from capr.index.atomic import write_bytes
from capr.records import PairRepeats, Qrel, Run, ScoredPassage


def read_qrels(path: Path, warn: Callable[[str], None] | None = None) -> list[Qrel]:
    """A judgements file: TREC's four columns ("qid 0 docid rel") or BEIR's three under a header
    (capr.corpus.beir.read_qrels_file); a (query, document) pair judged twice with different grades is refused,
    and a repeat of the same grade is counted once and said through ``warn`` (see PairRepeats)."""
    from capr.corpus.beir import read_qrels_file

    return read_qrels_file(Path(path), warn)


def check_trec_id(path: Path, what: str, value: str) -> None:
    """Refuses an id a TREC file cannot carry: its columns are split at whitespace, so an empty id or one holding a
    space shifts the line's columns (trec_eval, pytrec_eval and read_run then misread or refuse it). No escaping
    would do: the ids written must be the judged ids."""
    if value and not any(c.isspace() for c in value):
        return
    raise CaprError(f"{path}: cannot write a TREC file: {what} {value!r} "
                    + ("is empty" if not value else "holds whitespace, which separates a TREC line's columns")
                    + "; give it an id without spaces")


def write_qrels(path: Path, qrels: Iterable[Qrel]) -> None:
    qrels = list(qrels)
    for q in qrels:
        check_trec_id(path, "query id", q.qid)
        check_trec_id(path, "document id", q.pid)
    write_bytes(Path(path), "".join(f"{q.qid} 0 {q.pid} {q.relevance}\n" for q in qrels).encode())


def read_run(path: Path, warn: Callable[[str], None] | None = None) -> Run:
    """A TREC run file; a document ranked twice for one query with different scores is refused, and a repeat with
    the same score is counted once and said through ``warn`` (see PairRepeats)."""
    run = Run()
    repeats = PairRepeats(path, "score", "a document already ranked for the query")
    with open_text(Path(path)) as fh:
        for lineno, line in numbered_lines(Path(path), fh):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise BadInputError(str(path), f"run lines have 6 columns, found {len(parts)}", f"line {lineno}")
            try:
                sp = ScoredPassage(pid=parts[2], rank=int(parts[3]), score=float(parts[4]))
            except ValueError as e:
                raise BadInputError(str(path), f"bad rank or score: {e}", f"line {lineno}") from None
            run.name = parts[5]
            if repeats.is_new(parts[0], sp.pid, sp.score, lineno):
                run.results.setdefault(parts[0], []).append(sp)
    repeats.report(warn)
    for hits in run.results.values():
        hits.sort(key=lambda h: h.rank)
    return run


def trec_run_text(run: Run, path: Path) -> str:
    """The run's lines in TREC's layout; refused, naming ``path``, when an id or the run's name holds whitespace
    (see check_trec_id)."""
    check_trec_id(path, "run name", run.name)
    for qid, hits in run.results.items():
        check_trec_id(path, "query id", qid)
        for h in hits:
            check_trec_id(path, f"document id (query {qid!r})", h.pid)
    lines = []
    for qid, hits in run.results.items():
        scores = falling_scores([h.score for h in hits])
        lines += [f"{qid} Q0 {h.pid} {i + 1} {score:.9g} {run.name}\n" for i, (h, score) in enumerate(zip(hits, scores))]
    return "".join(lines)


_STEP = 1e-6  # relative: several units of float32 (trec_eval reads scores as floats) and of the 9 digits written


def falling_scores(scores: Sequence[float]) -> list[float]:
    """A ranking's scores, each written clearly below the one ranked above it: a score that ties (or tops, or comes
    within a step of) it, or is not finite (a candidate the pipeline did not return), becomes the one above less
    one step (a millionth of it). trec_eval sorts a run by score, as single-precision floats, breaking ties by
    document id, and would otherwise re-order capr's ranking; every other score is written as it is (9 digits)."""
    out: list[float] = []
    for score in scores:
        score = float(f"{float(score):.9g}")
        if out:
            step = max(abs(out[-1]) * _STEP, 1e-12)
            if not math.isfinite(score) or score > out[-1] - step:
                score = float(f"{out[-1] - step:.9g}")
        elif not math.isfinite(score):
            score = 0.0
        out.append(score)
    return out


def write_run(path: Path, run: Run) -> None:
    """The run as a TREC run file; refused, before anything is written, when an id or the run's name holds
    whitespace (see check_trec_id)."""
    text = trec_run_text(run, path)
    try:
        write_bytes(Path(path), text.encode())
    except OSError as e:
        raise CaprError(f"{path}: cannot write the run file: {e.strerror or e}") from None
