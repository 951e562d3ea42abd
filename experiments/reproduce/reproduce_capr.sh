#!/usr/bin/env bash
# Regenerates every label file, trained model and benchmark number of the CAPR section of docs/RESULTS.md.
#   bash experiments/reproduce/reproduce_capr.sh [OUT_DIR]        (default bench/out/capr; ~5 h on the 2-core CPU, far less on a GPU)
# Models are written to OUT_DIR (never committed); JSON results to OUT_DIR/logs.
# The RESULTS.md runs used OMP_NUM_THREADS=1 with two jobs side by side; time budgets are wall-clock, so a run alone
# on an idle machine gets more steps than the RESULTS rows report.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.venv/bin/capr
DATA=${CAPR_DATA_DIR:-../shared/data}
R=${1:-bench/out/capr}
L=$R/logs
mkdir -p "$L"

# --- labels (no annotation): MTSamples train notes (mtsamples-capr split) and MedQuAD minus the CDV test split
$C labels "$DATA/mtsamples/mtsamples.csv.gz" --split train --out "$R/mts_train.jsonl" --json > "$L/labels.mts_train.json"
$C labels "$DATA/mtsamples/mtsamples.csv.gz" --out "$R/mts_all.jsonl" --json > "$L/labels.mts_all.json"
$C labels "$DATA/medquad/MedQuAD.tar.gz" --exclude-medquad-test "$DATA" --max-tokens 400 --out "$R/mq_train.jsonl" --json > "$L/labels.mq_train.json"
$C labels "$DATA/medquad/MedQuAD.tar.gz" --exclude-medquad-test "$DATA" --strict --max-tokens 400 --out "$R/mq_strict.jsonl" --json > "$L/labels.mq_strict.json"

# --- (B) MedQuAD-train models
$C train bi --labels "$R/mq_train.jsonl" --out "$R/B_bi" --max-steps 350 --time-budget 30 --json > "$L/B_bi.train.json"
$C train cross --labels "$R/mq_train.jsonl" --out "$R/B_cross" --max-steps 250 --time-budget 10 --eval-every 50 --json > "$L/B_cross.train.json"
$C train poly --labels "$R/mq_train.jsonl" --out "$R/B_poly" --max-steps 100 --time-budget 8 --json > "$L/B_poly.train.json"
# stricter variant (no training document shares a focus entity with the test set): not yet reported in RESULTS.md
$C train bi --labels "$R/mq_strict.jsonl" --out "$R/B_strict_bi" --max-steps 100 --time-budget 8 --json > "$L/B_strict_bi.train.json"
# --- (A) MTSamples-only model
$C train bi --labels "$R/mts_train.jsonl" --out "$R/A_bi" --max-steps 250 --time-budget 20 --json > "$L/A_bi.train.json"

# --- medquad-cdv
for f in tuple question; do
  $C eval --benchmark medquad-cdv -r dense --model minilm --query-field $f --json > "$L/cdv.minilm.$f.json"
  for m in B_bi A_bi; do
    $C eval --benchmark medquad-cdv -r dense --model "$R/$m" --query-field $f --json > "$L/cdv.$m.$f.json"
  done
  $C eval --benchmark medquad-cdv -r dense --model "$R/B_bi" --reranker "cross:$R/B_cross" --rerank-depth 10 --query-field $f --json > "$L/cdv.B_bi+cross.$f.json"
  $C eval --benchmark medquad-cdv -r bm25 --reranker "poly:$R/B_poly" --rerank-depth 64 --query-field $f --json > "$L/cdv.B_poly.$f.json"
done
$C eval --benchmark medquad-cdv -r dense --model "$R/B_bi" --protocol full --json > "$L/cdv.B_bi.full.json"
$C eval --benchmark medquad-cdv -r dense --model "$R/B_strict_bi" --json > "$L/cdv.B_strict_bi.tuple.json"

# --- mtsamples-capr and MEDIQA 2019
$C eval --benchmark mtsamples-capr -r bm25 --json > "$L/mts.bm25.json"
for m in minilm "$R/A_bi" "$R/B_bi"; do
  $C eval --benchmark mtsamples-capr -r dense --model "$m" --json > "$L/mts.$(basename "$m").json"
done
for m in minilm "$R/A_bi" "$R/B_bi"; do
  $C eval --benchmark mediqa2019 --query-field question -r dense --model "$m" --json > "$L/mediqa.$(basename "$m").json"
done
$C eval --benchmark mediqa2019 --query-field question -r bm25 --json > "$L/mediqa.bm25.json"
$C eval --benchmark mediqa2019 --query-field question -r bm25 --reranker "cross:$R/B_cross" --rerank-depth 64 --json > "$L/mediqa.B_cross.json"

