"""The three CAPR model families as the trainer sees them: `loss(batch)` for training, `score(queries,
candidates)` for evaluation, `save(dir)`. Bi-encoders are sentence-transformers models; cross-encoders are
sentence-transformers CrossEncoders; the poly-encoder is capr's own module on a Hugging Face encoder
(capr.models.poly, which inference loads without this module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from capr.models.loading import local_path, quiet_transformers, resolve_model, st_features
from capr.models.poly import PolyEncoder
from capr.train.args import ModelKind, TrainArgs
from capr.labels.generate import LabeledPassage
from capr.models.context import parse_context
from capr.train.data import Batch, DevSet, TrainingSet, passage_input
from capr.train.losses import multi_positive_listwise_loss


def _in_batch_loss(scores: torch.Tensor, batch: Batch, args: TrainArgs) -> torch.Tensor:
    """Each query against every passage of the batch (its own passage is column i)."""
    pos = torch.from_numpy(batch.positives).to(scores.device)
    targets = torch.arange(len(batch.queries), device=scores.device)
    return multi_positive_listwise_loss(scores, pos, targets, args.multi_positive)


def _in_chunks(fn, items: Sequence[str], size: int = 64) -> torch.Tensor:
    return torch.cat([fn(items[i : i + size]) for i in range(0, len(items), size)])


# --------------------------------------------------------------------------- bi-encoder
class BiEncoderModel(nn.Module):
    """Shared weights with [QUERY]/[PASSAGE] markers, or separate query and passage encoders."""

    def __init__(self, args: TrainArgs, device: torch.device) -> None:
        super().__init__()
        from sentence_transformers import SentenceTransformer

        quiet_transformers()
        path = local_path(resolve_model(args.base_model))
        self.args, self.device = args, device
        self.passage_encoder = SentenceTransformer(path, device=str(device))
        self.passage_encoder.max_seq_length = args.max_length
        if args.shared:
            self.query_encoder = self.passage_encoder
            self.qmark, self.pmark = args.query_marker, args.passage_marker
        else:
            self.query_encoder = SentenceTransformer(path, device=str(device))
            self.query_encoder.max_seq_length = args.query_max_length
            self.qmark = self.pmark = ""

    def _embed(self, st, texts: Sequence[str]) -> torch.Tensor:
        features = st_features(st, texts)
        features = {k: (v.to(self.device) if hasattr(v, "to") else v) for k, v in features.items()}
        return F.normalize(st(features)["sentence_embedding"], dim=-1)

    def embed_queries(self, texts: Sequence[str]) -> torch.Tensor:
        return self._embed(self.query_encoder, [self.qmark + t for t in texts])

    def embed_passages(self, texts: Sequence[str]) -> torch.Tensor:
        return self._embed(self.passage_encoder, [self.pmark + t for t in texts])

    def loss(self, batch: Batch) -> torch.Tensor:
        q = self.embed_queries([x.text for x in batch.queries])
        p = self.embed_passages(batch.passages)
        return _in_batch_loss(q @ p.T * self.args.scale, batch, self.args)

    @torch.no_grad()
    def score_dev(self, dev: "DevSet") -> list[np.ndarray]:
        qv = _in_chunks(self.embed_queries, dev.queries)
        pv = _in_chunks(self.embed_passages, dev.passages)
        sims = (qv @ pv.T).float().cpu().numpy()
        return [sims[i, c] for i, c in enumerate(dev.candidates)]

    def save(self, out_dir: Path) -> dict[str, Any]:
        self.passage_encoder.save(str(out_dir))
        meta: dict[str, Any] = {"query_prefix": self.qmark, "passage_prefix": self.pmark, "query_model": None}
        if not self.args.shared:
            self.query_encoder.save(str(out_dir / "query"))
            meta["query_model"] = "query"
        return meta


# --------------------------------------------------------------------------- poly-encoder
class PolyEncoderModel(PolyEncoder):
    """The poly-encoder (capr.models.poly) with its training loss and dev scoring."""

    def __init__(self, args: TrainArgs, device: torch.device, path: str | None = None) -> None:
        super().__init__(path or resolve_model(args.base_model), args, device)

    def loss(self, batch: Batch) -> torch.Tensor:
        q = self.embed_queries([x.text for x in batch.queries])
        codes = self.passage_codes(batch.passages)
        return _in_batch_loss(self.interact(q, codes) * self.args.scale, batch, self.args)

    @torch.no_grad()
    def score_dev(self, dev: "DevSet") -> list[np.ndarray]:
        qv = _in_chunks(self.embed_queries, dev.queries)
        codes = _in_chunks(self.passage_codes, dev.passages)
        out = []
        for i, c in enumerate(dev.candidates):
            out.append(self.interact(qv[i : i + 1], codes[c]).squeeze(0).float().cpu().numpy())
        return out


# --------------------------------------------------------------------------- cross-encoder
class CrossEncoderModel(nn.Module):
    """A sentence-transformers CrossEncoder trained listwise: each query against its passage, BM25 hard
    negatives and the other queries' passages, with other true answers masked."""

    def __init__(self, args: TrainArgs, device: torch.device, path: str | None = None) -> None:
        super().__init__()
        from sentence_transformers import CrossEncoder

        quiet_transformers()
        src = local_path(path or resolve_model(args.base_model))
        self.args, self.device = args, device
        self.ce = CrossEncoder(src, num_labels=1, max_length=args.max_length, device=str(device))
        self.model = self.ce.model
        self.selector = None  # set by the trainer from the training corpus' statistics
        self.first_stage: FirstStageScores | None = None
        if args.first_stage:
            self.first_stage = FirstStageScores(args.first_stage, args.scale)
            # the correction starts at zero: before any step the re-ranker ranks exactly as its bi-encoder
            head = _classifier_head(self.model)
            with torch.no_grad():
                head.weight.zero_()
                if head.bias is not None:
                    head.bias.zero_()

    def attach(self, data: "TrainingSet") -> None:
        """Gives the model the training corpus: sentence-selection statistics, and (with a first stage) the
        bi-encoder's passage vectors, which also mine the hard negatives."""
        self.selector = data.selector
        if self.first_stage is not None:
            self.first_stage.index_training_passages(data)

    def logits(self, queries: Sequence[str], passages: Sequence[str]) -> torch.Tensor:
        enc = self.ce.tokenizer(list(queries), list(passages), padding=True, truncation="only_second",
                                max_length=self.args.max_length, return_tensors="pt")
        enc = {k: v.to(self.device) for k, v in enc.items()}
        return self.model(**enc).logits.squeeze(-1)

    def loss(self, batch: Batch) -> torch.Tensor:
        """Each query is scored against a group: its passage, its hard negatives, and a few in-batch passages."""
        n_q = len(batch.queries)
        group = 1 + self.args.hard_negatives + 2
        rng = np.random.default_rng(batch.passage_ids[0])
        rows = []
        for i in range(n_q):
            mine = [i] + batch.hard_columns[i]
            others = [j for j in range(n_q) if j != i]
            take = min(len(others), group - len(mine))
            rows.append(mine + [int(j) for j in rng.choice(others, size=take, replace=False)] if take > 0 else mine)
        width = max(map(len, rows))
        qs, ps = [], []
        for i, row in enumerate(rows):
            qs += [batch.queries[i].text] * len(row)
            ps += [batch.passages[j] for j in row]
        flat = self.logits(qs, ps)
        if self.first_stage is not None:
            prior = self.first_stage.batch_scores([q.text for q in batch.queries], batch.passage_ids, rows)
            flat = flat + torch.from_numpy(prior).to(flat.device, flat.dtype)
        scores = torch.full((n_q, width), float("-inf"), device=self.device)
        pos = torch.zeros((n_q, width), dtype=torch.bool, device=self.device)
        k = 0
        for i, row in enumerate(rows):
            scores[i, : len(row)] = flat[k : k + len(row)]
            k += len(row)
            if self.args.multi_positive:
                pos[i, : len(row)] = torch.from_numpy(batch.positives[i, row])
        targets = torch.zeros(n_q, dtype=torch.long, device=self.device)
        return multi_positive_listwise_loss(scores, pos, targets, True)

    @torch.no_grad()
    def score_dev(self, dev: "DevSet") -> list[np.ndarray]:
        out = []
        priors = self.first_stage.dev_scores(dev) if self.first_stage is not None else None
        for i, (q, lps) in enumerate(zip(dev.queries, ([dev.labeled[k] for k in c] for c in dev.candidates))):
            texts = [self.select(q, lp) for lp in lps]
            s = self.logits([q] * len(texts), texts).float().cpu().numpy()
            out.append(s + priors[i] if priors is not None else s)
        return out

    def select(self, query: str, lp) -> str:
        """SPBERTQA at inference too: the cross-encoder sees the sentences that matter for this query."""
        if self.selector is None or not self.args.sentence_selection:
            return passage_input(lp, self.args.context)
        text = self.selector.select(query, lp.text, lp.sentences, int(self.args.max_length * 0.7))
        return passage_input(LabeledPassage(lp.pid, lp.doc_id, text, lp.aspect, lp.entities, lp.title, lp.heading),
                             self.args.context)

    def save(self, out_dir: Path) -> dict[str, Any]:
        self.ce.save_pretrained(str(out_dir))
        meta: dict[str, Any] = {"sentence_selection": self.args.sentence_selection}
        if self.first_stage is not None:
            meta["first_stage"] = self.first_stage.save(out_dir)
        return meta


