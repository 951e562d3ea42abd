#!/usr/bin/env bash
# Regenerates the similar-case models and numbers of docs/RESULTS.md (issue 5), sequentially:
#   bash experiments/reproduce/reproduce_cases.sh [OUT_DIR]      (default bench/out/cases; ~2 h on a 2-core CPU)
# The measured run used two lanes of one OpenMP thread each (TSDAE beside the RQE pre-training, the
# BM25/dense/pre-trained-CE evaluations beside the distant supervision); the commands are the same.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
C=.venv/bin/capr
R=${1:-bench/out/cases}
D=../shared/data
mkdir -p "$R/ev"
$C train tsdae cases:$D --out "$R/tsdae" --time-budget 20 --max-steps 100000 --json > "$R/tsdae.json"
$C train cases --stage pretrain --data-dir $D --out "$R/ce-rqe" --time-budget 25 --max-steps 100000 --json > "$R/ce-rqe.json"
OMP_NUM_THREADS=2 $C case-index --data-dir $D --out "$R/case-idx" --model "$R/tsdae"
$C train cases --stage distant --pretrained "$R/ce-rqe" --index "$R/case-idx" --data-dir $D --out "$R/ce-cases" \
  --questions 1200 --dense-k 5 --top-k 1 --max-steps 100000 --time-budget 25 --json > "$R/ce-cases.json"
for b in medqa-dev headqa medmcqa-dev; do
  for r in bm25 dense; do
    $C eval --benchmark $b --data-dir $D --index "$R/case-idx" -r $r --fallback text --json --run-out "$R/ev/$b.$r.jsonl" > "$R/ev/$b.$r.json"
  done
  for m in rqe:ce-rqe distant:ce-cases; do
    $C eval --benchmark $b --data-dir $D --index "$R/case-idx" --reranker "cross:$R/${m#*:}" --dense-k 5 --fallback text --json \
      --run-out "$R/ev/$b.${m%%:*}.jsonl" > "$R/ev/$b.${m%%:*}.json"
  done
done
.venv/bin/python -m experiments.cases_table "$R"/ev/*.jsonl
for b in medqa-dev headqa medmcqa-dev; do
  .venv/bin/python -m experiments.cases_paired "$R/ev/$b.bm25.jsonl" "$R/ev/$b.distant.jsonl"
done
