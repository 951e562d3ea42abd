"""The similar-case cross-encoders trained and scored on a lent accelerator, from candidates saved here.

The case index (93k passages with vectors) does not travel to the device machine (64 MiB), so the work is split where
the pipeline splits (capr.cases.candidates): steps 1-2 run here over the index and are saved; the device machine
pre-trains the cross-encoder on RQE + MEDIQA, builds S+/S- from the saved training candidates (the pre-trained model
re-ranks them, as `capr train cases --stage distant` does over the index), fine-tunes, and scores the saved candidates
of every evaluation set with every model. Same trainer (capr.cases.train.train_pairs), same S+/S- builder
(capr.cases.candidates.distant_pairs_from_candidates), same step 3 (capr.cases.pipeline.score_groups) as
`capr train cases --candidates` and `capr eval --reranker cross:CE`; the questions here are every training question.

    python -m experiments.cases_gpu export --index IDX --data-dir ../shared/data --out .gpu      # here
    python -m experiments.cases_gpu train --dir .gpu --work /tmp/cg --bundle $OUT/bundle          # device
    python -m experiments.cases_gpu unpack --bundle DIR --out DIR                                 # here

The returned model's weights are the fp16-rounded ones that scored the runs, so `capr eval --reranker cross:DIR`
here reproduces the device's runs (checked on a subset: `check`)."""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import time
from pathlib import Path

TRAIN_SOURCES = ("headqa-train", "medmcqa-train", "medqa-train")
EVAL_SETS = ("headqa-dev", "medqa-dev", "headqa", "medmcqa-dev")  # headqa-dev chooses; the others are held out
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def convert_weights(src: Path, dst: Path, dtype: str) -> None:
    """A model folder copied with its safetensors weights cast to ``dtype`` (float16 to travel, float32 to run)."""
    import torch
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_dir():  # a sentence-transformers folder's modules (pooling, normalisation)
            shutil.copytree(f, dst / f.name, dirs_exist_ok=True)
        elif f.name != "model.safetensors":
            shutil.copy2(f, dst / f.name)
    tensors = load_file(str(src / "model.safetensors"))
    want = getattr(torch, dtype)
    save_file({k: (v.to(want) if v.is_floating_point() else v).contiguous() for k, v in tensors.items()},
              str(dst / "model.safetensors"), metadata={"format": "pt"})


