"""Choose the WiSE-FT merge weight α of a trained bi-encoder on dev data only (issue 8).

For each α, `capr merge` writes θ = (1−α)·θ_start + α·θ_trained and two dev sets score it:
  - tuple dev: the trainer's own held-out documents of the labels file (same split, same hard candidates as early
    stopping; for a MedQuAD-trained model these documents were never trained on, and no test document is in it);
  - MEDIQA 2019 training set 2 (104 free-text questions; the validation set stays untouched).
Rule, fixed before looking at any number: the largest α whose MEDIQA-train MAP is within 0.5 points of α = 0 (the
start model's free-text skill) — ties to in-domain quality, never to a test set.

    .venv/bin/python -m experiments.merge_alpha_dev --model B_ctx_bi --labels mq_train.jsonl --out-dir merges
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np


def tuple_dev(model: Path, labels: Path, card: dict) -> dict[str, float]:
    from capr.labels.generate import read_labels
    from capr.models.encoder import Encoder, EncoderConfig
    from capr.train.args import TrainArgs
    from capr.train.data import TrainingSet
    from capr.train.loop import dev_metrics

    a = dict(card["args"])
    args = TrainArgs(**{k: v for k, v in a.items() if k in TrainArgs.__dataclass_fields__})
    data = TrainingSet(read_labels(labels), args)
    dev = data.dev_set(512, n_candidates=32, seed=args.seed)
    enc = Encoder(EncoderConfig(model=str(model)), cache=False)
    qv = enc.encode_queries(dev.queries)
    pv = enc.encode_passages(dev.passages)
    sims = qv @ pv.T
    return dev_metrics([sims[i, c] for i, c in enumerate(dev.candidates)], dev.relevant)


def mediqa_train(model: Path, data_dir: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "capr", "eval", "--benchmark", "mediqa2019-train", "--query-field",
                          "question", "-r", "dense", "--model", str(model), "--data-dir", data_dir, "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["metrics"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--labels", type=Path, required=True, help="the labels file the model was trained on")
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--data-dir", default="../shared/data")
    a = ap.parse_args()
    card = json.loads((a.model / "capr.json").read_text())
    rows = []
    for alpha in a.alphas:
        target = a.out_dir / f"{a.model.name}_a{alpha:g}"
        if alpha == 1.0:
            target = a.model
        elif not (target / "capr.json").exists():
            subprocess.run([sys.executable, "-m", "capr", "merge", str(a.model), "--alpha", str(alpha), "--out",
                            str(target)], check=True)
        t = tuple_dev(target, a.labels, card)
        m = mediqa_train(target, a.data_dir)
        rows.append({"alpha": alpha, "model": str(target), "dev_R@1": round(t["R@1"], 2), "dev_MRR": round(t["MRR"], 2),
                     "mediqa_train_MAP": m["MAP"], "mediqa_train_P@1": m["P@1"]})
        print(json.dumps(rows[-1]), flush=True)
    floor = next(r["mediqa_train_MAP"] for r in rows if r["alpha"] == min(a.alphas)) - 0.5
    ok = [r for r in rows if r["mediqa_train_MAP"] >= floor]
    pick = max(ok, key=lambda r: r["alpha"]) if ok else min(rows, key=lambda r: r["alpha"])
    print("\n| α | tuple dev R@1 | tuple dev MRR | MEDIQA-train MAP | MEDIQA-train P@1 |\n|---:|---:|---:|---:|---:|")
    for r in rows:
        mark = " **(chosen)**" if r is pick else ""
        print(f"| {r['alpha']:g}{mark} | {r['dev_R@1']:.2f} | {r['dev_MRR']:.2f} | {r['mediqa_train_MAP']:.2f} | {r['mediqa_train_P@1']:.2f} |")
    print(f"\nchosen α = {pick['alpha']:g} → {pick['model']}")


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
