"""Second-stage re-rankers on top of any retriever: `cross:DIR` (a trained CrossEncoder), `poly:DIR`
(a trained poly-encoder; passage codes are cached, so re-ranking encodes only the query), `bi:DIR` (`bi:minilm`: the
bundled MiniLM) and an ensemble of several (`bi:minilm,bi:DIR`: their standardised scores summed)."""

from __future__ import annotations

import json
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from capr.errors import CaprError, QueryError
from capr.models.card import card_context, read_card
from capr.models.context import PassageContext, read_passage
from capr.models.loading import local_path, pick_device, quiet_transformers

DEFAULT_RERANK_DEPTH = 20
# the re-ranker's share when its ranking is fused with the first stage's (capr.search.Searcher.rerank), chosen on
# dev sets (experiments/rerank_share_dev.py; docs/RESULTS.md)
DEFAULT_RERANK_SHARE = 0.3
# an ensemble holds the first stage's own model, so it takes most of the say; the first stage's rank keeps a share
# because on consumer questions over whole answers its BM25 half finds what the dense members miss (acronyms,
# rare names). 0.6: the best mean MAP over the five dev sets of experiments/rerank_share_dev.py (docs/RESULTS.md, issue 17,
# eighth part); 1.0, the earlier value, was chosen on medquad-dev and MEDIQA training set 2 alone
ENSEMBLE_RERANK_SHARE = 0.6


class Reranker(Protocol):
    name: str
    context: PassageContext  # what of its document a passage is read with (as the model was trained)

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray: ...


RERANKER_KINDS = ("cross", "cross-int8", "poly", "bi")


def _check_dir(path: Path, kind: str) -> None:
    if kind == "bi" and str(path) == "minilm":
        return
    if not path.is_dir():
        raise QueryError(f"re-ranker {kind}:{path}: no such model folder")


