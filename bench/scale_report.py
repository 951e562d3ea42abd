"""bench.scale's printed table (Markdown), from its results."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common import machine_info

KINDS = ("free text", "entity+aspect", "free text, one patient", "entity+aspect, one patient")


def _mb(b: float) -> str:
    return f"{b / 2**30:.2f} GB" if b >= 2**30 else f"{b / 2**20:,.0f} MB"


def _proc(r: dict[str, Any] | None) -> str:
    if not r:
        return "—"
    if r.get("killed_over_mb"):
        return f"stopped at {r['peak_rss_mb']:,.0f} MB of memory after {r['wall_s']:.0f} s (limit {r['killed_over_mb']:,.0f} MB)"
    if r.get("timed_out"):
        return f"timed out after {r['wall_s']:.0f} s"
    if r.get("rc"):
        return f"failed (exit {r['rc']}): {(r.get('stderr_tail') or '').strip().splitlines()[-1:]}"
    return f"{r['wall_s']:.1f} s, peak RSS {r['peak_rss_mb']:,.0f} MB"


def _lat(r: dict[str, Any] | None) -> str:
    if not r or not r.get("queries_timed"):
        return "—" if not r else f"no answers ({r.get('first_error')})"
    return f"{r['p50_ms']:.1f} / {r['p95_ms']:.1f} ms (n={r['queries_timed']})"


def _commit(src: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(src), "log", "-1", "--format=%h %cd", "--date=short"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "."], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return out + (" + uncommitted changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def lexical_rows(res: dict[str, Any]) -> list[str]:
    rows = ["| | capr | bm25s (same passages) |", "|---|---|---|"]
    b, s = res.get("build"), res.get("bm25s") or {}
    skipped = s.get("skipped")
    text = res["corpus"]["text_bytes"]
    if b:
        rate = f"{b['passages_per_s']:,} passages/s, {b['notes_per_s']:,} notes/s" if b.get("passages_per_s") else ""
        bm = (f"skipped: {skipped}" if skipped else
              f"{s['build_s']:.1f} s, {s['passages_per_s']:,} passages/s (reading the notes: {s['read_s']:.1f} s more)"
              if s.get("build_s") else "—")
        rows.append(f"| build (`capr index --lexical-only` / tokenize + index) | {b['wall_s']:.1f} s, {rate} | {bm} |")
        bm_mem = f"{s['peak_rss_mb']:,} MB over its texts in memory ({s['peak_rss_abs_mb']:,} MB in all)" if s.get("build_s") else "—"
        rows.append(f"| build peak RSS | {b['peak_rss_mb']:,.0f} MB | {bm_mem} |")
    for key, label in (("size_after_build", "index on disk (× the text)"),
                       ("size_after_compact", "index on disk after add, delete, compact")):
        z = res.get(key)
        if z:
            bm = f"{s['index_mb']:,.0f} MB ({s['index_mb'] * 2**20 / text:.2f}×; no texts)" if key == "size_after_build" and s.get("index_mb") else "—"
            rows.append(f"| {label} | {_mb(z['index_bytes'])} ({z['ratio_to_text']:.2f}× of {_mb(text)}) | {bm} |")
    for key, label in (("add", "`capr add` of a batch of new notes"), ("delete", "`capr delete` of a batch of notes"),
                       ("compact", "`capr compact`")):
        if res.get(key):
            n = f" ({res[key]['notes']:,} notes)" if res[key].get("notes") else ""
            rows.append(f"| {label}{n} | {_proc(res[key])} | — |")
    for kind in KINDS:
        c = (res.get("cli") or {}).get(kind)
        if c:
            cell = (f"{c['median_s']:.2f} s median (max {c['max_s']:.2f} s), peak RSS {c['peak_rss_mb']:,.0f} MB"
                    if "median_s" in c else f"failed: {c.get('error')}")
            rows.append(f"| cold `capr search`, {kind} ({c['runs']} processes) | {cell} | — |")
    srv = res.get("serve") or {}
    for kind in KINDS:
        if kind in srv or kind in s.get("retrieve", {}):
            bm = (f"`retrieve()` {_lat(s['retrieve'][kind])}; scoring + top 10 alone {_lat(s['scores'][kind])}"
                  if kind in s.get("retrieve", {}) else "—")
            rows.append(f"| warm p50 / p95, {kind} | {_lat(srv.get(kind))} | {bm} |")
    if srv:
        rows.append(f"| `capr serve`: ready, RSS | {srv.get('ready_s', '?')} s, {srv.get('rss_ready_mb', '?')} MB; "
                    f"after the queries {srv.get('rss_after_mb', '?')} MB | RSS after its queries "
                    f"{s.get('rss_after_queries_mb', '—')} MB |")
    return rows


def hybrid_rows(h: dict[str, Any], text: int) -> list[str]:
    b = h.get("build", {})
    rows = ["", "| hybrid, static vectors (model2vec from MiniLM) | |", "|---|---|",
            f"| `capr index --encoder-backend static` | {_proc(b)}"
            + (f", {b['passages_per_s']:,} passages/s |" if b.get("passages_per_s") else " |")]
    if "index_bytes" in h:
        lex = h.get("lexical_index_bytes")
        extra = f"; the lexical-only index {_mb(lex)}, so vectors + graphs {_mb(h['index_bytes'] - lex)}" if lex else ""
        rows.append(f"| index on disk | {_mb(h['index_bytes'])} ({h['index_bytes'] / text:.2f}× the text){extra} |")
    if "recall_at_10" in h:
        rows += [f"| recall@10 of capr's ANN vs exact ({h['ann_search']['queries_timed']} free-text queries, "
                 f"{h['passages']:,} passages, {h['dim']}-d) | {h['recall_at_10']:.3f} (lowest query {h['recall_at_10_min']:.1f})"
                 + (f"; {h['recall_at_10_ties']:.3f} counting a passage tied with the 10th best"
                    if "recall_at_10_ties" in h else "") + " |",
                 f"| ANN / exact search alone, p50 | {h['ann_search']['p50_ms']:.1f} / {h['exact_search']['p50_ms']:.1f} ms |"]
        rows += [f"| `search(..., retriever={r!r})` p50 / p95 | {_lat(h[r])} |" for r in ("dense", "hybrid", "bm25")]
        rows.append(f"| RSS: loaded, after the queries | {h['rss_loaded_mb']:,} MB, {h['rss_after_queries_mb']:,} MB |")
    return rows


def milvus_rows(m: dict[str, Any]) -> list[str]:
    if "encode" not in m:
        return ["", f"Milvus step: {_proc(m.get('process'))}"]
    e, i = m["encode"], m["ingest"]
    n = e["passages"]
    rows = ["", "| past one machine: static vectors | capr embedded (exact) | Milvus 2.3.5 standalone (FLAT) |",
            "|---|---|---|",
            f"| encoding {n:,} passages | in process: {e['local_s']:.1f} s ({n / e['local_s']:,.0f}/s) | "
            f"Ray, {e['ray_actors']} actors: {e['ray_s']:.1f} s ({n / e['ray_s']:,.0f}/s) + start {e['ray_start_s']:.1f} s; "
            f"max |Δ| vs in process {e['max_abs_diff_ray_vs_local']:.1g} |",
            f"| ingest (vectors given) | {i['embedded_ingest_s']:.1f} s ({n / i['embedded_ingest_s']:,.0f} passages/s) | "
            f"{i['milvus_ingest_s']:.1f} s ({n / i['milvus_ingest_s']:,.0f} passages/s); server start {i['milvus_start_s']:.1f} s |",
            f"| memory after the queries | this process (embedded index + both clients) {m.get('rss_after_queries_mb', '?')} MB | "
            f"server {m.get('milvus_rss_after_queries_mb', '?')} MB (after ingest {i.get('milvus_rss_mb', '?')} MB) |"]
    for kind, r in m["queries"].items():
        for part in ("engine", "pipeline"):
            a = r[f"{part}_agreement"]
            rows.append(f"| dense {part}, {kind}: p50 / p95 | {_lat(r[f'embedded_{part}'])} | {_lat(r[f'milvus_{part}'])}; "
                        f"same top 10 {a['same_top10']:.0%} (as a set {a['same_top10_set']:.0%}, overlap {a['mean_overlap']:.3f}) |")
    if m.get("queries_without_passages"):
        rows.append(f"| queries left out: their patient has no note | {m['queries_without_passages']} | |")
    return rows


def report(res: dict[str, Any], args: argparse.Namespace, seconds: float) -> list[str]:
    c = res["corpus"]
    m = machine_info()
    passages = (res.get("build") or {}).get("counts", {}).get("passages")
    head = [f"bench.scale: {c['notes']:,} notes, {passages or c['estimated_passages']:,} passages"
            f"{'' if passages else ' (estimated)'}, {_mb(c['text_bytes'])} of text, {c['patients']:,} patients "
            f"({Path(c['path']).name}); capr from {args.src} ({_commit(args.src)}); "
            f"{m['cpu']}, {m['logical_cores']} cores, {m['memory_gb']} GB, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {seconds / 60:.1f} min in all", ""]
    rows = lexical_rows(res) if ("build" in res or "bm25s" in res or "cli" in res or "serve" in res) else []
    if res.get("hybrid"):
        rows += hybrid_rows(res["hybrid"], c["text_bytes"])
    if res.get("milvus"):
        rows += milvus_rows(res["milvus"])
    busy = res.get("other_cores") or {}
    tail = ["", "Cores kept busy by other processes during each step (0 = the machine was ours): "
            + ", ".join(f"{k} {v:.2f}" for k, v in busy.items())]
    return head + rows + tail
