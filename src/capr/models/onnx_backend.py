"""ONNX Runtime encoder for sentence-transformers models, fp32 or dynamically quantized int8.

The transformer is exported once with ``torch.onnx.export`` (and quantized with onnxruntime's
``quantize_dynamic``) into capr's model cache; pooling follows the model's own
``1_Pooling/config.json`` (mean or CLS), so vectors match the torch backend up to rounding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np


def _pooling_mode(model_dir: Path) -> str:
    cfg = model_dir / "1_Pooling" / "config.json"
    if cfg.exists():
        c = json.loads(cfg.read_text())
        if c.get("pooling_mode_cls_token"):
            return "cls"
    return "mean"


def _export_graph(model, enc, output: str, target: Path, dynamic_output: dict[int, str]) -> None:
    """torch.onnx.export of a Hugging Face model with dynamic batch/sequence axes, atomically into `target`."""
    import torch

    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc]

    class _Wrapped(torch.nn.Module):
        # keyword call: positional order of forward() differs between transformers versions
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return getattr(self.inner(**dict(zip(names, args))), output)

    dyn = {n: {0: "batch", 1: "seq"} for n in names}
    dyn[output] = dynamic_output
    tmp = target.with_name(target.name + ".tmp")
    with torch.no_grad():
        torch.onnx.export(
            _Wrapped(model), tuple(enc[n] for n in names), str(tmp), input_names=names,
            output_names=[output], dynamic_axes=dyn, opset_version=17, dynamo=False,
        )
    tmp.rename(target)


def _quantized(fp32: Path, int8: Path) -> Path:
    if not int8.exists():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        tmp = int8.with_name(int8.name + ".tmp")
        quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8)
        tmp.rename(int8)
    return int8


def export(model_path: str, target: Path, quantize: bool) -> Path:
    """Exports (and optionally quantizes) the model's transformer; returns the .onnx file."""
    target.mkdir(parents=True, exist_ok=True)
    fp32 = target / "model.onnx"
    if not fp32.exists():
        from transformers import AutoModel, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_path)
        model = AutoModel.from_pretrained(model_path).eval()
        enc = tok(["an example sentence for tracing"], return_tensors="pt")
        _export_graph(model, enc, "last_hidden_state", fp32, {0: "batch", 1: "seq"})
        tok.save_pretrained(str(target))
        (target / "pooling.txt").write_text(_pooling_mode(Path(model_path)))
    return _quantized(fp32, target / "model_int8.onnx") if quantize else fp32


def _session(onnx_file: Path, quick_start: bool = False) -> Any:
    """``quick_start``: weights used as stored (no pre-packed copies), one thread, no memory arena — a session
    starts in a quarter of the time (0.1 s for MiniLM), which is what a process that encodes one query needs."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if quick_start:
        opts.add_session_config_entry("session.disable_prepacking", "1")
        opts.intra_op_num_threads = 1
        opts.enable_cpu_mem_arena = False
    return ort.InferenceSession(str(onnx_file), opts, providers=["CPUExecutionProvider"])


def load_tokenizer(folder: Path, max_length: int, truncation: str = "longest_first") -> Any:
    """The exported fast tokenizer (``tokenizer.json``, Hugging Face ``tokenizers``, no transformers import), set up
    as ``tokenizer(texts, padding=True, truncation=..., max_length=...)`` would be: a saved tokenizer.json may carry
    its own fixed padding and truncation (MiniLM's pads every text to 128), which are replaced."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_length=max_length, strategy=truncation)
    pad = (tok.padding or {}).get("pad_token") or "[PAD]"
    pad_id = tok.token_to_id(pad)
    tok.enable_padding(pad_id=pad_id if pad_id is not None else 0, pad_token=pad)
    return tok


def _feed(encodings: Sequence[Any], inputs: set[str]) -> dict[str, np.ndarray]:
    """ONNX inputs from a padded batch of ``tokenizers`` encodings."""
    columns = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
    return {name: np.asarray([getattr(e, attr) for e in encodings], dtype=np.int64)
            for name, attr in columns.items() if name in inputs}


class OnnxEncoder:
    def __init__(self, onnx_file: Path, max_length: int, quick_start: bool = False) -> None:
        self.session = _session(onnx_file, quick_start)
        self.tokenizer = load_tokenizer(onnx_file.parent, max_length)
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.max_length = max_length
        self.pooling = (onnx_file.parent / "pooling.txt").read_text().strip()

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        out = []
        # sorting by length keeps padding (wasted compute) small inside each batch
        order = np.argsort([len(t) for t in texts])
        for lo in range(0, len(texts), batch_size):
            batch = [texts[i] for i in order[lo : lo + batch_size]]
            feed = _feed(self.tokenizer.encode_batch(batch), self.inputs)
            hidden = self.session.run(["last_hidden_state"], feed)[0]
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = feed["attention_mask"][..., None].astype(np.float32)
                pooled = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            out.append(pooled.astype(np.float32))
        vecs = np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)
        result = np.empty_like(vecs)
        result[order] = vecs
        return result


def export_cross(model_path: str, target: Path, quantize: bool) -> Path:
    """A sequence-classification (cross-encoder) model → ONNX logits graph, optionally int8-quantized."""
    target.mkdir(parents=True, exist_ok=True)
    fp32 = target / "cross.onnx"
    if not fp32.exists():
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_path)
        model = AutoModelForSequenceClassification.from_pretrained(model_path).eval()
        enc = tok(["a query"], ["a passage for tracing"], return_tensors="pt")
        _export_graph(model, enc, "logits", fp32, {0: "batch"})
        tok.save_pretrained(str(target))
    return _quantized(fp32, target / "cross_int8.onnx") if quantize else fp32


class OnnxCrossEncoder:
    def __init__(self, onnx_file: Path, max_length: int) -> None:
        self.session = _session(onnx_file)
        self.tokenizer = load_tokenizer(onnx_file.parent, max_length, truncation="only_second")
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.max_length = max_length

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        out = np.empty(len(pairs), dtype=np.float32)
        order = np.argsort([len(q) + len(p) for q, p in pairs])
        for lo in range(0, len(pairs), batch_size):
            idx = order[lo : lo + batch_size]
            feed = _feed(self.tokenizer.encode_batch([pairs[i] for i in idx]), self.inputs)
            out[idx] = self.session.run(["logits"], feed)[0].reshape(-1)
        return out