def _json_file(path: Path) -> object:
    """A small JSON file of a model folder, or None when it is absent or unreadable (the loader then decides)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _is_bi_encoder(path: Path) -> bool:
    """A sentence-transformers bi-encoder folder: modules.json lists a Pooling module and the folder does not say it
    is a CrossEncoder (sentence-transformers' own test before it 'converts' such a folder into a cross-encoder with
    an untrained head). Conservative: anything else is left to the loader."""
    modules = _json_file(path / "modules.json")
    if not isinstance(modules, list):
        return False
    pooling = any(isinstance(m, dict) and str(m.get("type", "")).rsplit(".", 1)[-1] == "Pooling" for m in modules)
    st_config = _json_file(path / "config_sentence_transformers.json")
    model_type = st_config.get("model_type", "SentenceTransformer") if isinstance(st_config, dict) else "SentenceTransformer"
    return pooling and model_type == "SentenceTransformer"


def _card_kind(path: Path, label: str) -> str | None:
    try:
        kind = read_card(path).get("kind")
    except (OSError, ValueError, AttributeError):
        raise QueryError(f"re-ranker {label}:{path}: its capr.json is not a valid model card") from None
    return str(kind) if kind else None


def check_model_folder(kind: str, path: str | Path) -> None:
    """Refuses a folder that cannot be the re-ranker its spec names, from its files alone (no model is loaded): a
    bi-encoder given as cross: would be 'converted' into a cross-encoder with a random head, and given as poly:
    would get random codes; either re-ranks by noise with exit 0."""
    path = Path(path)
    _check_dir(path, kind)
    if kind in ("cross", "cross-int8"):
        card_kind = _card_kind(path, kind)
        if card_kind == "cross":
            return
        if card_kind == "bi" or _is_bi_encoder(path):
            raise QueryError(f"{kind}:{path} is a bi-encoder (sentence-transformers with pooling), not a cross-encoder; "
                             f"use bi:{path}")
        if card_kind is not None:
            raise QueryError(f"{kind}:{path} is a capr {card_kind} model (capr.json), not a cross-encoder")
    elif kind == "poly":
        card_kind = _card_kind(path, kind)
        if card_kind == "poly":
            if not (path / "poly_codes.pt").is_file():
                raise QueryError(f"poly:{path}: poly_codes.pt is missing; the poly-encoder folder is incomplete")
            return
        if card_kind == "bi" or _is_bi_encoder(path):
            raise QueryError(f"poly:{path} is a bi-encoder (sentence-transformers with pooling), not a poly-encoder; "
                             f"use bi:{path}")
        what = f"a capr {card_kind} model" if card_kind else "not a capr poly-encoder (no capr.json with kind 'poly')"
        raise QueryError(f"poly:{path} is {what}; poly: needs a poly-encoder trained by capr")


def parse_reranker_spec(spec: str) -> list[tuple[str, str]]:
    """(kind, path) of each member of a spec (``KIND:PATH``, several separated by commas), without loading."""
    parts = [p.strip() for p in spec.split(",")] if spec and "," in spec else [spec]
    if len(parts) > 1 and any(not p for p in parts):
        raise QueryError(f"re-ranker {spec!r}: an empty member between commas")
    members = []
    for part in parts:
        kind, sep, path = (part or "").partition(":")
        if not sep or not path:
            raise QueryError(f"re-ranker {part!r}: expected KIND:PATH with KIND cross, poly or bi")
        if kind not in RERANKER_KINDS:
            raise QueryError(f"re-ranker {part!r}: unknown kind {kind!r}; choose cross, cross-int8, poly or bi")
        members.append((kind, path))
    return members


def check_reranker_spec(spec: str) -> None:
    """Validates a spec as a service starts (each member parses, its folder exists and is of its kind) without
    loading any model: a bad --reranker is refused at startup, not by every request that names it."""
    for kind, path in parse_reranker_spec(spec):
        check_model_folder(kind, path)


class CrossReranker:
    """backend "torch", "onnx" or "onnx-int8" (exported once into capr's model cache)."""

    def __init__(self, path: str | Path, batch_size: int = 64, device: str | None = None, backend: str = "torch") -> None:
        path = Path(path)
        check_model_folder("cross-int8" if backend == "onnx-int8" else "cross", path)
        card = read_card(path)
        self.name = f"cross:{path}"
        self.context = card_context(card)
        self.max_length = int(card.get("max_length") or 256)
        self.select = bool(card.get("sentence_selection", False))
        self.batch_size = batch_size
        self.backend = backend
        if backend == "torch":
            from sentence_transformers import CrossEncoder

            quiet_transformers()
            self.model = CrossEncoder(local_path(str(path)), num_labels=1, max_length=self.max_length,
                                      device=str(pick_device(device)))
        elif backend in ("onnx", "onnx-int8"):
            from capr.models.encoder import _slug, _weights_stamp, cache_root
            from capr.models.onnx_backend import OnnxCrossEncoder, export_cross

            target = cache_root() / "models" / f"cross-onnx-{_slug(str(path.resolve()) + _weights_stamp(str(path)))}"
            self.model = OnnxCrossEncoder(export_cross(str(path), target, quantize=backend == "onnx-int8"), self.max_length)
            self.name = f"cross-{backend}:{path}"
        else:
            raise QueryError(f"unknown cross-encoder backend {backend!r}; choose torch, onnx or onnx-int8")
        self.first_stage = _first_stage(path, card)

    def prior(self, query: str, passages: Sequence[str]) -> np.ndarray | None:
        """A residual cross-encoder's bi-encoder scores (scaled cosine), which its logits correct."""
        if self.first_stage is None:
            return None
        encoder, scale = self.first_stage
        return scale * (encoder.encode_passages(list(passages)) @ encoder.encode_queries([query])[0])

    def _selected(self, query: str, passages: Sequence[str]) -> list[str]:
        if not self.select:
            return list(passages)
        from capr.corpus.segment import split_sentences
        from capr.text.analyzer import Analyzer, AnalyzerConfig
        from capr.models.selection import SentenceSelector

        analyzer = Analyzer(AnalyzerConfig())
        df: Counter = Counter()
        for p in passages:
            df.update(set(analyzer(p)))
        selector = SentenceSelector(analyzer, df, len(passages))
        budget = int(self.max_length * 0.7)
        return [selector.select(query, p, split_sentences(p), budget) for p in passages]

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float32)
        texts = self._selected(query, passages)
        if self.backend != "torch":
            s = self.model.predict([(query, t) for t in texts], batch_size=self.batch_size)
        else:
            import torch

            # raw logits, as in training (sentence-transformers would apply a sigmoid): a residual cross-encoder's
            # logits are added to its bi-encoder's scores
            s = self.model.predict([(query, t) for t in texts], batch_size=self.batch_size, show_progress_bar=False,
                                   activation_fn=torch.nn.Identity(), convert_to_numpy=True)
        s = np.asarray(s, dtype=np.float32).reshape(-1)
        prior = self.prior(query, passages)
        return s if prior is None else (s + prior).astype(np.float32)


