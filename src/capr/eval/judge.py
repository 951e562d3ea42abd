"""A ranking judged against judgements, wherever both came from: ``capr eval --run RUN --qrels QRELS`` scores a TREC
run file (``capr search --queries --run-out``'s, or another system's) as trec_eval scores it, over every judged
query, and compares two runs of the same queries with a paired randomisation test. Benchmarks (``capr eval
--benchmark``) judge their runs with the same functions.

    metrics = score_run(read_run(Path("run.trec")), read_qrels_file(Path("qrels.txt")))
"""

from __future__ import annotations

from typing import Any, Sequence

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


__all__ = ["compare_scored", "run_coverage", "score_run"]
