#!/usr/bin/env bash
# Issue 18: the ensemble second stage (zero-shot MiniLM + the trained bi-encoder, each passage read by its best
# window), regenerated and measured (docs/RESULTS.md, issues 17 and 18, seventh part).
#   bash experiments/reproduce/reproduce_second_stage.sh [OUT_DIR]     (default bench/out/second_stage; ~2.5 h on the 2-core CPU)
# 1. the trained members: capr adapt's bi-encoders (B: MedQuAD minus the medquad-cdv test documents; A: the
#    mtsamples-capr training notes), side by side, each within its --time-budget;
# 2. each bi-encoder alone and re-ranked by the ensemble (top 20) in the default pipeline, MiniLM dense on MEDIQA;
# 3. paired tests and the latency bench.
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-bench/out/second_stage}
DATA=${CAPR_DATA_DIR:-../shared/data}
C=.venv/bin/capr
mkdir -p "$R"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1

$C adapt "$DATA/medquad/MedQuAD.tar.gz" --exclude-medquad-test "$DATA" --max-tokens 400 --time-budget 50 \
  --free-text-dev mediqa2019-train --data-dir "$DATA" --out "$R/mq" --json > "$R/mq.json" 2> "$R/mq.err" &
$C adapt "$DATA/mtsamples/mtsamples.csv.gz" --split train --time-budget 40 \
  --free-text-dev mediqa2019-train --data-dir "$DATA" --out "$R/mts" --json > "$R/mts.json" 2> "$R/mts.err" &
wait
B="$R/mq.adapt/trained"; A="$R/mts.adapt/trained"; E="bi:minilm,bi:$B"; EA="bi:minilm,bi:$A"

ev() { echo "# capr eval $*" >&2; $C eval --data-dir "$DATA" --json "$@"; }
{
  for s in mediqa2019 mediqa2019-train; do
    ev --benchmark $s --query-field question -r dense --model minilm --run-out "$R/$s.minilm_dense.run"
    ev --benchmark $s --query-field question --pipeline default --model "$B" --run-out "$R/$s.B.run"
    ev --benchmark $s --query-field question --pipeline default --model "$B" --reranker "$E" --run-out "$R/$s.B_E.run"
  done
  for f in tuple question; do
    ev --benchmark medquad-cdv --query-field $f --pipeline default --model "$B" --run-out "$R/cdv_$f.B.run"
    ev --benchmark medquad-cdv --query-field $f --pipeline default --model "$B" --reranker "$E" --run-out "$R/cdv_$f.B_E.run"
  done
} > "$R/B_eval.jsonl" &
{
  ev --benchmark medquad-cdv --query-field tuple --pipeline default --model "$A" --reranker "$EA"
  ev --benchmark mtsamples-capr --pipeline default --model "$A"
  ev --benchmark mtsamples-capr --pipeline default --model "$A" --reranker "$EA"
} > "$R/A_eval.jsonl" &
wait

P=".venv/bin/python -m experiments.paired_runs"
{
  for s in mediqa2019 mediqa2019-train; do
    $P --benchmark $s --baseline "$R/$s.minilm_dense.run" --run "B=$R/$s.B.run" --run "B_E=$R/$s.B_E.run"
  done
  for f in tuple question; do $P --benchmark medquad-cdv --baseline "$R/cdv_$f.B.run" --run "B_E=$R/cdv_$f.B_E.run"; done
} | tee "$R/paired.txt"
# what the windows change, the same models otherwise (windows off vs each window read with its context)
.venv/bin/python -m experiments.rerank_windows_dev --case "B=$E@$B" --sets mediqa2019:question,medquad-cdv:tuple,medquad-cdv:question \
  --modes off,context | tee "$R/windows.txt"
# latency, one query at a time (run alone)
.venv/bin/python -m bench.bench_second_stage --bi "$B" --reranker "$E" --queries 30 --depths 20 100 | tee "$R/latency.txt"
