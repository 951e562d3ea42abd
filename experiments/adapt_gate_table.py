"""The gate's dev table for models trained by `capr adapt` (or `capr train bi`) — what was tried, scored on the
same checks the gate uses: held-out self-labelled queries searched as the index will (with --corpus) and re-ranked
on a pool (with and without titles), the inverse-cloze check and free-text dev sets. Merges with the start model are made for the given α (never a test set in sight).

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.adapt_gate_table --labels RUN.adapt/labels.jsonl \\
        --trained no-ICT=OLD.adapt/trained --trained ICT=RUN.adapt/trained --alphas 0.75 0.5 0.25 \\
        --free-text-dev mediqa2019-train --data-dir ../shared/data
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from capr.adapt.gate import (START, Candidate, check_under_fusion, choose_fusion, fusion_with_share, gate,
                             score_candidates)
from capr.adapt.pipeline import AdaptConfig, gate_checks, held_out_fraction, read_corpus
from capr.corpus import ReadReport
from capr.labels.generate import read_labels
from capr.train import ModelKind, TrainArgs
from capr.train.merge import merge_with_start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", type=Path, required=True)
    ap.add_argument("--trained", action="append", default=[], help="NAME=MODEL_DIR (repeatable)")
    ap.add_argument("--alphas", type=float, nargs="*", default=[0.75, 0.5, 0.25])
    ap.add_argument("--free-text-dev", action="append", default=[])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--dense-weights", type=float, nargs="*", default=[0.5, 0.67, 0.8, 0.9, 1.0])
    ap.add_argument("--corpus", action="append", default=[],
                    help="the corpus the labels came from (as given to capr adapt): the searched check needs its "
                         "documents; without it the gate's pool check decides, as before")
    ap.add_argument("--split", default=None)
    ap.add_argument("--exclude-medquad-test", default=None)
    ap.add_argument("--max-tokens", type=int, default=200)
    args = ap.parse_args()
    records = list(read_labels(args.labels))
    config = AdaptConfig(corpora=args.corpus, out="", free_text=tuple(args.free_text_dev), data_dir=args.data_dir,
                         seed=args.seed, split=args.split, exclude_medquad_test=args.exclude_medquad_test,
                         max_tokens=args.max_tokens)
    docs = read_corpus(config, ReadReport(), log=lambda m: print(f"# {m}", file=sys.stderr)) if args.corpus else []
    targs = TrainArgs.for_kind(ModelKind.bi, context=config.context, seed=args.seed)
    targs.dev_fraction = held_out_fraction(len(records))
    checks, held_out = gate_checks(records, targs, config, docs)
    print(f"# {len(records):,} labeled passages, {len(held_out):,} held out; checks: "
          + "; ".join(f"{c.name} [{c.side}, {c.primary}, {len(c)} queries]" for c in checks), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="gate-table-"))
    for spec in args.trained:
        name, model = spec.split("=", 1)
        cands = [Candidate(START, "minilm", 0.0), Candidate(f"{name} trained", model, 1.0)]
        for a in args.alphas:
            out = tmp / f"{name}-{a:g}"
            merge_with_start(model, out, a)
            cands.append(Candidate(f"{name} merge α={a:g}", str(out), a))
        score_candidates(cands, checks, log=lambda m: print(f"# {m}", file=sys.stderr), work=tmp / f"{name}-gate")
        kept, why = gate(cands, checks, min_gain=config.min_gain, margin=config.free_text_margin)
        for title, attr in (("ranked as the index searches (BM25 + model, default fusion; the gate's)", "scores"),
                            ("the model alone", "dense")):
            print(f"\n{title}\n\n| candidate | " + " | ".join(f"{c.name} ({c.primary})" for c in checks) + " |")
            print("|---|" + "---:|" * len(checks))
            for c in cands:
                print(f"| {c.name}{' ← gate keeps' if c is kept else ''} | "
                      + " | ".join(f"{getattr(c, attr).mean(ch.name, ch.primary):.2f}" for ch in checks) + " |")
        print(f"\ngate: {why}", flush=True)
        print("\nevery candidate at every dense share of the fusion (primary metric)\n\n| candidate | share | "
              + " | ".join(ch.name for ch in checks) + " |\n|---|---:|" + "---:|" * len(checks))
        for c in cands:
            for w in args.dense_weights:
                fusion = fusion_with_share(w)
                print(f"| {c.name} | {w:g} | " + " | ".join(
                    f"{check_under_fusion(ch, c, fusion)[ch.primary].mean():.2f}" for ch in checks) + " |")
        if kept.alpha > 0:
            fusion = choose_fusion(kept, cands[0], checks, config.dense_weights, config.min_gain, config.free_text_margin)
            print("\n| dense share | " + " | ".join(ch.name for ch in checks) + " |\n|---|" + "---:|" * len(checks))
            for w, row in fusion["table"].items():
                print(f"| {w} | " + " | ".join(f"{row[ch.name]:.2f}" for ch in checks) + " |")
            print(f"\nfusion: {fusion['weights']} ({fusion['reason']})", flush=True)


if __name__ == "__main__":
    main()
