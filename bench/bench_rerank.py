"""Latency of ranking 2,048 candidate passages for one query with bi-, poly- and cross-encoders on this machine
(the CAPR paper: cross ≈ 10 s on a V100, bi/poly < 1 s), and the cross-encoder's ONNX int8 speed-up.

    .venv/bin/python -m bench.bench_rerank --bi DIR --poly DIR --cross DIR [--n 2048]

Without model folders the untrained MiniLM-L6 architecture is timed (latency does not depend on the weights).
Candidates are the first N passages of medquad_cdv_test (../shared/data), or demo passages when it is absent.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import DEFAULT_DATA

os.environ.setdefault("HF_HUB_OFFLINE", "1")

QUERY = "IgA nephropathy symptoms and presentation"


def candidates(n: int, data_dir: Path) -> list[str]:
    path = data_dir / "medquad_cdv_test" / "passages.jsonl.gz"
    texts: list[str] = []
    if path.exists():
        with gzip.open(path, "rt") as fh:
            texts = [json.loads(line)["text"] for line in fh]
    else:
        from capr.demo import demo_corpus_dir

        texts = [p.read_text() for p in sorted(demo_corpus_dir().glob("*.txt"))]
    while len(texts) < n:
        texts = texts + texts
    return texts[:n]


def timed(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def untrained(kind: str, root: Path) -> Path:
    """A model folder of the given kind built from MiniLM without training steps (for timing only)."""
    from capr.labels.generate import LabeledPassage
    from capr.train import ModelKind, TrainArgs, train

    out = root / kind
    labels = [LabeledPassage(pid=f"p{i}", doc_id=f"d{i}", text=f"passage {i} about topic {i % 3}", aspect="a",
                             entities=[f"e{i}"]) for i in range(4)]
    args = TrainArgs(kind=ModelKind(kind), max_steps=1, batch_size=2, dev_fraction=0.0, lr=1e-12,
                     max_length=256, hard_negatives=0)
    train(labels, out, args, progress=False)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bi")
    ap.add_argument("--poly")
    ap.add_argument("--cross")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA))
    a = ap.parse_args()

    import torch

    from capr.search.second_stage import BiReranker, CrossReranker, PolyReranker

    tmp = Path(tempfile.mkdtemp(prefix="capr-bench-rerank-"))
    os.environ["CAPR_CACHE"] = str(tmp / "cache")
    texts = candidates(a.n, Path(a.data_dir))
    rows = []
    bi_dir = Path(a.bi) if a.bi else untrained("bi", tmp)
    poly_dir = Path(a.poly) if a.poly else untrained("poly", tmp)
    cross_dir = Path(a.cross) if a.cross else untrained("cross", tmp)

    bi = BiReranker(bi_dir)
    cold = timed(lambda: bi.score(QUERY, texts))  # encodes and caches every passage
    warm = timed(lambda: bi.score(QUERY, texts), repeat=3)  # passage vectors from the cache, as in an index
    rows += [("bi", "passages encoded now", cold), ("bi", "passage vectors cached (index)", warm)]

    poly = PolyReranker(poly_dir)
    cold = timed(lambda: poly.score(QUERY, texts))
    warm = timed(lambda: poly.score(QUERY, texts), repeat=3)
    rows += [("poly", "passages encoded now", cold), ("poly", "passage codes cached (index)", warm)]

    for backend in ("torch", "onnx-int8"):
        cross = CrossReranker(cross_dir, backend=backend)
        cross.score(QUERY, texts[:8])  # warm-up (and the one-off ONNX export)
        rows.append((f"cross ({backend})", f"{a.n} (query, passage) pairs, max length {cross.max_length}",
                     timed(lambda: cross.score(QUERY, texts))))

    cpu = platform.processor() or platform.machine()
    print(f"\nRanking {a.n} candidates for one query · {os.cpu_count()} CPU threads ({cpu}) · torch {torch.__version__}"
          f" · {'GPU ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}\n")
    print(f"| model | setting | seconds | ms / candidate |")
    print(f"|---|---|---|---|")
    for model, setting, secs in rows:
        print(f"| {model} | {setting} | {secs:.3f} | {1000 * secs / a.n:.3f} |")
    torch_s = next(s for m, _, s in rows if m == "cross (torch)")
    int8_s = next(s for m, _, s in rows if m == "cross (onnx-int8)")
    print(f"\ncross-encoder ONNX int8 speed-up: {torch_s / int8_s:.2f}x")


if __name__ == "__main__":
    main()