def _first_stage(path: Path, card: dict) -> "tuple[object, float] | None":
    """The bi-encoder saved inside a residual cross-encoder (`capr train cross --first-stage BI`). When the folder it
    was copied from still holds the same weights, that name is used, so passage vectors the index already computed
    with it come from the embedding cache instead of being encoded again."""
    meta = card.get("first_stage")
    if not meta:
        return None
    from capr.models.encoder import Encoder, EncoderConfig, _weights_stamp

    inside = path / meta.get("folder", "first_stage")
    if not inside.is_dir():
        raise QueryError(f"re-ranker {path}: its first-stage bi-encoder {inside} is missing")
    source = meta.get("source")
    same = source and Path(source).is_dir() and _weights_stamp(source) == _weights_stamp(str(inside)) != ""
    return Encoder(EncoderConfig(model=source if same else str(inside))), float(meta.get("scale", 20.0))


class PolyReranker:
    def __init__(self, path: str | Path, device: str | None = None, cache: bool = True) -> None:
        from capr.models.cache import EmbeddingCache
        from capr.models.encoder import _weights_stamp, cache_root
        from capr.models.poly import PolyConfig, PolyEncoder

        path = Path(path)
        check_model_folder("poly", path)
        card = read_card(path)
        args = PolyConfig.from_card(card)
        self.name = f"poly:{path}"
        self.context = card_context(card)
        self.model = PolyEncoder(str(path), args, pick_device(device)).eval()
        self.key = f"poly|{path.resolve()}{_weights_stamp(str(path))}|{args.max_length}"
        self.cache = EmbeddingCache(cache_root() / "embeddings.sqlite") if cache else None
        self.m, self.d = args.poly_codes, self.model.codes.shape[1]

    def passage_codes(self, passages: Sequence[str]) -> np.ndarray:
        """[n, m, d]; computed once per passage text and model, then read from the cache."""
        import torch

        with torch.no_grad():
            return self._passage_codes(passages)

    def _passage_codes(self, passages: Sequence[str]) -> np.ndarray:
        got = self.cache.get_many(self.key, list(passages)) if self.cache else [None] * len(passages)
        missing = [i for i, v in enumerate(got) if v is None]
        for lo in range(0, len(missing), 32):
            part = missing[lo : lo + 32]
            codes = self.model.passage_codes([passages[i] for i in part]).float().cpu().numpy()
            flat = codes.reshape(len(part), -1).astype(np.float32)
            for i, v in zip(part, flat):
                got[i] = v
            if self.cache:
                self.cache.put_many(self.key, [passages[i] for i in part], flat)
        return np.stack(got).reshape(len(passages), self.m, self.d)

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        import torch

        if not passages:
            return np.zeros(0, dtype=np.float32)
        with torch.no_grad():
            q = self.model.embed_queries([query])
            codes = torch.from_numpy(self.passage_codes(passages)).to(q.device)
            return self.model.interact(q, codes).squeeze(0).float().cpu().numpy()


class Windows(str, Enum):
    """How a bi-encoder second stage reads a passage longer than a window (capr.models.encoder.passage_windows)."""

    off = "off"  # as the encoder truncates it: its first 256 word pieces, like the first stage's one vector
    plain = "plain"  # the best window of what the model reads (title included, so only the first window has it)
    context = "context"  # the best window of the passage text, each window read with its title or document context


