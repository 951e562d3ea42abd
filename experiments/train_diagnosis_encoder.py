"""Trains the diagnosis encoder (capr.cases.train_diagnoses, the library function behind `capr train diagnoses`) on
CodiEsp train codes + mentions in E3C and CodiEsp background — never CodiEsp dev — for a fixed time budget, then
`python -m experiments.cases_similar_dev --model trained=DIR`. The same run from the CLI:

    capr train diagnoses --out DIR --time-budget 15 --max-steps 100000 [--codes-only]

    PYTHONPATH=src CAPR_CACHE=/work/cache-cases/capr-cache OMP_NUM_THREADS=1 nice -n 10 \\
      python -m experiments.train_diagnosis_encoder --out /work/cache-cases/diag-enc --minutes 15
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from capr.cases.train_diagnoses import DiagnosisArgs, train_diagnoses


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--codes-only", action="store_true", help="no mention pairs")
    args = ap.parse_args()
    res = train_diagnoses(args.data_dir, args.out, DiagnosisArgs(time_budget_min=args.minutes, lr=args.lr,
                                                                 batch_size=args.batch_size, max_length=args.max_length),
                          codes_only=args.codes_only, progress=False, log=lambda m: print(m, flush=True))
    print(json.dumps({"steps": res.steps, "seconds": round(res.seconds), "stopped": res.stopped,
                      "loss_first": res.losses[0], "loss_last20": sum(res.losses[-20:]) / len(res.losses[-20:])}))


if __name__ == "__main__":
    main()
