#!/usr/bin/env bash
# Regenerates the CDV models and numbers of docs/RESULTS.md (issue 4). Needs the label files of
# experiments/reproduce/reproduce_capr.sh (same OUT_DIR).   bash experiments/reproduce/reproduce_cdv.sh [OUT_DIR]   (default bench/out/capr)
# One OpenMP thread per process: on a shared 2-core machine spinning threads made every step 3-5x slower.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
C=.venv/bin/capr
R=${1:-bench/out/capr}
L=$R/logs
mkdir -p "$L"
python3 - "$R" <<'PY'
import json, sys, zlib   # a third of the MedQuAD-train documents (by doc-id hash) for the MiniLM run
r = sys.argv[1]
with open(f"{r}/mq_train_third.jsonl", "w") as out:
    for line in open(f"{r}/mq_train.jsonl"):
        if zlib.crc32(json.loads(line)["doc_id"].encode()) % 3 == 0:
            out.write(line)
PY
$C train cdv --labels "$R/mq_train.jsonl" --out "$R/cdv_B_static" --encoder-backend static --max-steps 3000 --time-budget 20 --eval-every 50 --json > "$L/cdv_B_static.train.json"
$C train cdv --labels "$R/mts_train.jsonl" --out "$R/cdv_A_static" --encoder-backend static --max-steps 3000 --time-budget 15 --eval-every 50 --json > "$L/cdv_A_static.train.json"
$C train cdv --labels "$R/mq_train_third.jsonl" --out "$R/cdv_B_minilm" --max-steps 3000 --time-budget 12 --eval-every 50 --json > "$L/cdv_B_minilm.train.json"
for m in cdv_B_static cdv_A_static cdv_B_minilm; do
  $C eval --benchmark medquad-cdv --protocol rerank64 --query-field tuple --cdv "$R/$m" --boundaries free --json > "$L/eval.$m.json"
  .venv/bin/python -m experiments.cdv_boundaries_dev --model "$R/$m" --labels "$R/$( [ $m = cdv_A_static ] && echo mts_train || echo mq_train ).jsonl" > "$L/boundaries.$m.md"
done