# --- dev-only ablations at a matched 25-step budget
$C train bi --labels "$R/mq_train.jsonl" --out "$R/abl_base" --max-steps 25 --eval-every 25 --json > "$L/abl_base.json"
$C train bi --labels "$R/mq_train.jsonl" --out "$R/abl_nomask" --no-multi-positive --max-steps 25 --eval-every 25 --json > "$L/abl_nomask.json"
$C train bi --labels "$R/mq_train.jsonl" --out "$R/abl_sep" --separate --max-steps 25 --eval-every 25 --json > "$L/abl_sep.json"
$C train cross --labels "$R/mq_train.jsonl" --out "$R/abl_cross_trunc" --truncate --max-steps 25 --eval-every 25 --json > "$L/abl_cross_trunc.json"
$C train cross --labels "$R/mq_train.jsonl" --out "$R/abl_cross_sel" --max-steps 25 --eval-every 25 --json > "$L/abl_cross_sel.json"

# --- document context (title) models, the weight-space merge, and the A-family poly/cross (second round)
$C train bi --labels "$R/mq_train.jsonl" --out "$R/B_ctx_bi" --context title --max-steps 1000 --time-budget 50 --json > "$L/B_ctx_bi.train.json"
$C train bi --labels "$R/mts_train.jsonl" --out "$R/A_ctx_bi" --context title --max-steps 1000 --time-budget 40 --json > "$L/A_ctx_bi.train.json"
$C train poly --labels "$R/mts_train.jsonl" --out "$R/A_ctx_poly" --context title --max-steps 1000 --time-budget 12 --json > "$L/A_ctx_poly.train.json"
$C train cross --labels "$R/mts_train.jsonl" --out "$R/A_ctx_cross" --context title --max-steps 1000 --time-budget 12 --eval-every 50 --json > "$L/A_ctx_cross.train.json"
$C train bi --labels "$R/mq_strict.jsonl" --out "$R/B_strict_ctx_bi" --context title --max-steps 1000 --time-budget 15 --json > "$L/B_strict_ctx_bi.train.json"
for m in B_ctx_bi A_ctx_bi; do   # writes $R/merges/<model>_a<alpha>; prints the dev table and the chosen alpha
  lab=$([ "$m" = B_ctx_bi ] && echo mq_train || echo mts_train)
  .venv/bin/python -m experiments.merge_alpha_dev --model "$R/$m" --labels "$R/$lab.jsonl" --alphas 0 0.5 0.75 1 --out-dir "$R/merges" > "$L/merge.$m.txt"
done
for f in tuple question; do
  for m in B_ctx_bi A_ctx_bi merges/B_ctx_bi_a0.75; do   # alpha chosen by merge_alpha_dev.py: B 0.75, A 1 (no merge)
    $C eval --benchmark medquad-cdv -r dense --model "$R/$m" --query-field $f --json > "$L/cdv.$(basename $m).$f.json"
  done
done
for m in B_ctx_bi A_ctx_bi B_bi; do
  $C eval --benchmark medquad-cdv -r dense --model "$R/$m" --protocol full --json > "$L/cdv.$m.full.json"
done
$C eval --benchmark medquad-cdv -r dense --model "$R/B_strict_ctx_bi" --json > "$L/cdv.B_strict_ctx_bi.tuple.json"
$C eval --benchmark medquad-cdv -r bm25 --reranker "poly:$R/A_ctx_poly" --rerank-depth 64 --json > "$L/cdv.A_ctx_poly.tuple.json"
$C eval --benchmark mtsamples-capr -r dense --model "$R/A_ctx_bi" --json > "$L/mts.A_ctx_bi.json"
$C eval --benchmark mtsamples-capr -r bm25 --reranker "poly:$R/A_ctx_poly" --rerank-depth 64 --json > "$L/mts.A_ctx_poly.json"
$C eval --benchmark mtsamples-capr -r dense --model "$R/A_ctx_bi" --reranker "cross:$R/A_ctx_cross" --rerank-depth 5 --json > "$L/mts.A_ctx_bi+cross.json"
$C eval --benchmark medquad-cdv -r dense --model "$R/A_ctx_bi" --reranker "cross:$R/A_ctx_cross" --rerank-depth 5 --json > "$L/cdv.A_ctx_bi+cross.tuple.json"
$C eval --benchmark mediqa2019-train --query-field question -r dense --model minilm --json > "$L/mediqa_train.minilm.json"
for m in B_ctx_bi A_ctx_bi merges/B_ctx_bi_a0.75; do
  $C eval --benchmark mediqa2019 --query-field question -r dense --model "$R/$m" --json > "$L/mediqa.$(basename $m).json"
done

# --- latency of ranking 2,048 candidates
.venv/bin/python -m bench.bench_rerank --bi "$R/B_bi" --poly "$R/B_poly" --cross "$R/B_cross" | tee "$L/bench_rerank.txt"
