"""`capr train cdv`: sentence embeddings are computed once (cached on disk), so a training step only runs the
BiLSTM and its heads — minutes on a CPU. It runs capr's one training loop (capr.train.loop): step and time
budgets, dev-based early stopping keeping the best checkpoint (the untrained start included), progress bar,
atomic save, model card."""

from __future__ import annotations

import random
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F

from capr._version import __version__
from capr.cdv.args import CDVArgs
from capr.cdv.data import N_FLAGS, DocSentences, documents_from_labels
from capr.cdv.model import CDVModel, CDVNet, _encoder, _pad
from capr.errors import BadInputError
from capr.labels.generate import LabeledPassage, read_labels
from capr.train.loop import LoopArgs, TrainingLoop, TrainResult, dev_metrics, file_sha1

CDVTrainResult = TrainResult  # the name the CDV trainer's result had before the trainers shared one loop


def pseudo_huber(pred: torch.Tensor, target: torch.Tensor, delta: float) -> torch.Tensor:
    """δ²(√(1 + ((y − ŷ)/δ)²) − 1), summed over dimensions: quadratic near the target, linear far from it."""
    d = (target - pred) / delta
    return (delta**2 * (torch.sqrt(1 + d * d) - 1)).sum(-1)


def _is_dev(doc_id: str, fraction: float, seed: int) -> bool:
    return (zlib.crc32(f"{seed}:{doc_id}".encode()) % 10_000) < fraction * 10_000


def dev_documents(docs: list[DocSentences], args: CDVArgs) -> list[DocSentences]:
    """The documents CDV training holds out for its dev evaluation: a share ``args.dev_fraction`` of them, picked by
    a hash of ``args.seed`` and the document id (so the same ids whatever else the labels hold); none for fewer than
    20 documents. Settings chosen on dev data (experiments/cdv_boundaries_dev.py) are chosen on these."""
    return [d for d in docs if _is_dev(d.doc_id, args.dev_fraction, args.seed)] if len(docs) >= 20 else []


class _Targets:
    """Entity and aspect target vectors per passage: label texts embedded by the sentence encoder."""

    def __init__(self, model: CDVModel, docs: list[DocSentences], args: CDVArgs) -> None:
        texts = sorted({t for d in docs for ents in d.entities for t in ents[: args.max_entities + 1]}
                       | {a for d in docs for a in d.aspects if a})
        vecs = model.label_vectors(texts) if texts else np.zeros((0, 1), np.float32)
        self.vec = {t: v for t, v in zip(texts, vecs)}
        self.args = args

    def entity(self, entities: list[str], title: str) -> np.ndarray:
        others = [e for e in entities if e != title][: self.args.max_entities]
        if title and others:
            v = self.args.title_weight * self.vec[title] + (1 - self.args.title_weight) * np.mean([self.vec[e] for e in others], axis=0)
        elif title:
            v = self.vec[title]
        else:
            v = np.mean([self.vec[e] for e in others], axis=0)
        return v / max(float(np.linalg.norm(v)), 1e-12)

    def aspect(self, aspect: str) -> np.ndarray:
        return self.vec[aspect]


@dataclass
class _Doc:
    x: np.ndarray  # (n, dim + flags)
    ent: np.ndarray  # (n, target_dim) target per sentence
    asp: np.ndarray
    ent_id: np.ndarray  # (n,) index of the sentence's (passage) entity target, for the contrastive term
    asp_id: np.ndarray


def _prepare(model: CDVModel, docs: list[DocSentences], targets: _Targets, bar: Any) -> list[_Doc]:
    # one batched (and cached) pass over all sentences: per-document calls would encode in tiny batches
    texts = [t for d in docs for t in d.texts]
    all_vecs = model.encoder.encode_passages(texts, progress=bar.update, chunk=512)
    out, i = [], 0
    for d in docs:
        vecs = all_vecs[i : i + len(d)]
        i += len(d)
        x = np.concatenate([vecs, d.flags()], axis=1).astype(np.float32)
        pe = np.stack([targets.entity(e, d.titles[j]) for j, e in enumerate(d.entities)]).astype(np.float32)
        pa = np.stack([targets.aspect(a) for a in d.aspects]).astype(np.float32)
        p = d.passage_of
        ent_key = [hash((tuple(d.entities[j][:4]), d.titles[j])) for j in range(len(d.passages))]
        asp_key = [hash(a) for a in d.aspects]
        out.append(_Doc(x, pe[p], pa[p], np.asarray([ent_key[j] for j in p]), np.asarray([asp_key[j] for j in p])))
    return out