def export(a: argparse.Namespace) -> None:
    from capr.cases import CaseConfig, CasePipeline, CaseScorer
    from capr.cases.bench import benchmark_questions
    from capr.cases.candidates import export_candidates
    from capr.cases.data import load_questions, read_similarity_pairs
    from capr.index.index import Index
    from capr.models.loading import resolve_model

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    pairs = read_similarity_pairs(a.data_dir)
    (out / "pretrain.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(p) + "\n" for p in pairs).encode(), mtime=0))
    say(f"pretrain pairs: {len(pairs)}")
    convert_weights(Path(resolve_model("minilm")), out / "minilm16", "float16")
    pipe = CasePipeline(Index.load(a.index), CaseConfig(scorer=CaseScorer(a.scorer), dense_k=a.dense_k, cross_k=a.dense_k,
                                                        match=a.match, fallback=a.fallback))
    sets = {"train": [q for s in TRAIN_SOURCES for q in load_questions(a.data_dir, s)]}
    sets.update({b: benchmark_questions(a.data_dir, b) for b in EVAL_SETS})
    for name, qs in sets.items():
        if a.sets and name not in a.sets.split(","):
            continue
        if a.limit:
            qs = qs[: a.limit]
        t0 = time.time()
        stats = export_candidates(pipe, qs, out / f"{name}.cand.jsonl.gz")
        say(f"{name}: {stats} in {time.time() - t0:.0f} s")


def candidates_file(folder: Path, name: str) -> Path:
    """A set's saved candidates in ``folder``: gzip'd as the export writes them, or plain as earlier exports did."""
    gz = folder / f"{name}.cand.jsonl.gz"
    return gz if gz.exists() else folder / f"{name}.cand.jsonl"


def _pairs(path: Path) -> list[tuple[str, str, float]]:
    return [tuple(p) for p in map(json.loads, gzip.decompress(path.read_bytes()).decode().splitlines())]


def batched(model, cands):
    """``model.score`` for every question of ``cands`` in one sorted batch (a call per question leaves an
    accelerator idle); looked up by step 3 as it asks."""
    import numpy as np
    import torch

    pairs = sorted({(q.description, t) for q in cands.questions for g in cands.groups(q) for t in g},
                   key=lambda p: len(p[0]) + len(p[1]))
    scores = model.model.predict(pairs, batch_size=model.batch_size, show_progress_bar=False,
                                 activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    table = dict(zip(pairs, np.asarray(scores, dtype=np.float32).reshape(-1)))
    return lambda description, texts: np.array([table[(description, t)] for t in texts], dtype=np.float32)


def train(a: argparse.Namespace) -> None:
    from capr.cases.bench import summarize, write_outcomes
    from capr.cases.candidates import distant_pairs_from_candidates, read_candidates, score_candidates
    from capr.cases.train import PairArgs, train_pairs
    from capr.search.second_stage import CrossReranker

    src, work, bundle = Path(a.dir), Path(a.work), Path(a.bundle)
    work.mkdir(parents=True, exist_ok=True)
    (bundle / "runs").mkdir(parents=True, exist_ok=True)
    try:
        import torch

        say(f"torch {torch.__version__}, cuda {torch.cuda.is_available()}, device {a.device}")
    except ImportError:
        pass
    try:
        import torch

        # TF32 matrix products while training (Ampere and later); off again before anything is scored
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
    except ImportError:
        pass
    base = work / "minilm32"
    convert_weights(src / "minilm16", base, "float32")
    common = dict(batch_size=a.batch_size, lr=a.lr, max_length=256, seed=13, device=a.device)
    report: dict = {"args": vars(a)}

    pre = _pairs(src / "pretrain.jsonl.gz")
    steps = a.pretrain_steps or max(1, round(a.epochs * len(pre) / a.batch_size))
    rep = train_pairs(pre, work / "ce-rqe", PairArgs(base_model=str(base), max_steps=steps,
                                                     time_budget_min=a.budget_min, **common),
                      log=say, desc="rqe-pretrain", progress=False,
                      card_extra={"data": "rqe/RQE_Train_8588_AMIA2016.xml.gz + mediqa2019 Task3 TrainingSet2"})
    report["pretrain"] = {"pairs": len(pre), "steps": rep.steps, "minutes": round(rep.seconds / 60, 2), "stopped": rep.stopped}

    rqe = CrossReranker(work / "ce-rqe", batch_size=a.score_batch, device=a.device)
    t0 = time.time()
    cands = read_candidates(candidates_file(src, "train"))
    rqe_scores = batched(rqe, cands)
    say(f"train candidates re-ranked by the pre-trained model: {cands.pairs} pairs in {time.time() - t0:.0f} s")
    models = {"rqe": rqe}
    for k in [int(x) for x in a.k.split(",")]:
        pairs, stats = distant_pairs_from_candidates(cands, rqe_scores, k=k)
        say(f"S+/S- k={k}: {len(pairs)} pairs, {stats}")
        steps = a.distant_steps or max(1, round(a.epochs * len(pairs) / a.batch_size))
        name = f"distant-k{k}"
        rep = train_pairs(pairs, work / f"{name}-32", PairArgs(base_model=str(base), max_steps=steps,
                                                               time_budget_min=a.budget_min, **common),
                          init=str(work / "ce-rqe"), log=say, desc="distant", progress=False,
                          card_extra={"distant": stats, "index": cands.header.get("index"),
                                      "candidates": "train.cand.jsonl"})
        report[name] = {"pairs": len(pairs), "steps": rep.steps, "minutes": round(rep.seconds / 60, 2),
                        "stopped": rep.stopped, **stats}
        # what travels back is fp16: score with exactly those weights so the runs reproduce on the returned model
        convert_weights(work / f"{name}-32", work / f"{name}-16", "float16")
        convert_weights(work / f"{name}-16", work / name, "float32")
        models[name] = CrossReranker(work / name, batch_size=a.score_batch, device=a.device)

    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
    except ImportError:
        pass
    report["eval"] = {}
    for name in EVAL_SETS:
        path = candidates_file(src, name)
        if not path.exists():
            continue
        cs = read_candidates(path)
        for label, model in models.items():
            t0 = time.time()
            outcomes = score_candidates(cs, batched(model, cs))
            write_outcomes(bundle / "runs" / f"{name}.{label}.jsonl", outcomes)
            m = summarize(outcomes)
            report["eval"][f"{name}.{label}"] = {k: round(v, 2) if isinstance(v, float) else v for k, v in m.items()}
            say(f"{name} {label}: accuracy {m['accuracy']:.2f} AP {m['AP']:.2f} ({cs.pairs} pairs, "
                f"{time.time() - t0:.0f} s)")
    # the model that travels back: the distant one best on headqa-dev (the set for choosing; first on ties)
    distant = [m for m in models if m != "rqe"]
    chosen = max(distant, key=lambda m: report["eval"].get(f"headqa-dev.{m}", {}).get("accuracy", 0.0))
    report["chosen"] = chosen
    shutil.copytree(work / f"{chosen}-16", bundle / "ce-cases")
    say(f"chosen on headqa-dev: {chosen}")
    (bundle / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["eval"], indent=1), flush=True)


def unpack(a: argparse.Namespace) -> None:
    """The bundle's fp16 model as a float32 folder that `capr eval --reranker cross:DIR` reads."""
    bundle, out = Path(a.bundle), Path(a.out)
    convert_weights(bundle / "ce-cases", out, "float32")
    say(f"model -> {out}")


def check(a: argparse.Namespace) -> None:
    """The index path (CasePipeline.rank with the cross scorer, as `capr eval --reranker cross:MODEL` runs it) on the
    first N questions of a set against the device's run of the saved candidates."""
    from capr.cases import CaseConfig, CasePipeline, CaseScorer
    from capr.cases.bench import benchmark_questions, evaluate_cases, read_outcomes
    from capr.index.index import Index

    there = {o.qid: o for o in read_outcomes(a.device_run)}
    qs = [q for q in benchmark_questions(a.data_dir, a.benchmark) if q.qid in there][: a.limit]
    pipe = CasePipeline(Index.load(a.index), CaseConfig(scorer=CaseScorer.cross, cross_model=a.model, dense_k=a.dense_k,
                                                        cross_k=a.dense_k, match=a.match, fallback=a.fallback))
    _, outcomes = evaluate_cases(pipe, qs)
    here = {o.qid: o for o in outcomes}
    print(json.dumps({"questions": len(here), "same_credit": sum(here[q].credit == there[q].credit for q in here),
                      "same_supports": sum(here[q].supports == there[q].supports for q in here),
                      "max_score_difference": max(abs(x - y) for q in here
                                                  for x, y in zip(here[q].scores, there[q].scores))}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--index", required=True)
    e.add_argument("--data-dir", default="../shared/data")
    e.add_argument("--out", required=True)
    e.add_argument("--dense-k", type=int, default=5)
    e.add_argument("--scorer", default="dense", help="whose step 2 orders the supports (bm25: an index without vectors)")
    e.add_argument("--match", default="phrase")
    e.add_argument("--fallback", default="related")
    e.add_argument("--limit", type=int, default=None, help="first N questions of each set (smoke runs)")
    e.add_argument("--sets", default="", help="only these sets (comma-separated: train and the evaluation sets)")
    t = sub.add_parser("train")
    t.add_argument("--dir", required=True)
    t.add_argument("--work", required=True)
    t.add_argument("--bundle", required=True)
    t.add_argument("--device", default="cuda")
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=2e-5)
    t.add_argument("--epochs", type=float, default=2.0)
    t.add_argument("--k", default="1", help="supports per option in S+/S-; several (1,5): one model each")
    t.add_argument("--pretrain-steps", type=int, default=None)
    t.add_argument("--distant-steps", type=int, default=None)
    t.add_argument("--budget-min", type=float, default=3.0, help="each training stage stops here at the latest")
    t.add_argument("--tf32", action="store_true", help="TF32 matrix products while training (not while scoring)")
    t.add_argument("--score-batch", type=int, default=256)
    u = sub.add_parser("unpack")
    u.add_argument("--bundle", required=True)
    u.add_argument("--out", required=True)
    c = sub.add_parser("check")
    c.add_argument("--benchmark", required=True)
    c.add_argument("--index", required=True)
    c.add_argument("--model", required=True)
    c.add_argument("--device-run", required=True)
    c.add_argument("--data-dir", default="../shared/data")
    c.add_argument("--dense-k", type=int, default=5)
    c.add_argument("--match", default="phrase")
    c.add_argument("--fallback", default="related")
    c.add_argument("--limit", type=int, default=20)
    a = ap.parse_args()
    {"export": export, "train": train, "unpack": unpack, "check": check}[a.cmd](a)


if __name__ == "__main__":
    main()
