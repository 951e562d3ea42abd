"""CodiEsp dev, `capr cases similar -r bm25 --labelled` end to end on its two lists (issue 54): P@10 of the similar
cases, MAP and category MAP of the `codes` list (the coder's list: code assignment, CodiEsp's task) and, beside it,
of the `diagnoses` list (the differential, symptom codes last). 250 coded dev cases over a case index that holds dev
out; per-query rows to OUT.

    OMP_NUM_THREADS=1 python -m experiments.cases_codiesp_lists --index IDX --out OUT.json

IDX: `capr case-index --data-dir ../shared/data --out IDX --source e3c --source codiesp --max-tokens 256 --no-dense`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from capr.cases.data import CODIESP_FILE
from capr.cases.similar import CaseFinder
from capr.cases.similar_eval import score_code_ranking
from capr.corpus import Format, read_documents
from capr.index import Index


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--out")
    args = ap.parse_args()
    t = time.time()
    dev = [d for d in read_documents(Path(args.data_dir) / CODIESP_FILE, Format.codiesp)
           if d.metadata["split"] == "dev" and d.metadata.get("diagnoses")]
    finder = CaseFinder(Index.load(args.index), ("codiesp",))
    rows = []
    for d in dev:
        found = finder.similar(d.text, k=10, retriever="bm25", evidence=0, labelled_only=True, diagnoses=10**6)
        cases = [[x.code for x in c.diagnoses] for c in found.cases]
        gold = d.metadata["diagnoses"]
        codes = score_code_ranking(d.doc_id, gold, [x.code for x in found.codes], cases)
        dx = score_code_ranking(d.doc_id, gold, list(dict.fromkeys(x.code for x in found.diagnoses if x.code)), cases)
        rows.append({"qid": d.doc_id, "precision": codes.precision, "ap": codes.ap, "category_ap": codes.category_ap,
                     "dx_ap": dx.ap, "dx_category_ap": dx.category_ap})
    if args.out:
        Path(args.out).write_text(json.dumps(rows))

    def m(k: str) -> float:
        return 100 * float(np.mean([r[k] for r in rows]))

    print(f"{args.index}: n {len(rows)} P@10 {m('precision'):.2f}; codes: MAP {m('ap'):.2f} cat-MAP "
          f"{m('category_ap'):.2f}; diagnoses: MAP {m('dx_ap'):.2f} cat-MAP {m('dx_category_ap'):.2f} "
          f"({time.time() - t:.0f} s)")


if __name__ == "__main__":
    main()