def _contrastive(pred: torch.Tensor, target: torch.Tensor, ids: np.ndarray, scale: float) -> torch.Tensor:
    """Each sentence's decoded vector against the batch's distinct targets: its own must score highest."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    keys = F.normalize(target[torch.from_numpy(first)], dim=-1)
    logits = scale * F.normalize(pred, dim=-1) @ keys.T
    return F.cross_entropy(logits, torch.from_numpy(inverse.reshape(-1)).to(pred.device))


def _dev_set(docs: list[DocSentences], n_queries: int, seed: int) -> tuple[list, list[int]]:
    """Queries (title entity, aspect) over dev passages; candidates: 31 other dev passages + the gold ones."""
    rng = random.Random(seed)
    flat = [(di, j) for di, d in enumerate(docs) for j in range(len(d.passages))]
    items = [(di, j) for di, j in flat if docs[di].titles[j] and docs[di].aspects[j]]
    rng.shuffle(items)
    seen, queries = set(), []
    for di, j in items:
        key = (docs[di].titles[j], docs[di].aspects[j])
        if key in seen:
            continue
        seen.add(key)
        gold = [k for k, (dk, jk) in enumerate(flat) if dk == di and docs[dk].aspects[jk] == key[1]]
        others = [k for k in rng.sample(range(len(flat)), min(len(flat), 40)) if k not in gold][: 32 - len(gold)]
        cands = gold + others
        rng.shuffle(cands)
        queries.append((key, cands, [c in gold for c in cands]))
        if len(queries) >= n_queries:
            break
    return queries, flat


def train_cdv(
    labels: str | Path | Iterable[LabeledPassage],
    out_dir: str | Path,
    args: CDVArgs | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> TrainResult:
    from tqdm.auto import tqdm

    args = args or CDVArgs()
    out_dir = Path(out_dir)
    labels_path = Path(labels) if isinstance(labels, (str, Path)) else None
    docs = documents_from_labels(read_labels(labels_path) if labels_path is not None else labels)
    docs = [d for d in docs if len(d)]
    if sum(len(d.passages) for d in docs) < 2:
        raise BadInputError(str(labels_path or "labels"), "need at least two labeled passages to train CDV")
    # constant learning rate (no warmup): the BiLSTM trains from scratch on frozen embeddings
    loop = TrainingLoop(LoopArgs(max_steps=args.max_steps, lr=args.lr, seed=args.seed, weight_decay=args.weight_decay,
                                 time_budget_min=args.time_budget_min, eval_every=args.eval_every,
                                 patience=args.patience),
                        out_dir, what="CDV training", desc="training cdv", progress=progress, log=log,
                        device=args.device)
    device = loop.device

    dev_docs = dev_documents(docs, args)
    train_docs = [d for d in docs if d not in dev_docs] if dev_docs else docs
    encoder = _encoder(args)
    probe = CDVModel(CDVNet(1, 1, args), args, encoder=encoder)  # only its encoder is used while preparing
    targets = _Targets(probe, docs, args)
    n_sent = sum(len(d) for d in docs)
    with tqdm(total=n_sent, desc="embedding sentences", unit="sent", disable=not progress) as bar:
        prepared = _prepare(probe, train_docs, targets, bar)
        dev_prepared = _prepare(probe, dev_docs, targets, bar) if dev_docs else []
    in_dim = prepared[0].x.shape[1] - N_FLAGS
    target_dim = prepared[0].ent.shape[1]
    net = CDVNet(in_dim, target_dim, args).to(device)
    model = CDVModel(net, args, encoder=encoder, card={"target_dim": target_dim})

    dev_queries, dev_flat = _dev_set(dev_docs, args.dev_queries, args.seed) if dev_docs else ([], [])
    if dev_queries:
        qtexts = sorted({t for (e, a), _, _ in dev_queries for t in (e, a)})
        qv = dict(zip(qtexts, model.label_vectors(qtexts)))

    def evaluate() -> dict[str, float]:
        if not dev_queries:
            return {}
        net.eval()
        with torch.no_grad():
            pe, pa = [], []
            for lo in range(0, len(dev_prepared), 32):
                chunk = dev_prepared[lo : lo + 32]
                e, a = net(*_pad([d.x for d in chunk], device))
                e, a = F.normalize(e, dim=-1).cpu().numpy(), F.normalize(a, dim=-1).cpu().numpy()
                for k, src in enumerate(dev_docs[lo : lo + 32]):
                    for j in range(len(src.passages)):
                        rows = np.flatnonzero(src.passage_of == j)
                        pe.append(e[k, rows].mean(0) if len(rows) else np.zeros(target_dim))
                        pa.append(a[k, rows].mean(0) if len(rows) else np.zeros(target_dim))
        net.train()
        pe, pa = np.asarray(pe), np.asarray(pa)
        scores = [0.5 * (pe[c] @ qv[e] + pa[c] @ qv[a]) for (e, a), c, _ in dev_queries]
        return dev_metrics(scores, [r for _, _, r in dev_queries])

    def card() -> dict[str, Any]:
        return {
            "kind": "cdv", "capr_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "device": str(device), "args": args.to_dict(), "input_dim": in_dim, "target_dim": target_dim,
            "encoder": encoder.describe(), "labels_file": str(labels_path) if labels_path else None,
            "labels_sha1": file_sha1(labels_path), "train_documents": len(train_docs),
            "dev_documents": len(dev_docs), "train_sentences": sum(len(d.x) for d in prepared),
        }

    rng = random.Random(args.seed)

    def step() -> torch.Tensor:
        batch = [prepared[rng.randrange(len(prepared))] for _ in range(args.batch_docs)]
        windows = []
        for d in batch:
            lo = rng.randrange(len(d.x) - args.max_sentences + 1) if len(d.x) > args.max_sentences else 0
            windows.append(slice(lo, lo + args.max_sentences))
        x, lengths = _pad([d.x[w] for d, w in zip(batch, windows)], device)
        e, a = net(x, lengths)
        mask = torch.arange(x.shape[1])[None, :] < lengths[:, None]
        te, ta = (_pad([getattr(d, k)[w] for d, w in zip(batch, windows)], device)[0] for k in ("ent", "asp"))
        m = mask.to(device)
        loss = (pseudo_huber(e, te, args.huber_delta)[m].mean() + pseudo_huber(a, ta, args.huber_delta)[m].mean())
        if args.contrastive_weight > 0:
            eid = np.concatenate([d.ent_id[w] for d, w in zip(batch, windows)])
            aid = np.concatenate([d.asp_id[w] for d, w in zip(batch, windows)])
            loss = loss + args.contrastive_weight * (_contrastive(e[m], te[m], eid, args.contrastive_scale)
                                                     + _contrastive(a[m], ta[m], aid, args.contrastive_scale))
        return loss

    return loop.run([p for p in net.parameters() if p.requires_grad], step, evaluate=evaluate, card=card, module=net,
                    write=model.save_weights, readme=lambda c, _: _card_md(c))


def _card_md(c: dict[str, Any]) -> str:
    a = c["args"]
    dev = c.get("dev_best") or {}
    return "\n".join([
        "# capr CDV model (contextual discourse vectors)",
        "",
        f"Trained by capr {c['capr_version']} on {c['created']} ({c['device']}) from `{c.get('labels_file') or 'labels'}`: "
        f"{c['train_documents']:,} documents ({c['train_sentences']:,} sentences), {c['dev_documents']:,} held out.",
        "",
        f"- sentence encoder (frozen): `{a['encoder']}` ({a['encoder_backend']}), BiLSTM {a['lstm_hidden']}×2, "
        f"discourse vector {a['discourse_dim']}, pseudo-Huber δ={a['huber_delta']}"
        + (f", contrastive weight {a['contrastive_weight']}" if a.get("contrastive_weight") else ""),
        f"- steps: {c['steps']} kept (stopped by {c['stopped']}), {c['seconds'] / 60:.1f} min",
        f"- dev R@1 {dev.get('R@1', float('nan')):.2f} / MRR {dev.get('MRR', float('nan')):.2f} at step {c.get('best_step', 0)}"
        if dev else "- no dev split",
        "",
        "Use: `capr search IDX --entity E --aspect A --cdv THIS_DIR`, `capr explain IDX DOC --cdv THIS_DIR ...`, "
        "`capr eval --benchmark medquad-cdv --cdv THIS_DIR`.",
        "",
    ])


__all__ = ["CDVTrainResult", "pseudo_huber", "train_cdv"]
