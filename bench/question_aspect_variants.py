"""Dev comparison behind the question patterns of capr.corpus.aspects.infer_aspect (issue 17, third part): the
default pipeline on medquad-dev questions and on medquad-docs-dev (whole untitled documents, grouped by document)
with the pattern list before this change, the kept list, the kept list plus "what is X → information", and that
plus a prior only for aspects that cover a share of the passages.

    CAPR_CACHE=... OMP_NUM_THREADS=1 .venv/bin/python bench/question_aspect_variants.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import capr.corpus.aspects as aspects  # noqa: E402
import capr.search as search_mod  # noqa: E402
from capr.eval.benchmarks import Protocol, QueryField, default_scorer, run_benchmark  # noqa: E402
from capr.eval.devsets import document_run, load_medquad_docs_dev  # noqa: E402
from capr.eval.metrics import evaluate  # noqa: E402
from capr.eval.runner import EvalConfig, load_benchmark  # noqa: E402
from capr.models.encoder import EncoderConfig, cache_root  # noqa: E402
from capr.records import qrels_as_dict  # noqa: E402
from capr.search import GroupBy, Searcher, SearchOptions  # noqa: E402

BEFORE = 11  # the first 11 patterns are the list before this change
INFO = (re.compile(r"^\W*(what (is|are)( \(are\))?|do you have information about|tell me about)\b", re.I), "information")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    kept = list(aspects._QUESTION_ASPECTS)
    mq = load_benchmark(EvalConfig(benchmark="medquad-dev", data_dir=args.data_dir, query_field="question",
                                   pipeline="default"))
    docs = load_medquad_docs_dev(args.data_dir, cache_root() / "bench" / "medquad-docs-dev" / "default",
                                 dense=EncoderConfig())
    qrels = qrels_as_dict(docs.qrels)
    prior = search_mod.Searcher.prior_aspect

    def prior_with_share(min_share: float):
        def read(self, aspect):
            a = prior(self, aspect)
            if a is None or not min_share:
                return a
            return a if self.store.aspect_counts().get(a, 0) / self.store.live_count() >= min_share else None
        return read

    variants = [("before", kept[:BEFORE], 0.0), ("kept", kept, 0.0), ("kept + information", kept + [INFO], 0.0),
                ("kept + information, aspect on >= 2% of passages", kept + [INFO], 0.02),
                ("kept + information, aspect on >= 5% of passages", kept + [INFO], 0.05)]
    try:
        for name, patterns, share in variants:
            aspects._QUESTION_ASPECTS[:] = patterns
            search_mod.Searcher.prior_aspect = prior_with_share(share)
            m, _ = run_benchmark(mq, default_scorer(mq, QueryField.question), Protocol.rerank64, QueryField.question)
            searcher = Searcher(docs.index)
            opts = SearchOptions(k=10, group_by=GroupBy.doc, highlights=False)
            ranked = {q.qid: [h.passage.doc_id for h in searcher.search(q, opts).hits] for q in docs.queries}
            dm = evaluate(document_run(ranked), qrels)
            p1 = 100 * sum(bool(r) and qrels[q].get(r[0], 0) > 0 for q, r in ranked.items()) / len(ranked)
            print(json.dumps({"variant": name, "medquad-dev question R@1": m["R@1"], "MAP": m["MAP"],
                              "medquad-docs-dev P@1": round(p1, 2), "MAP (docs)": dm["MAP"]}), flush=True)
    finally:
        aspects._QUESTION_ASPECTS[:] = kept
        search_mod.Searcher.prior_aspect = prior


if __name__ == "__main__":
    main()
