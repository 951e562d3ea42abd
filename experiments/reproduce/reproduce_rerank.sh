#!/usr/bin/env bash
# Issue 18: the residual cross-encoder second stage, regenerated and measured (docs/RESULTS.md "Issue 18").
#   bash experiments/reproduce/reproduce_rerank.sh [OUT_DIR]      (default bench/out/rerank; ~3 h on the 2-core CPU, two jobs at a time)
# 1. the first stages: the B (MedQuAD minus the medquad-cdv test documents) and A (mtsamples-capr training notes)
#    bi-encoders with document context, as `capr adapt` trains them without inverse-cloze queries (OUT.adapt/trained);
# 2. a cross-encoder per family that learns a correction to its bi-encoder's scores (`--first-stage`), 40 minutes;
# 3. the benchmarks, the bi-encoder alone and re-ranked (top 20), and the latency bench.
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-bench/out/rerank}
DATA=${CAPR_DATA_DIR:-../shared/data}
C=.venv/bin/capr
mkdir -p "$R"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1

# --- 1. first stages (side by side; the budgets are wall clock)
$C adapt "$DATA/medquad/MedQuAD.tar.gz" --exclude-medquad-test "$DATA" --max-tokens 400 --time-budget 50 --ict-prob 0 \
  --free-text-dev mediqa2019-train --data-dir "$DATA" --out "$R/mq" --json > "$R/mq.json" 2> "$R/mq.err" &
$C adapt "$DATA/mtsamples/mtsamples.csv.gz" --split train --time-budget 40 --ict-prob 0 \
  --free-text-dev mediqa2019-train --data-dir "$DATA" --out "$R/mts" --json > "$R/mts.json" 2> "$R/mts.err" &
wait
B_BI="$R/mq.adapt/trained"; A_BI="$R/mts.adapt/trained"

# --- 2. residual cross-encoders (base model and document context come from the first stage)
$C train cross --labels "$R/mq.adapt/labels.jsonl" --first-stage "$B_BI" --out "$R/B_rcross" --max-steps 100000 \
  --time-budget 40 --eval-every 100 --patience 100 --json > "$R/B_rcross.train.json" 2> "$R/B_rcross.err" &
$C train cross --labels "$R/mts.adapt/labels.jsonl" --first-stage "$A_BI" --out "$R/A_rcross" --max-steps 100000 \
  --time-budget 40 --eval-every 100 --patience 100 --json > "$R/A_rcross.train.json" 2> "$R/A_rcross.err" &
wait

# --- 3. benchmarks: each bi-encoder alone, then re-ranked (top 20)
ev() { echo "# capr eval $*" >&2; $C eval --data-dir "$DATA" --json "$@"; }
{
  for f in tuple question; do
    ev --benchmark medquad-cdv --query-field $f -r dense --model "$B_BI"
    ev --benchmark medquad-cdv --query-field $f -r dense --model "$B_BI" --reranker "cross:$R/B_rcross" --rerank-depth 20
  done
  for s in mediqa2019 mediqa2019-train; do
    ev --benchmark $s --query-field question -r dense --model minilm --run-out "$R/$s.minilm.run"
    ev --benchmark $s --query-field question -r dense --model "$B_BI" --run-out "$R/$s.B_bi.run"
    ev --benchmark $s --query-field question -r dense --model "$B_BI" --reranker "cross:$R/B_rcross" --rerank-depth 20 \
      --run-out "$R/$s.B_rcross.run"
  done
} > "$R/B_eval.jsonl" &
{
  ev --benchmark medquad-cdv --query-field tuple -r dense --model "$A_BI"
  ev --benchmark medquad-cdv --query-field tuple -r dense --model "$A_BI" --reranker "cross:$R/A_rcross" --rerank-depth 20
  ev --benchmark mtsamples-capr -r dense --model "$A_BI"
  ev --benchmark mtsamples-capr -r dense --model "$A_BI" --reranker "cross:$R/A_rcross" --rerank-depth 20
} > "$R/A_eval.jsonl" &
wait

# --- latency, one query at a time through the Searcher (run alone)
.venv/bin/python -m bench.bench_second_stage --bi "$B_BI" --cross "$R/B_rcross" | tee "$R/latency.txt"
for s in mediqa2019 mediqa2019-train; do   # paired randomisation tests against zero-shot MiniLM
  for m in B_bi B_rcross; do echo "$s $m"; .venv/bin/python -m experiments.mediqa_paired "$R/$s.minilm.run" "$R/$s.$m.run" $s; done
done | tee "$R/mediqa_paired.txt"
