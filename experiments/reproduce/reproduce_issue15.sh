#!/usr/bin/env bash
# The benchmark numbers issue 15 (one search pipeline) must reproduce to the last digit, for one checkout.
# Usage: bash experiments/reproduce/reproduce_issue15.sh [SRC_DIR] [OUT.jsonl]   (SRC_DIR: a checkout's src/, default ./src)
# Needs .venv, .venv-milvus (make test builds both) and ../shared/data. One thread; ~45 min on a 2-core CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-$PWD/src}
OUT=${2:-bench/out/issue15.jsonl}
mkdir -p "$(dirname "$OUT")"
export PYTHONPATH="$SRC" OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
PY=.venv/bin/python
D=../shared/data
run() { echo "# capr eval $*" >&2; $PY -m capr eval --data-dir $D --json "$@" | tee -a "$OUT"; }
for f in tuple question; do
  for r in bm25 tfidf dense hybrid; do run --benchmark medquad-cdv --protocol rerank64 --query-field $f -r $r; done
done
for r in bm25 dense; do run --benchmark mtsamples-capr -r $r; done
for r in bm25 dense; do run --benchmark mediqa2019 --query-field question -r $r; done
if [ -n "${CASE_INDEX:-}" ]; then run --benchmark medqa-dev -r bm25 --index "$CASE_INDEX"; fi
# Milvus Lite 2.5.1 as a gRPC server on loopback (the launcher the tests use)
W=$(mktemp -d)
PORT=$($PY -c 'from capr.store.local_servers import free_port; print(free_port())')
tail -f /dev/null | .venv-milvus/bin/python "$SRC/capr/store/local_servers.py" lite "$W/capr.db" "$PORT" >/dev/null 2>"$W/lite.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; pkill -f "local_servers.py lite $W" 2>/dev/null; rm -rf "$W"' EXIT
for i in $(seq 120); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 1; done
for f in tuple question; do
  for r in bm25 dense hybrid; do
    run --benchmark medquad-cdv --protocol rerank64 --query-field $f -r $r --backend milvus --uri http://127.0.0.1:$PORT
  done
done
