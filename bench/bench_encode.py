#!/usr/bin/env python3
"""Passage encoding side by side: sentence-transformers ``encode()`` against capr's pipelined encoder
(capr.models.pipelined: worker threads tokenise while the model encodes; on a GPU, batches of 1,024 from pinned
memory in float16), on the same model, device and text — issue 55, item 5.

    .venv/bin/python -m bench.bench_encode                        # the device present (a GPU when there is one)
    .venv/bin/python -m bench.bench_encode --passages 2000 --device cpu

Text: MTSamples transcriptions cut into chunks of 120 words (as the issue measured). Both encoders get the same
model object; a warm-up batch runs first; each is timed over every passage, one after the other, twice, in
alternating order, and the faster run of each is reported. Agreement: cosine of each passage's two vectors.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import os
import time
from pathlib import Path

import numpy as np

from bench.common import DEFAULT_DATA, log

WORDS = 120


def mtsamples_chunks(data: Path, n: int) -> list[str]:
    """The first ``n`` chunks of ``WORDS`` words of MTSamples' transcriptions (repeated if there are fewer)."""
    raw = gzip.decompress((data / "mtsamples" / "mtsamples.csv.gz").read_bytes()).decode("utf-8")
    chunks: list[str] = []
    for row in csv.DictReader(io.StringIO(raw)):
        words = (row.get("transcription") or "").replace(",", ", ").split()
        chunks += [" ".join(words[i:i + WORDS]) for i in range(0, len(words), WORDS) if len(words[i:i + WORDS]) >= 20]
    if not chunks:
        raise SystemExit(f"no MTSamples text under {data}")
    return (chunks * (n // len(chunks) + 1))[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=None, help="default 100,000 on a GPU, 1,000 on the CPU")
    ap.add_argument("--device", default=None, help="cuda / cpu (default: cuda when present)")
    ap.add_argument("--model", default="minilm", help="a model name or path capr resolves (default MiniLM-L6)")
    ap.add_argument("--batch", type=int, default=32, help="encode()'s batch size (capr's, on the CPU; on a GPU "
                    "capr batches at least 1,024)")
    ap.add_argument("--st-batch-gpu", type=int, default=None, help="encode()'s batch size on a GPU (default: --batch)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from capr.models.loading import pick_device, quiet_transformers, resolve_model
    from capr.models.pipelined import PipelinedEncoder

    quiet_transformers()
    device = pick_device(args.device)
    on_gpu = device.type == "cuda"
    n = args.passages or (100_000 if on_gpu else 1_000)
    texts = mtsamples_chunks(args.data, n)
    model = SentenceTransformer(resolve_model(args.model), device=str(device))
    model.max_seq_length = args.max_length
    tokens = [len(t) for t in model.tokenizer(texts[:2000], truncation=True, max_length=args.max_length)["input_ids"]]
    st_batch = args.st_batch_gpu or args.batch if on_gpu else args.batch
    pipelined = PipelinedEncoder(model, args.batch)

    def plain() -> np.ndarray:
        return model.encode(texts, batch_size=st_batch, convert_to_numpy=True)

    def capr_side() -> np.ndarray:
        return pipelined.encode(texts)

    def timed(fn):
        if on_gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if on_gpu:
            torch.cuda.synchronize()
        return time.perf_counter() - t0, out

    log(f"bench.bench_encode: {n:,} chunks of {WORDS} words ({np.mean(tokens):.0f} tokens on average, at most "
        f"{args.max_length}); model {args.model}; device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if on_gpu else f", {os.cpu_count()} cores, torch threads "
           f"{torch.get_num_threads()}"))
    model.encode(texts[:256], batch_size=st_batch)
    pipelined.encode(texts[:2048])
    best: dict[str, float] = {}
    vectors: dict[str, np.ndarray] = {}
    for name, fn in (("encode()", plain), ("capr", capr_side), ("capr", capr_side), ("encode()", plain)):
        s, v = timed(fn)
        best[name] = min(best.get(name, s), s)
        vectors[name] = v
        log(f"  {name}: {s:.1f} s ({n / s:,.0f} passages/s)")
    a, b = vectors["encode()"], vectors["capr"]
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    print()
    print(f"| {n:,} passages, {device} | sentence-transformers `encode()` (batch {st_batch}) | capr pipelined "
          f"(batch {pipelined.batch_size}, {pipelined.threads} tokenising threads, "
          f"{'float16' if pipelined.half else 'float32'}) |")
    print("|---|---|---|")
    print(f"| passages/s (best of 2) | {n / best['encode()']:,.0f} | {n / best['capr']:,.0f} "
          f"({best['encode()'] / best['capr']:.2f}×) |")
    print(f"| agreement with `encode()` | — | cosine min {cos.min():.6f}, mean {cos.mean():.6f}; "
          f"equal bits {np.array_equal(a, b)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
