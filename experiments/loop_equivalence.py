"""Issue 15: does a refactor of the training code change what training does? Runs every capr trainer for a few
steps with fixed seeds on tiny planted data (the Python API and the `capr train` CLI), and records the per-step
losses (full float precision), dev evaluations, stop reason, kept step, the model card without its clock fields,
and a digest of every saved weight tensor. Run it on two checkouts and compare:

    OMP_NUM_THREADS=1 PYTHONPATH=OLD/src python -m experiments.loop_equivalence --out before.json
    OMP_NUM_THREADS=1 PYTHONPATH=NEW/src python -m experiments.loop_equivalence --out after.json
    python -m experiments.loop_equivalence --compare before.json after.json

One thread and a fresh embedding cache per run keep the numbers reproducible (a cache hit can hand the CDV trainer
an embedding computed in another batch, i.e. with other padding, which differs in the last float bits)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# clock and version fields differ between any two runs; everything else in a card must match
VOLATILE = {"created", "seconds", "capr_version", "labels_file", "encoder"}

DISEASES = ["Zorvex syndrome", "Kalimba fever", "Dunmore disease", "Ostrava palsy", "Venn anemia", "Brisk pox",
            "Tolland ataxia", "Marrow cough"]
ASPECTS = {
    "symptoms": ("{d} causes itching of the palms and night sweats.", "Patients also notice a hoarse voice."),
    "treatment": ("{d} is treated with rest and oral steroids.", "Most people recover within two weeks of therapy."),
    "causes": ("{d} is caused by a mutation in a single gene.", "The faulty gene is inherited from one parent."),
}


def labels(copies: int) -> list:
    """`copies` documents per disease (distinct ids, so the document-level dev split has something to hold out)."""
    from capr.labels.generate import LabeledPassage

    out = []
    for c in range(copies):
        for i, d in enumerate(DISEASES):
            for aspect, (a, b) in ASPECTS.items():
                first = a.format(d=d)
                t = f"{first} {b}"
                out.append(LabeledPassage(pid=f"d{i}c{c}-{aspect}", doc_id=f"d{i}c{c}", text=t, aspect=aspect,
                                          entities=[d], title=d, heading=aspect.title(),
                                          sentences=[(0, len(first)), (len(first) + 1, len(t))]))
    return out


def weights_digest(folder: Path) -> dict[str, str]:
    """sha1 of every tensor in every weight file under `folder` (file bytes could differ in metadata only)."""
    import torch
    from safetensors.torch import load_file

    out = {}
    for f in sorted(folder.rglob("*")):
        if f.suffix == ".safetensors":
            tensors = load_file(str(f))
        elif f.suffix in (".pt", ".bin"):
            obj = torch.load(str(f), map_location="cpu", weights_only=False)
            tensors = obj if isinstance(obj, dict) else {"": obj}
        else:
            continue
        h = hashlib.sha1()
        for k in sorted(tensors):
            v = tensors[k]
            if isinstance(v, torch.Tensor):
                h.update(k.encode())
                h.update(v.detach().cpu().contiguous().numpy().tobytes())
        out[str(f.relative_to(folder))] = h.hexdigest()
    return out


def card_of(folder: Path) -> dict[str, Any]:
    c = json.loads((folder / "capr.json").read_text())
    return {k: v for k, v in c.items() if k not in VOLATILE}


def record(result: Any, folder: Path, logs: list[str]) -> dict[str, Any]:
    return {"steps": result.steps, "stopped": result.stopped, "losses": [repr(x) for x in result.losses],
            "dev": getattr(result, "dev", None), "card": card_of(folder), "weights": weights_digest(folder),
            "log": [re.sub(r"in [0-9.]+ min", "in _ min", ln) for ln in logs]}


def run_all(work: Path) -> dict[str, Any]:
    from capr.cases.train import PairArgs, TsdaeArgs, train_pairs, train_tsdae
    from capr.cdv import CDVArgs, train_cdv
    from capr.labels.generate import write_labels
    from capr.train import ModelKind, TrainArgs, train

    out: dict[str, Any] = {}
    lab = labels(3)  # 72 passages in 24 documents
    for kind in ("bi", "poly", "cross"):
        logs: list[str] = []
        args = TrainArgs(kind=ModelKind(kind), max_steps=6, batch_size=8 if kind != "cross" else 4, lr=1e-3 if kind == "bi" else 1e-4,
                         max_length=48, query_max_length=16, dev_fraction=0.3, dev_queries=8, eval_every=2,
                         patience=2, hard_negatives=1, question_prob=0.3, synonym_prob=0.3, seed=3)
        r = train(lab, work / f"api-{kind}", args, progress=False, log=logs.append)
        out[f"api {kind}"] = record(r, work / f"api-{kind}", logs)
        print(f"api {kind}: {r.steps} steps, {r.stopped}", file=sys.stderr)

    cdv_lab = labels(4)  # CDV holds out a dev split only from 20 documents on
    logs = []
    args = CDVArgs(max_steps=30, batch_docs=6, lr=3e-3, dropout=0.1, lstm_hidden=32, discourse_dim=64, seed=5,
                   dev_fraction=0.3, eval_every=10, patience=2, contrastive_weight=0.5)
    r = train_cdv(cdv_lab, work / "api-cdv", args, progress=False, log=logs.append)
    out["api cdv"] = record(r, work / "api-cdv", logs)
    print(f"api cdv: {r.steps} steps, {r.stopped}", file=sys.stderr)

    sentences = [f"{a.format(d=d)} {b}" for d in DISEASES for a, b in ASPECTS.values()]
    logs = []
    r = train_tsdae(sentences, work / "api-tsdae", TsdaeArgs(max_steps=4, batch_size=4, max_length=32, seed=7),
                    progress=False, log=logs.append, source="planted")
    out["api tsdae"] = record(r, work / "api-tsdae", logs)
    print(f"api tsdae: {r.steps} steps", file=sys.stderr)

    pairs = [(f"what helps {d}", f"{a.format(d=e)} {b}", float(d == e and k == 1))
             for d in DISEASES[:4] for e in DISEASES[:4] for k, (a, b) in enumerate(ASPECTS.values())]
    logs = []
    r = train_pairs(pairs, work / "api-pairs", PairArgs(max_steps=6, batch_size=8, lr=1e-4, max_length=64, seed=11),
                    progress=False, log=logs.append, desc="planted")
    out["api pairs"] = record(r, work / "api-pairs", logs)
    print(f"api pairs: {r.steps} steps", file=sys.stderr)

    # the CLI: its per-kind defaults (batch size, lr, hard negatives, sentence selection) are part of what must
    # not change
    lab_file = work / "labels.jsonl"
    write_labels(lab_file, labels(3))
    for kind, steps in (("bi", 4), ("poly", 3), ("cross", 3), ("cdv", 12)):
        folder = work / f"cli-{kind}"
        cmd = [sys.executable, "-m", "capr", "train", kind, "--labels", str(lab_file), "--out", str(folder),
               "--max-steps", str(steps), "--seed", "0", "--eval-every", "2", "--max-length", "48", "--json"]
        if kind == "cdv":
            cmd = cmd[: cmd.index("--max-length")] + ["--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
        summary = json.loads(proc.stdout[proc.stdout.index("{"):])
        summary.pop("minutes", None)
        summary.pop("out", None)
        c = card_of(folder)
        out[f"cli {kind}"] = {"summary": summary, "card": c, "weights": weights_digest(folder),
                              "log": [ln for ln in proc.stderr.splitlines() if ln.startswith(("dev", "step"))]}
        print(f"cli {kind}: {summary['steps_run']} steps", file=sys.stderr)
    return out


def compare(a_path: Path, b_path: Path) -> int:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    bad = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"{name}: only in {'after' if name not in a else 'before'}")
            bad += 1
            continue
        diffs = [k for k in sorted(set(a[name]) | set(b[name])) if a[name].get(k) != b[name].get(k)]
        ra, rb = a[name], b[name]
        losses = ra.get("losses") or ra["card"].get("loss_history")
        dev = ra.get("dev") or ra["card"].get("dev_history") or []
        print(f"{name}: {'IDENTICAL' if not diffs else 'DIFFERENT in ' + ', '.join(diffs)} — "
              f"{len(losses)} losses (first {losses[0]}, last {losses[-1]}), {len(dev)} dev evaluations, "
              f"{len(ra['weights'])} weight files")
        if diffs:
            bad += 1
            for k in diffs:
                if k == "card":
                    for ck in sorted(set(ra["card"]) | set(rb["card"])):
                        if ra["card"].get(ck) != rb["card"].get(ck):
                            print(f"    card[{ck}]: {ra['card'].get(ck)!r} != {rb['card'].get(ck)!r}")
                else:
                    print(f"    {k}: {ra.get(k)!r}\n    {' ' * len(k)}  {rb.get(k)!r}")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", type=Path, nargs=2)
    a = ap.parse_args()
    if a.compare:
        raise SystemExit(1 if compare(*a.compare) else 0)
    if os.environ.get("PYTHONHASHSEED") != "0":
        # CDV's contrastive term groups sentences by hash() of their labels: with Python's per-process string
        # hashing, the order of the batch's distinct targets (and so the float summation order) changes per run
        argv = [sys.executable, "-m", "experiments.loop_equivalence", *sys.argv[1:]]
        os.execve(sys.executable, argv, {**os.environ, "PYTHONHASHSEED": "0"})
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CAPR_CACHE"] = str(Path(tmp) / "cache")  # fresh: no embedding computed in another batch
        import capr

        print(f"capr from {capr.__file__}", file=sys.stderr)
        result = run_all(Path(tmp))
    a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
