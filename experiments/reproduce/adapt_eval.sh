#!/usr/bin/env bash
# Issue 17: `capr adapt` on MedQuAD minus the medquad-cdv test documents and on the mtsamples-capr training notes,
# then the acceptance evaluations — the default pipeline (`capr eval --pipeline default --model INDEX`: exactly what
# `capr search` does on the adapted index) next to the zero-shot default, and the free-text checks.
#   bash experiments/reproduce/adapt_eval.sh [OUT_DIR]     (default bench/out/adapt; ~2 h on the 2-core CPU, two jobs side by side)
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-bench/out/adapt}
DATA=${CAPR_DATA_DIR:-../shared/data}
C=.venv/bin/capr
mkdir -p "$R"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1

# --- the two adaptations, side by side (time budgets are wall clock)
$C adapt "$DATA/medquad/MedQuAD.tar.gz" --exclude-medquad-test "$DATA" --max-tokens 400 --time-budget 50 \
  --free-text-dev mediqa2019-train --data-dir "$DATA" --out "$R/mq" --json > "$R/mq.json" 2> "$R/mq.err" &
$C adapt "$DATA/mtsamples/mtsamples.csv.gz" --split train --time-budget 40 \
  --free-text-dev mediqa2019-train --data-dir "$DATA" --out "$R/mts" --json > "$R/mts.json" 2> "$R/mts.err" &
wait

# --- medquad-cdv and mtsamples-capr: the default pipeline on the adapted indexes' encoders
ev() { echo "# capr eval $*" >&2; $C eval --data-dir "$DATA" --json "$@"; }
{
  for f in tuple question; do ev --benchmark medquad-cdv --query-field $f --pipeline default --model "$R/mq"; done
  ev --benchmark medquad-cdv --query-field tuple --protocol full --pipeline default --model "$R/mq"
} > "$R/cdv.jsonl" &
{
  ev --benchmark mtsamples-capr --protocol full --pipeline default --model "$R/mts"
  ev --benchmark mtsamples-capr --protocol full --pipeline default
} > "$R/mts_eval.jsonl" &
wait

# --- free text: MEDIQA 2019 validation and training set 2, consumer-dev with and without titles
.venv/bin/python -m experiments.adapt_free_text --model "adapted-medquad=$R/mq" --model "adapted-mtsamples=$R/mts" \
  > "$R/free_text.txt"
