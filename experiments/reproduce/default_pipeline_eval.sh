#!/usr/bin/env bash
# Issue 16: `capr eval --pipeline default` (exactly capr search's defaults: hybrid over BM25 + MiniLM vectors,
# entity first, aspect prior) next to the protocol rows it must beat (BM25, MiniLM dense), on every passage benchmark.
# Usage: bash experiments/reproduce/default_pipeline_eval.sh [OUT.jsonl]; needs .venv and ../shared/data. One thread.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/out/default_pipeline.jsonl}
mkdir -p "$(dirname "$OUT")"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
run() { echo "# capr eval $*" >&2; .venv/bin/python -m capr eval --data-dir ../shared/data --json "$@" | tee -a "$OUT"; }
for f in tuple question; do
  for p in rerank64 full; do
    run --benchmark medquad-cdv --query-field $f --protocol $p --pipeline default
    run --benchmark medquad-cdv --query-field $f --protocol $p -r bm25
    run --benchmark medquad-cdv --query-field $f --protocol $p -r dense
  done
done
for p in rerank64 full; do
  run --benchmark mtsamples-capr --protocol $p --pipeline default
  run --benchmark mtsamples-capr --protocol $p -r bm25
  run --benchmark mtsamples-capr --protocol $p -r dense
done
for b in mediqa2019 mediqa2019-train; do
  run --benchmark $b --query-field question --pipeline default
  run --benchmark $b --query-field question -r bm25
  run --benchmark $b --query-field question -r dense
done
