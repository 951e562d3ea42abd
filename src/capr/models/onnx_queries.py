"""The query side of a sentence-transformers encoder without torch: its transformer exported once to ONNX (with
the fast tokenizer it reads through), run by ONNX Runtime and Hugging Face ``tokenizers``. A search then needs
neither torch, transformers nor sentence-transformers (importing them is most of a cold `capr search`).

An export lives in capr's model cache under the hash of the model's files (two copies of one model share it), and
is made where torch is loaded anyway: by `capr index` (and `capr adapt` for a bi-encoder second stage), else once
by the first search that needs it. It is kept only when it encodes a set of probe texts as the torch model does
(cosine ≥ 1 − QUERY_TOLERANCE); a model it cannot reproduce (another pooling, extra modules, no fast tokenizer)
is recorded as such, and its queries stay on torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

EXPORT_VERSION = 1
QUERY_TOLERANCE = 1e-4  # the largest cosine distance to the torch encoder's vector accepted on a probe text
QUERY_BACKEND_ENV = "CAPR_QUERY_BACKEND"  # "torch": encode queries with torch even where an export exists
SUPPORTED_MODULES = ("Transformer", "Pooling", "Normalize")
SUPPORTED_POOLING = ("mean", "cls")
# what decides a model's vectors: its weights, configuration and tokenizer files
_MODEL_FILES = ("model.safetensors", "pytorch_model.bin", "config.json", "tokenizer.json", "tokenizer_config.json",
                "vocab.txt", "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
                "1_Pooling/config.json")
# probe texts an export must encode as torch does: cased, accented, punctuated, empty, and one longer than any
# max length (truncation)
PROBES = (
    "how is gout treated",
    "What are the symptoms of IgA nephropathy?",
    "Metformin 500 mg BID; HbA1c 7.9% — café-au-lait spots, naïve Sjögren's?",
    "",
    " ".join(["chest pain radiating to the left arm with dyspnea and diaphoresis"] * 60),
)


def torch_forced() -> bool:
    return os.environ.get(QUERY_BACKEND_ENV, "").strip().lower() == "torch"


def content_hash(folder: Path) -> str:
    """sha256 over the model's files that decide its vectors (names and bytes)."""
    h = hashlib.sha256(f"capr-query-onnx-v{EXPORT_VERSION}".encode())
    for name in _MODEL_FILES:
        path = folder / name
        if path.is_file():
            h.update(name.encode() + b"\x00")
            with path.open("rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
    return h.hexdigest()


def _pointer(models_dir: Path, key: str) -> Path:
    """Where the export made for a model (path, weights stamp, max length) is named: a search finds it without
    reading the weights."""
    return models_dir / "query-onnx" / f"{hashlib.sha1(key.encode()).hexdigest()[:20]}.json"


def find_export(models_dir: Path, key: str) -> tuple[Path | None, str | None]:
    """(folder, None) for a usable export; (None, reason) when exporting this model failed; (None, None) when it
    was never tried (or the export was since removed)."""
    try:
        record = json.loads(_pointer(models_dir, key).read_text())
    except (OSError, ValueError):
        return None, None
    if record.get("failed"):
        return None, str(record["failed"])
    folder = models_dir / str(record.get("folder", ""))
    return (folder, None) if (folder / "meta.json").is_file() else (None, None)


def _record(models_dir: Path, key: str, record: dict[str, Any]) -> None:
    path = _pointer(models_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _pooling(module: Any) -> str | None:
    cfg = module.get_config_dict()
    mode = cfg.get("pooling_mode")
    if mode is None:  # sentence-transformers 5 writes one flag per mode
        on = [k.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
              for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True]
        mode = on[0] if len(on) == 1 else "+".join(on)
    return mode


def unsupported(st_model: Any, folder: Path) -> str | None:
    """Why this loaded sentence-transformers model has no ONNX query export here, or None."""
    if not folder.is_dir():
        return f"{folder} is not a local model folder"
    kinds = [type(m).__name__ for m in st_model]
    if not kinds or kinds[0] != "Transformer" or any(k not in SUPPORTED_MODULES for k in kinds):
        return f"its modules {kinds} are not Transformer → Pooling (→ Normalize)"
    pooling = [_pooling(m) for m in st_model if type(m).__name__ == "Pooling"]
    if len(pooling) != 1 or pooling[0] not in SUPPORTED_POOLING:
        return f"its pooling {pooling} is not mean or CLS"
    if getattr(st_model.tokenizer, "backend_tokenizer", None) is None:
        return "it has no fast (tokenizers) tokenizer"
    return None


def export(st_model: Any, folder: Path, models_dir: Path, key: str, prefix: str = "") -> tuple[Path | None, str | None]:
    """Exports (or finds, by content hash) the ONNX query encoder of ``st_model`` (loaded from ``folder``),
    checks it against the torch model on PROBES (each after the model's query ``prefix``, a marker token for some)
    and records the outcome under ``key``: (export folder, None) or (None, why not)."""
    try:
        reason = unsupported(st_model, folder)
        target = None
        if reason is None:
            max_length = int(st_model.max_seq_length)
            target = models_dir / f"query-onnx-{content_hash(folder)[:24]}-L{max_length}"
            if not (target / "meta.json").is_file():
                reason = _export_checked(st_model, target, max_length, [prefix + p for p in PROBES])
    except Exception as e:  # the torch exporter's and ONNX Runtime's errors are many and varied
        reason, target = f"export failed: {type(e).__name__}: {e}".splitlines()[0], None
    _record(models_dir, key, {"failed": reason} if reason else {"folder": target.name})
    return (None, reason) if reason else (target, None)


def _export_checked(st_model: Any, target: Path, max_length: int, probes: list[str]) -> str | None:
    from capr.models.onnx_backend import OnnxEncoder, _export_graph

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        enc = st_model.tokenizer(["an example sentence for tracing"], return_tensors="pt")
        with warnings.catch_warnings():  # the tracer's notes on how it exported an operator are not the user's
            warnings.simplefilter("ignore")
            _export_graph(st_model[0].auto_model, enc, "last_hidden_state", tmp / "graph.onnx", {0: "batch", 1: "seq"})
        _weights_apart(tmp / "graph.onnx", tmp / "model.onnx")
        st_model.tokenizer.backend_tokenizer.save(str(tmp / "tokenizer.json"))
        pooling = _pooling(next(m for m in st_model if type(m).__name__ == "Pooling"))
        (tmp / "pooling.txt").write_text(pooling)
        twin = OnnxEncoder(tmp / "model.onnx", max_length, quick_start=True)  # as load() will run it
        want = st_model.encode(probes, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
        got = normalised(twin.encode(probes))
        worst = float(1.0 - (np.asarray(want, dtype=np.float64) * got).sum(1).min())
        if worst > QUERY_TOLERANCE:
            return f"its ONNX export differs from torch (cosine distance {worst:.1e} on a probe text)"
        meta = {"version": EXPORT_VERSION, "max_length": max_length, "pooling": pooling, "dim": int(got.shape[1]),
                "probe_cosine_distance": worst}
        (tmp / "meta.json").write_text(json.dumps(meta))
        for path in (tmp, *tmp.iterdir()):  # mkdtemp's owner-only modes: a shared cache is readable like the others
            path.chmod(0o755 if path.is_dir() else 0o644)
        try:
            tmp.rename(target)
        except OSError:  # another process exported the same model first
            if not (target / "meta.json").is_file():
                raise
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _weights_apart(source: Path, target: Path) -> None:
    """The graph with its weights in a file of their own (``model.onnx.data``), which ONNX Runtime maps instead of
    parsing and copying them out of the protobuf: a session starts in half the time and memory."""
    import onnx

    onnx.save_model(onnx.load(str(source)), str(target), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=target.name + ".data", size_threshold=1024)
    source.unlink()


_LOADED: dict[Path, Any] = {}
_LOAD_LOCK = threading.Lock()


def load(folder: Path) -> Any:
    """The export as an OnnxEncoder (ONNX Runtime + tokenizers), one per process: the index's encoder and a second
    stage of the same model (`bi:minilm`) share its session."""
    from capr.models.onnx_backend import OnnxEncoder

    with _LOAD_LOCK:
        if folder not in _LOADED:
            meta = json.loads((folder / "meta.json").read_text())
            _LOADED[folder] = OnnxEncoder(folder / "model.onnx", int(meta["max_length"]), quick_start=True)
        return _LOADED[folder]


def normalised(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


__all__ = ["QUERY_BACKEND_ENV", "QUERY_TOLERANCE", "content_hash", "export", "find_export", "load", "normalised",
           "torch_forced", "unsupported"]
