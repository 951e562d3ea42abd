"""Similar-case scorers trained listwise on the labelled training questions, from candidates saved by
`experiments.cases_gpu export` (steps 1-2 over the case index, here; training and scoring on a lent accelerator).

The pointwise cross-encoder of `capr train cases` learns each (description, support) pair's label on its own, and
its loss never fell far below the base rate of its labels (RESULTS, issue 34 part 6). Here the loss is the choice
itself: an option's score is the best score of its supports (as step 3 reads it), the question's options are a
softmax, and the correct option is the target. Two scorers are trained so:

- ``bi``: the MiniLM encoder of the dense scorer, fine-tuned; the score is the cosine (times a fixed scale) of the
  description and a support, so at step 0 it is exactly the dense scorer's order;
- ``cross``: a MiniLM cross-encoder pre-trained on RQE + MEDIQA (as `capr train cases` starts), then listwise.

A variant's ``-kN`` is how many of each option's saved supports (the dense order) the training loss reads. Every model
scores every evaluation set from the saved candidates; headqa-dev chooses, the other sets are held out.

    python -m experiments.cases_gpu export --index IDX --out .gpu        # here; then the candidates in one tar.xz,
    (cd .gpu && mkdir c && for f in *.cand.jsonl.gz; do gunzip -c $f > c/${f%.gz}; done &&    # so that the passages
     tar cf - -C c . | xz -9 > cand.tar.xz && rm -r c *.cand.jsonl.gz)                      # several sets share travel once
    cd .gpu && tar xJf cand.tar.xz && cd .. && python -m experiments.cases_listwise --dir .gpu --work /tmp/cl \
        --out $OUT --variants zero,bi-k1,bi-k5,cross-k1 --bring-back chosen --device cuda    # on the device"""

from __future__ import annotations

import argparse
import json
import random
import tarfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from experiments.cases_gpu import EVAL_SETS, _pairs, batched, candidates_file, convert_weights, say

SCALE = 20.0  # cosine to logit, as sentence-transformers' MultipleNegativesRankingLoss


def option_groups(cands: Any, q: Any, k: int | None, kind: str) -> list[list[str]]:
    """Each option's texts as the scorer reads them (the bi-encoder: as the index's encoder read each passage), cut
    to the first ``k`` (the dense order)."""
    groups = cands.encoder_groups(q) if kind == "bi" else cands.groups(q)
    return [g[:k] if k else g for g in groups]


def train_questions(cands: Any, k: int | None, kind: str) -> list[tuple[str, list[list[str]], int]]:
    return [(q.description, option_groups(cands, q, k, kind), q.answer) for q in cands.questions]


def listwise_loss(flat_scores: "Any", groups: Sequence[Sequence[Sequence[str]]], answers: Sequence[int]) -> "Any":
    """Cross-entropy of each question's correct option, an option's logit being the best of its texts' scores."""
    import torch

    losses, at = [], 0
    for opts, ans in zip(groups, answers):
        logits = []
        for g in opts:
            logits.append(flat_scores[at: at + len(g)].max())
            at += len(g)
        losses.append(torch.nn.functional.cross_entropy(torch.stack(logits)[None], torch.tensor([ans], device=flat_scores.device)))
    return torch.stack(losses).mean()


