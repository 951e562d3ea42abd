"""A ranking judged against judgements, wherever both came from: ``capr eval --run RUN --qrels QRELS`` scores a TREC
run file (``capr search --queries --run-out``'s, or another system's) as trec_eval scores it, over every judged
query, and compares two runs of the same queries with a paired randomisation test. Benchmarks (``capr eval
--benchmark``) judge their runs with the same functions.

    result = judge_run_files(Path("run.trec"), Path("qrels.txt"), compare_file=Path("bm25.trec"))
    result["metrics"]["nDCG@10"], result["compare"]["nDCG@10"]["p"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from capr.errors import CaprError
from capr.eval.metrics import METRICS, evaluate, per_query_metrics
from capr.records import Qrel, Run, qrels_as_dict


def run_coverage(run: Run, qrels: Sequence[Qrel], where: str, judged: str = "the judgements",
                 needs: str = "a run of the same queries") -> list[str]:
    """Whether ``run`` ranks the judged queries: none of them is an error (a run of other queries would score 0
    everywhere). Warnings: some queries missing (each counts 0); none of the judged ids ranked at all (a run of
    passages judged by document, say)."""
    judged_ids = {q.qid for q in qrels}
    missing = judged_ids - set(run.results)
    if missing == judged_ids:
        raise CaprError(f"{where}: none of its {len(run.results)} queries is a judged query of {judged} "
                        f"({len(judged_ids)} queries); {needs}")
    said = []
    if missing:
        said.append(f"{where}: {len(missing)} of {len(judged_ids)} judged queries have no results in it (e.g. "
                    f"{sorted(missing)[0]!r}); they count as 0 for it")
    pairs = {(q.qid, q.pid) for q in qrels}
    if not any((qid, h.pid) in pairs for qid, hits in run.results.items() for h in hits):
        ranked = next((h.pid for hits in run.results.values() for h in hits), None)
        said.append(f"{where}: it ranks none of the ids that {judged} judge (it ranks e.g. {ranked!r}, they name "
                    f"e.g. {qrels[0].pid!r}), so every metric is 0; judgements of documents need a run of documents "
                    "(capr search --queries FILE --group-by doc)")
    return said


def score_run(run: Run, qrels: Sequence[Qrel], names: Sequence[str] = METRICS) -> dict[str, float]:
    """Mean metrics (percent) of ``run`` over every judged query; a query it lacks scores 0."""
    return evaluate(run.as_scores(), qrels_as_dict(list(qrels)), names)


def compare_scored(run: Run, other: Run, qrels: Sequence[Qrel], names: Sequence[str] = METRICS) -> dict[str, Any]:
    """Each metric of ``run`` and ``other`` per judged query, with the two-sided paired randomisation test
    (capr.eval.significance): the means, p, and how many queries each run does better on."""
    from capr.eval.significance import paired_randomisation_p as paired_p

    judged = qrels_as_dict(list(qrels))
    missing = sorted(set(judged) - set(other.results))
    ours, theirs = per_query_metrics(run.as_scores(), judged, names), per_query_metrics(other.as_scores(), judged, names)
    out: dict[str, Any] = {"run": other.name, "queries": len(judged), "queries_missing_in_run": len(missing)}
    for m in names:
        a, b = np.asarray(ours[m]), np.asarray(theirs[m])
        out[m] = {"this": round(float(a.mean()), 2), "compared": round(float(b.mean()), 2),
                  "p": round(paired_p(a, b), 4), "better": int((a > b + 1e-9).sum()), "worse": int((a < b - 1e-9).sum())}
    return out


def judge_run_files(run_file: Path, qrels_file: Path, compare_file: Path | None = None,
                    warn: Callable[[str], None] | None = None, names: Sequence[str] = METRICS) -> dict[str, Any]:
    """``capr eval --run --qrels [--compare]``: the run file scored against the judgements file (TREC's or BEIR's
    layout), with a second run compared; what makes the numbers say less than they seem is said through ``warn``."""
    from capr.eval.runs import read_qrels, read_run

    for path, what in ((run_file, "--run"), (qrels_file, "--qrels"), (compare_file, "--compare")):
        if path is not None and not Path(path).is_file():
            raise CaprError(f"{path}: no such file ({what})")
    say = warn or (lambda message: None)
    judged = read_qrels(Path(qrels_file), warn=warn)
    run = read_run(Path(run_file), warn=warn)
    compared = read_run(Path(compare_file), warn=warn) if compare_file is not None else None
    for message in run_coverage(run, judged, str(run_file), str(qrels_file)):
        say(message)
    if compared is not None:
        for message in run_coverage(compared, judged, f"{compare_file} (--compare)", str(qrels_file)):
            say(message)
    result: dict[str, Any] = {"run": str(run_file), "qrels": str(qrels_file), "queries": len({q.qid for q in judged}),
                              "metrics": score_run(run, judged, names)}
    if compared is not None:
        result["compare"] = {**compare_scored(run, compared, judged, names), "file": str(compare_file)}
    return result


__all__ = ["compare_scored", "judge_run_files", "run_coverage", "score_run"]