class BiReranker:
    """A bi-encoder as a second stage: query · passage. A passage longer than a window scores as its best window
    (MaxP; ``windows``, default: each window read as the model reads the whole passage), where the first stage's
    one vector per passage saw only its beginning: +2.2 MAP on MEDIQA training set 2 for the ensemble second stage
    (docs/RESULTS.md, best-window second stage)."""

    def __init__(self, path: str | Path, windows: Windows = Windows.context) -> None:
        from capr.models.encoder import Encoder, EncoderConfig

        path = Path(path)
        _check_dir(path, "bi")  # "minilm": the bundled model, as EncoderConfig names it
        self.name = f"bi:{path}"
        self.encoder = Encoder(EncoderConfig(model=str(path)))
        self.context = self.encoder.passage_context
        self.windows = Windows(windows)

    def read_windows(self, passage, index_text: str | None = None) -> list[str]:
        """What this model reads of a passage (records): the whole passage as it was trained to read it, or, for a
        passage longer than a window, each window so read."""
        from capr.models.context import contextual_text
        from capr.models.encoder import passage_windows

        whole = self.encoder.passage_text(passage, index_text)
        if self.windows is Windows.off:
            return [whole]
        if self.windows is Windows.plain:
            return passage_windows(whole)
        parts = passage_windows(passage.text)
        if len(parts) == 1:
            return [whole]
        if self.context is PassageContext.off:
            # the index text is the passage with its title in front (capr.index.segment.passage_index_text)
            prefix = index_text[: len(index_text) - len(passage.text)] if index_text and index_text.endswith(passage.text) else ""
            return [prefix + w for w in parts]
        return [contextual_text(w, passage.title, passage.heading, self.context) for w in parts]

    def score_passages(self, query: str, passages: Sequence, index_texts: Sequence[str | None]) -> np.ndarray:
        return self._best_window(query, [self.read_windows(p, t) for p, t in zip(passages, index_texts)])

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Plain passage texts."""
        from capr.models.encoder import passage_windows

        return self._best_window(query, [[t] if self.windows is Windows.off else passage_windows(t) for t in passages])

    def _best_window(self, query: str, windows: list[list[str]]) -> np.ndarray:
        if not windows:
            return np.zeros(0, dtype=np.float32)
        q = self.encoder.encode_queries([query])
        scores = self.encoder.encode_passages([w for ws in windows for w in ws]) @ q[0]
        ends = np.cumsum([len(ws) for ws in windows])
        return np.asarray([scores[end - len(ws) : end].max() for ws, end in zip(windows, ends)], dtype=np.float32)


class EnsembleReranker:
    """Several re-rankers as one: each member scores the candidates reading them as it was trained to (its own
    passage context), its scores are standardised over the candidates (z-scores: no member's scale dominates), and
    the standardised scores are summed. Zero-shot MiniLM and a bi-encoder trained on the corpus disagree where each
    is weak (consumer wording vs the corpus' own phrasing), so their sum ranks better than either (dev table:
    docs/RESULTS.md, issue 18, sixth part)."""

    context = PassageContext.off
    default_share = ENSEMBLE_RERANK_SHARE

    def __init__(self, members: Sequence[Reranker]) -> None:
        if len(members) < 2:
            raise QueryError("an ensemble re-ranker needs at least two members")
        self.members = list(members)
        self.name = ",".join(m.name for m in self.members)

    def score_passages(self, query: str, passages: Sequence, index_texts: Sequence[str | None]) -> np.ndarray:
        total = np.zeros(len(passages), dtype=np.float64)
        for member in self.members:
            total += standardised(score_passages(member, query, passages, index_texts))
        return total

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Plain passage texts (every member reads the same text)."""
        return np.asarray(sum(standardised(m.score(query, passages)) for m in self.members), dtype=np.float64)


def standardised(scores: np.ndarray) -> np.ndarray:
    """z-scores over the candidates; all-equal scores (or a single candidate) carry no preference: zeros."""
    s = np.asarray(scores, dtype=np.float64)
    if len(s) == 0:
        return s
    spread = s.std()
    return (s - s.mean()) / spread if spread > 1e-12 else np.zeros_like(s)


def score_passages(reranker: Reranker, query: str, passages: Sequence, index_texts: Sequence[str | None] | None = None) -> np.ndarray:
    """The re-ranker's scores for these passages (records), each read as the re-ranker was trained to read it;
    ``index_texts``: what the index's encoder embedded for each (see reranker_text)."""
    index_texts = index_texts if index_texts is not None else [None] * len(passages)
    if hasattr(reranker, "score_passages"):
        return np.asarray(reranker.score_passages(query, passages, index_texts), dtype=np.float64)
    texts = [reranker_text(reranker, p, t) for p, t in zip(passages, index_texts)]
    return np.asarray(reranker.score(query, texts), dtype=np.float64)


def rerank_share(reranker: Reranker | None, share: float | None) -> float:
    """The share a re-ranker's ranking gets against the first stage's: the one asked for, else the re-ranker's own
    default (an ensemble's), else DEFAULT_RERANK_SHARE."""
    if share is not None:
        return share
    return float(getattr(reranker, "default_share", DEFAULT_RERANK_SHARE))


def warm_passage_vectors(reranker: Reranker, index, progress: Callable[[int], None] | None = None,
                         chunk: int = 256) -> int:
    """Encodes every live passage of ``index`` (a capr Index) with each bi-encoder in ``reranker`` (itself or an
    ensemble's members), as that model reads it, into the embedding cache: the index build fills the cache for the
    index's own model only, and a second stage that encodes its 20 candidates at query time takes ~1.5 s where
    cached vectors take ~30 ms (bench/bench_second_stage.py). Each bi-encoder's query side is exported to ONNX here
    too (capr.models.onnx_queries), so a search with this second stage needs no torch. Returns the passages read
    per model."""
    from capr.index.segment import passage_index_text

    bis = [m for m in getattr(reranker, "members", [reranker]) if isinstance(m, BiReranker)]
    for m in bis:
        m.encoder.prepare_queries()
    rows = np.flatnonzero(index.live)
    titles = index.includes_titles()
    for lo in range(0, len(rows), chunk):
        passages = index.passages(rows[lo : lo + chunk])
        for m in bis:
            m.encoder.encode_passages([w for p in passages for w in m.read_windows(p, passage_index_text(p, titles))])
        if progress:
            progress(len(passages))
    return len(rows)


NO_RERANKER = "none"  # asks for no second stage, even on an index that records one


def spec_share(spec: str, share: float | None) -> float:
    """rerank_share for a re-ranker named by its spec, without loading it."""
    if share is not None:
        return share
    return ENSEMBLE_RERANK_SHARE if len(parse_reranker_spec(spec)) > 1 else DEFAULT_RERANK_SHARE


def load_reranker(spec: str) -> Reranker:
    """`cross:DIR`, `cross-int8:DIR` (ONNX Runtime, int8), `poly:DIR` or `bi:DIR` (`bi:minilm`: the bundled
    MiniLM); several separated by commas (`bi:minilm,bi:DIR`) are one EnsembleReranker."""
    members = parse_reranker_spec(spec)
    if len(members) > 1:
        return EnsembleReranker([load_reranker(f"{k}:{p}") for k, p in members])
    kind, path = members[0]
    try:
        if kind == "cross":
            return CrossReranker(path)
        if kind == "cross-int8":
            return CrossReranker(path, backend="onnx-int8")
        if kind == "poly":
            return PolyReranker(path)
        if kind == "bi":
            return BiReranker(path)
    except CaprError:
        raise
    except Exception as e:  # model loading errors from the HF stack are many and varied
        raise QueryError(f"re-ranker {spec!r} cannot be loaded: {type(e).__name__}: {e}") from None
    raise AssertionError(kind)  # parse_reranker_spec admits only RERANKER_KINDS


def reranker_text(reranker: Reranker, passage, index_text: str | None = None) -> str:
    """The passage as the re-ranker was trained to read it (with its title/heading when trained with context); a
    re-ranker trained without context reads ``index_text`` when given — what the index's encoder embedded (title +
    text in an index that includes titles), so a second stage sees no less of the passage than the first."""
    return read_passage(passage, getattr(reranker, "context", PassageContext.off), index_text)


def rerank_scores(first_stage: np.ndarray, score_top: "Callable[[list[int]], np.ndarray]", depth: int,
                  share: float = 1.0, rrf_k: int = 60) -> np.ndarray:
    """Scores where the top `depth` candidates of the first stage are ordered by the re-ranker (``score_top``:
    its scores for those candidates' positions) and stay above the rest, which keep their first-stage order.
    ``share`` < 1 fuses the re-ranker's rank with the first stage's among the top, as
    :meth:`capr.search.Searcher.rerank` does (share × 1/(rrf_k + re-ranker rank) + (1 − share) × 1/(rrf_k + first
    rank)), so a check that scores candidates this way ranks as `capr search` does."""
    first_stage = np.asarray(first_stage, dtype=np.float64)
    n = len(first_stage)
    if n == 0 or depth <= 0:
        return first_stage
    top = np.argsort(-first_stage, kind="stable")[: min(depth, n)]
    rr = np.asarray(score_top([int(i) for i in top]), dtype=np.float64)
    out = np.empty(n, dtype=np.float64)
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(-first_stage, kind="stable")] = np.arange(n)
    out[:] = -rank  # below every re-ranked candidate
    if share >= 1.0:
        span = (rr.max() - rr.min()) if len(rr) else 0.0
        out[top] = n + (rr - rr.min()) / (span or 1.0)
        return out
    rr_rank = np.empty(len(top), dtype=np.int64)
    rr_rank[np.argsort(-rr, kind="stable")] = np.arange(1, len(top) + 1)
    value = fuse_with_first_stage(1.0 / (rrf_k + rr_rank), share, rrf_k)
    out[top] = n + value - 1e-9 * np.arange(len(top))  # ties: the first stage's order
    return out


def fuse_with_first_stage(reranker_value: np.ndarray, share: float, rrf_k: int) -> np.ndarray:
    """``share`` × the re-ranker's value of each candidate (its reciprocal rank, boosts applied) + (1 − ``share``) ×
    the first stage's reciprocal rank; the candidates are in the first stage's order."""
    return share * reranker_value + (1.0 - share) / (rrf_k + np.arange(1, len(reranker_value) + 1))