def _classifier_head(model: nn.Module) -> nn.Linear:
    """The last linear layer of a Hugging Face sequence classifier (BERT's `classifier`, RoBERTa's `out_proj`)."""
    head = getattr(model, "classifier", None)
    head = getattr(head, "out_proj", head)
    if not isinstance(head, nn.Linear):
        raise TypeError(f"cannot find the classification head of {type(model).__name__}")
    return head


class FirstStageScores:
    """A frozen bi-encoder's scaled cosine scores, the prior a residual cross-encoder corrects. Passage vectors are
    computed once (and cached on disk by the encoder); queries are encoded per batch."""

    FOLDER = "first_stage"

    def __init__(self, path: str, scale: float) -> None:
        from capr.models.encoder import Encoder, EncoderConfig

        self.path, self.scale = str(path), float(scale)
        self.encoder = Encoder(EncoderConfig(model=self.path))
        self.context = self.encoder.passage_context
        self.vectors: np.ndarray | None = None
        self._dev: tuple[int, list[np.ndarray]] | None = None

    def index_training_passages(self, data: "TrainingSet") -> None:
        from capr.errors import BadInputError

        if parse_context(data.args.context) is not self.context:
            raise BadInputError(self.path, f"the first-stage bi-encoder reads passages with context "
                                f"{self.context.value!r}; train the cross-encoder with --context {self.context.value}")
        self.vectors = self.encoder.encode_passages([passage_input(lp, self.context) for lp in data.train])
        data.dense_negatives = self.hard_negatives

    def hard_negatives(self, query: str, n: int, exclude: set[int], answers, depth: int = 30) -> list[int]:
        """The bi-encoder's best passages for the query that do not answer it: what the re-ranker must fix."""
        sims = self.vectors @ self.encoder.encode_queries([query])[0]
        top = np.argpartition(-sims, min(depth, len(sims) - 1))[:depth]
        top = top[np.argsort(-sims[top], kind="stable")]
        return [int(j) for j in top if int(j) not in exclude and not answers(int(j))][:n]

    def batch_scores(self, queries: list[str], passage_ids: list[int], rows: list[list[int]]) -> np.ndarray:
        q = self.encoder.encode_queries(queries)
        return np.concatenate([self.scale * (self.vectors[[passage_ids[j] for j in row]] @ q[i])
                               for i, row in enumerate(rows)]).astype(np.float32)

    def dev_scores(self, dev: "DevSet") -> list[np.ndarray]:
        if self._dev is None or self._dev[0] != id(dev):
            q = self.encoder.encode_queries(dev.queries)
            p = self.encoder.encode_passages(dev.passages)
            self._dev = (id(dev), [self.scale * (p[c] @ q[i]) for i, c in enumerate(dev.candidates)])
        return self._dev[1]

    def save(self, out_dir: Path) -> dict[str, Any]:
        import shutil

        source = resolve_model(self.path)
        if Path(source).is_dir():  # copied as it is (same weights file and time stamp: see capr.search.second_stage)
            shutil.copytree(source, out_dir / self.FOLDER)
        else:  # a hub id
            from sentence_transformers import SentenceTransformer

            SentenceTransformer(source).save(str(out_dir / self.FOLDER))
        return {"folder": self.FOLDER, "scale": self.scale,
                "source": str(Path(source).resolve()) if Path(source).is_dir() else source}


def build_model(args: TrainArgs, device: torch.device) -> nn.Module:
    kind = ModelKind(args.kind)
    if kind is ModelKind.bi:
        return BiEncoderModel(args, device)
    if kind is ModelKind.poly:
        return PolyEncoderModel(args, device)
    return CrossEncoderModel(args, device)