class BiScorer:
    """The dense scorer's cosine with a (fine-tuned) MiniLM encoder."""

    def __init__(self, path: str | Path, device: str, max_length: int = 256) -> None:
        from sentence_transformers import SentenceTransformer

        self.st = SentenceTransformer(str(path), device=device)
        self.st.max_seq_length = max_length

    def embed(self, texts: Sequence[str]) -> "Any":
        import torch

        from capr.models.loading import st_features

        feats = st_features(self.st, texts)
        feats = {k: (v.to(self.st.device) if hasattr(v, "to") else v) for k, v in feats.items()}
        return torch.nn.functional.normalize(self.st(feats)["sentence_embedding"], dim=-1)

    def table(self, cands: Any) -> Callable[[str, Sequence[str]], np.ndarray]:
        """Step 3's score for (description, passage text): the cosine with the passage as the index encoded it."""
        descs = sorted({q.description for q in cands.questions})
        as_encoded = {t: e for q in cands.questions for g, ge in zip(cands.groups(q), cands.encoder_groups(q))
                      for t, e in zip(g, ge)}
        texts = sorted(set(as_encoded.values()), key=len)
        kw = dict(batch_size=256, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
        dv = dict(zip(descs, self.st.encode(descs, **kw)))
        tv = dict(zip(texts, self.st.encode(texts, **kw)))
        return lambda d, ts: np.array([float(dv[d] @ tv[as_encoded[t]]) for t in ts], dtype=np.float32)


def train_bi(questions: list[tuple[str, list[list[str]], int]], init: Path, out: Path, a: argparse.Namespace) -> dict:
    import torch

    loop = _loop(a, len(questions), out, "listwise bi-encoder")
    model = BiScorer(init, str(loop.device))
    order = _batches(len(questions), a.questions_per_step)

    def step() -> Any:
        batch = [questions[i] for i in next(order)]
        texts = [t for _, opts, _ in batch for g in opts for t in g]
        dv = model.embed([d for d, _, _ in batch])
        tv = model.embed(texts)
        owner = [j for j, (_, opts, _) in enumerate(batch) for g in opts for _ in g]
        flat = SCALE * (tv * dv[torch.tensor(owner, device=tv.device)]).sum(-1)
        return listwise_loss(flat, [opts for _, opts, _ in batch], [ans for _, _, ans in batch])

    res = loop.run([p for p in model.st.parameters() if p.requires_grad], step,
                   write=lambda tmp: (model.st.save(str(tmp)), {})[1],
                   card=lambda: {"kind": "bi", "loss": "listwise", "questions": len(questions)},
                   readme=lambda c, r: "# listwise bi-encoder (experiment)\n", module=model.st)
    return _summary(res)


def train_cross(questions: list[tuple[str, list[list[str]], int]], init: Path, out: Path, a: argparse.Namespace) -> dict:
    from sentence_transformers import CrossEncoder

    loop = _loop(a, len(questions), out, "listwise cross-encoder")
    ce = CrossEncoder(str(init), num_labels=1, max_length=256, device=str(loop.device))
    order = _batches(len(questions), a.questions_per_step)

    def step() -> Any:
        batch = [questions[i] for i in next(order)]
        pairs = [(d, t) for d, opts, _ in batch for g in opts for t in g]
        enc = ce.tokenizer([p[0] for p in pairs], [p[1] for p in pairs], padding=True, truncation="longest_first",
                           max_length=256, return_tensors="pt")
        enc = {k: v.to(loop.device) for k, v in enc.items()}
        flat = ce.model(**enc).logits.squeeze(-1)
        return listwise_loss(flat, [opts for _, opts, _ in batch], [ans for _, _, ans in batch])

    res = loop.run([p for p in ce.model.parameters() if p.requires_grad], step,
                   write=lambda tmp: (ce.save_pretrained(str(tmp)), {})[1],
                   card=lambda: {"kind": "cross", "loss": "listwise", "questions": len(questions)},
                   readme=lambda c, r: "# listwise cross-encoder (experiment)\n", module=ce.model)
    return _summary(res)


def _loop(a: argparse.Namespace, questions: int, out: Path, what: str) -> Any:
    from capr.train.loop import LoopArgs, TrainingLoop

    return TrainingLoop(LoopArgs(max_steps=a.steps_for(questions), lr=a.lr, seed=13, warmup=0.1,
                                 time_budget_min=a.budget_min), out, what=what, progress=False, log=say, device=a.device)


def _summary(res: Any) -> dict:
    return {"steps": res.steps, "minutes": round(res.seconds / 60, 2), "stopped": res.stopped,
            "loss_first": round(res.losses[0], 3), "loss_last20": round(float(np.mean(res.losses[-20:])), 3)}


def _batches(n: int, size: int):
    rng = random.Random(13)
    while True:
        idx = list(range(n))
        rng.shuffle(idx)
        for i in range(0, n - size + 1, size):
            yield idx[i: i + size]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="the export's folder (train/eval candidates, minilm16, pretrain)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default="zero,bi-k1,bi-k5,cross-k1")
    ap.add_argument("--device", default=None)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--questions-per-step", type=int, default=16)
    ap.add_argument("--budget-min", type=float, default=1.5)
    ap.add_argument("--limit", type=int, default=None, help="first N questions of every set (smoke runs)")
    ap.add_argument("--bring-back", default="", help="a variant whose fp16 weights come back in <=15 MiB parts; 'chosen': the trained one best on headqa-dev")
    a = ap.parse_args()
    a.steps_for = lambda n: max(1, round(a.epochs * n / a.questions_per_step))
    from capr.cases.bench import summarize, write_outcomes
    from capr.cases.candidates import read_candidates, score_candidates
    from capr.cases.train import PairArgs, train_pairs
    from capr.search.second_stage import CrossReranker

    src, work, out = Path(a.dir), Path(a.work), Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    (work / "runs").mkdir(exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    say(f"torch {torch.__version__}, cuda {torch.cuda.is_available()}")
    torch.backends.cuda.matmul.allow_tf32 = True
    base = work / "minilm32"
    convert_weights(src / "minilm16", base, "float32")
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    train_c = read_candidates(candidates_file(src, "train"))
    if a.limit:
        train_c.questions = train_c.questions[: a.limit]
    evals = {}
    for name in EVAL_SETS:
        p = candidates_file(src, name)
        if p.exists():
            evals[name] = read_candidates(p)
            if a.limit:
                evals[name].questions = evals[name].questions[: a.limit]
    report: dict[str, Any] = {"args": {k: v for k, v in vars(a).items() if k != "steps_for"}, "train": {}, "eval": {}}
    def score(v: str, table: Callable[[Any], Callable]) -> None:
        # scored as soon as trained, so a run stopped at its time limit still returns what it finished
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.no_grad():
            for name, cs in evals.items():
                t0 = time.time()
                outcomes = score_candidates(cs, table(cs))
                write_outcomes(work / "runs" / f"{name}.{v}.jsonl", outcomes)
                m = summarize(outcomes)
                report["eval"][f"{name}.{v}"] = {kk: round(x, 2) if isinstance(x, float) else x for kk, x in m.items()}
                say(f"{name} {v}: accuracy {m['accuracy']:.2f} AP {m['AP']:.2f} ({time.time() - t0:.0f} s)")
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
        torch.backends.cuda.matmul.allow_tf32 = True

    for v in a.variants.split(","):
        t0 = time.time()
        if v == "zero":
            score(v, BiScorer(base, device).table)
            continue
        kind, k = v.split("-k")
        qs = train_questions(train_c, int(k), kind)
        if kind == "bi":
            report["train"][v] = train_bi(qs, base, work / v, a)
            table = BiScorer(work / v, device).table
        elif kind == "cross":
            if not (work / "ce-rqe").exists():
                pre = _pairs(src / "pretrain.jsonl.gz")
                train_pairs(pre, work / "ce-rqe", PairArgs(base_model=str(base), max_steps=max(1, round(2 * len(pre) / 32)),
                                                           time_budget_min=a.budget_min, batch_size=32, lr=2e-5,
                                                           device=device),
                            log=say, desc="rqe-pretrain", progress=False)
            report["train"][v] = train_cross(qs, work / "ce-rqe", work / v, a)
            ce = CrossReranker(work / v, batch_size=256, device=device)
            table = lambda cs, ce=ce: batched(ce, cs)  # noqa: E731
        else:
            raise SystemExit(f"unknown variant {v!r}")
        say(f"{v}: trained {report['train'][v]} ({time.time() - t0:.0f} s)")
        score(v, table)
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tf:
        tf.add(work / "runs", arcname="runs")
    if a.bring_back == "chosen":  # the trained variant best on headqa-dev, the set that chooses (first on ties)
        trained = list(report["train"])
        a.bring_back = max(trained, key=lambda v: report["eval"].get(f"headqa-dev.{v}", {}).get("accuracy", 0.0),
                           default="")
        report["chosen"] = a.bring_back
    if a.bring_back and (work / a.bring_back).exists():
        half = work / f"{a.bring_back}-16"
        convert_weights(work / a.bring_back, half, "float16")
        tar = work / "model.tar"
        with tarfile.open(tar, "w") as tf:
            tf.add(half, arcname=a.bring_back)
        data, part = tar.read_bytes(), 15 * 2**20
        for i in range(0, len(data), part):
            (out / f"model.tar.part{i // part}").write_bytes(data[i: i + part])
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["eval"], indent=1), flush=True)


if __name__ == "__main__":
    main()
