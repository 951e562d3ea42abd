#!/usr/bin/env python3
"""BM25 indexing throughput (docs/s) and query throughput (queries/s) of capr against plain
bm25s and rank_bm25, on the same passages and queries built from the real texts in ../shared/data.

    .venv/bin/python -m bench.bench_bm25                      # 200,000 passages, 500 queries
    .venv/bin/python -m bench.bench_bm25 --passages 5000 --queries 50

Each system runs in its own child process (same interpreter) so that its build time and peak
memory are not disturbed by the others. The corpus and the queries are cached under bench/out/.
See bench/README.md for what exactly is measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (DEFAULT_DATA, DEFAULT_OUT, PeakRSS, busy_cpu_seconds, capr_fingerprint, dir_mb, latency_stats,
                          log, machine_info, own_cpu_seconds, read_jsonl_gz, rss)
from bench.corpus import prepare_data

K = 10
SYSTEMS = ("capr", "bm25s", "rank_bm25")

# ---------------------------------------------------------------------------------------------
# Systems (each runs in a child process)
# ---------------------------------------------------------------------------------------------
def run_capr(passages: list[str], queries: list[str], tmp_root: str | None, keep: bool) -> dict[str, Any]:
    from capr.corpus.segment import SegmenterConfig
    from capr.index import AnalyzerConfig, Index, IndexWriter
    from capr.search import search
    from capr.records import Document, Section

    tmp = Path(tempfile.mkdtemp(prefix="capr-bench-", dir=tmp_root))
    root = tmp / "index"
    res: dict[str, Any] = {}
    try:
        log(f"[capr] building index of {len(passages):,} passages in {root} ...")
        with PeakRSS() as mem:
            t0 = time.perf_counter()
            with IndexWriter(root, segmenter=SegmenterConfig(max_tokens=0, include_title=False),
                             analyzer=AnalyzerConfig()) as w:
                for i, t in enumerate(passages):
                    w.add(Document(doc_id=f"p{i}", title="", text=t,
                                   sections=[Section(heading="", aspect="", start=0, end=len(t))]))
            build = time.perf_counter() - t0
        n_indexed = w.n_passages
        skipped = len(passages) - n_indexed
        del w
        gc.collect()
        res.update(build_s=build, peak_rss_mb=mem.delta_mb, indexed=n_indexed, skipped_passages=skipped,
                   index_mb=dir_mb(root))
        log(f"[capr] build {build:.1f} s ({n_indexed / build:,.0f} docs/s), peak RSS +{mem.delta_mb:,.0f} MB")

        t0 = time.perf_counter()
        idx = Index.load(root)
        res["load_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        search(idx, queries[0], k=K, aspect_boost=0.0, highlights=False)  # warm-up: builds BM25 statistics lazily
        res["first_query_ms"] = (time.perf_counter() - t0) * 1e3

        lat: list[float] = []
        top: list[list[tuple[int, float]]] = []
        for q in queries:
            t0 = time.perf_counter()
            hits = search(idx, q, k=K, aspect_boost=0.0, highlights=False)
            lat.append(time.perf_counter() - t0)
            top.append([(int(h.pid.split("#", 1)[0][1:]), h.score) for h in hits])
        res.update(latency_stats(lat))
        res["rss_after_queries_mb"] = rss() / 2**20
        res["top"] = top
        log(f"[capr] load {res['load_s']:.2f} s, {res['qps']:.1f} queries/s, p50 {res['p50_ms']:.1f} ms")
        idx.close()
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log(f"[capr] index kept at {root}")
    return res


BM25S_TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s' default: words of 2+ characters
CAPR_TOKEN_PATTERN = r"(?u)\w+"  # capr's analyzer keeps 1-character words ("2", "s", "x")


def _bm25s_tok(texts: list[str], stemmer, return_ids: bool = True, token_pattern: str = BM25S_TOKEN_PATTERN):
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, return_ids=return_ids, show_progress=False,
                          token_pattern=token_pattern)


def _scores_of(retriever, token_lists: list[list[str]], tops: list) -> list[list[float]]:
    """bm25s' own score of each (row, score) pair in ``tops``, per query."""
    return [[float(x) for x in (retriever.get_scores(toks)[[r for r, _ in top]] if toks and top else [])]
            for toks, top in zip(token_lists, tops)]


def run_bm25s(passages: list[str], queries: list[str], tmp_root: str | None, capr_top: list | None,
              pattern_check: bool = True) -> dict[str, Any]:
    import bm25s
    import numpy as np
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    res: dict[str, Any] = {}
    log(f"[bm25s] tokenizing + indexing {len(passages):,} passages ...")
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        corpus_tokens = _bm25s_tok(passages, stemmer)
        retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        retriever.index(corpus_tokens, show_progress=False)
        build = time.perf_counter() - t0
    res.update(build_s=build, peak_rss_mb=mem.delta_mb, indexed=len(passages))
    log(f"[bm25s] build {build:.1f} s ({len(passages) / build:,.0f} docs/s), peak RSS +{mem.delta_mb:,.0f} MB")
    del corpus_tokens

    tmp = Path(tempfile.mkdtemp(prefix="bm25s-bench-", dir=tmp_root))
    try:
        t0 = time.perf_counter()
        retriever.save(str(tmp / "index"))
        res["save_s"] = time.perf_counter() - t0
        res["index_mb"] = dir_mb(tmp / "index")
        del retriever
        gc.collect()
        t0 = time.perf_counter()
        retriever = bm25s.BM25.load(str(tmp / "index"), show_progress=False)
        res["load_s"] = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # batched: all queries tokenized and retrieved in one call, single thread
    t0 = time.perf_counter()
    qtok = _bm25s_tok(queries, stemmer)
    docs, scores = retriever.retrieve(qtok, k=K, n_threads=1, show_progress=False)
    batch_s = time.perf_counter() - t0
    res["batched"] = {"queries_timed": len(queries), "query_seconds": batch_s, "qps": len(queries) / batch_s}

    # one query at a time (n_threads=0: plain sequential map, no thread pool per call)
    def one(q: str):
        return retriever.retrieve(_bm25s_tok([q], stemmer), k=K, n_threads=0, show_progress=False)

    t0 = time.perf_counter()
    one(queries[0])
    res["first_query_ms"] = (time.perf_counter() - t0) * 1e3
    lat: list[float] = []
    single_docs = []
    for q in queries:
        t0 = time.perf_counter()
        d, _ = one(q)
        lat.append(time.perf_counter() - t0)
        single_docs.append(d[0])
    res["single"] = latency_stats(lat)
    res["single_equals_batched"] = float(np.mean([set(a.tolist()) == set(b.tolist()) for a, b in zip(single_docs, docs)]))
    res["rss_after_queries_mb"] = rss() / 2**20
    res["top"] = [[(int(d), float(s)) for d, s in zip(dr, sr) if s > 0] for dr, sr in zip(docs, scores)]
    log(f"[bm25s] load {res['load_s']:.2f} s, batched {res['batched']['qps']:.1f} queries/s, "
        f"one at a time {res['single']['qps']:.1f} queries/s")

    if capr_top is not None:  # bm25s' own score of each passage capr returned (tie-aware agreement)
        res["bm25s_score_of_capr_top"] = _scores_of(retriever, _bm25s_tok(queries, stemmer, return_ids=False), capr_top)
        if pattern_check:
            # Not timed: the same bm25s, tokenizing like capr's analyzer (1-character words kept).
            # If capr's BM25 equals bm25s' lucene method, this agrees with capr up to ties.
            log("[bm25s] agreement check: re-indexing with capr's token pattern (not timed) ...")
            del retriever
            gc.collect()
            t0 = time.perf_counter()
            r2 = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
            r2.index(_bm25s_tok(passages, stemmer, token_pattern=CAPR_TOKEN_PATTERN), show_progress=False)
            d2, s2 = r2.retrieve(_bm25s_tok(queries, stemmer, token_pattern=CAPR_TOKEN_PATTERN), k=K,
                                 n_threads=1, show_progress=False)
            res["capr_pattern"] = {
                "seconds": time.perf_counter() - t0,
                "top": [[(int(d), float(s)) for d, s in zip(dr, sr) if s > 0] for dr, sr in zip(d2, s2)],
                "score_of_capr_top": _scores_of(
                    r2, _bm25s_tok(queries, stemmer, return_ids=False, token_pattern=CAPR_TOKEN_PATTERN), capr_top),
            }
    return res


def run_rank_bm25(passages: list[str], queries: list[str], n_queries: int) -> dict[str, Any]:
    import numpy as np
    import Stemmer
    from rank_bm25 import BM25Okapi

    stemmer = Stemmer.Stemmer("english")
    res: dict[str, Any] = {}
    log(f"[rank_bm25] tokenizing (bm25s tokenizer, as strings) + BM25Okapi on {len(passages):,} passages ...")
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        tokens = _bm25s_tok(passages, stemmer, return_ids=False)
        bm25 = BM25Okapi(tokens)
        build = time.perf_counter() - t0
    del tokens
    res.update(build_s=build, peak_rss_mb=mem.delta_mb, indexed=len(passages))
    log(f"[rank_bm25] build {build:.1f} s ({len(passages) / build:,.0f} docs/s), peak RSS +{mem.delta_mb:,.0f} MB")

    lat: list[float] = []
    top = []
    timed = queries[:n_queries]
    log(f"[rank_bm25] timing the first {len(timed)} queries ...")
    for q in timed:
        t0 = time.perf_counter()
        toks = _bm25s_tok([q], stemmer, return_ids=False)[0]
        scores = bm25.get_scores(toks)
        part = np.argpartition(-scores, K - 1)[:K]
        part = part[np.argsort(-scores[part], kind="stable")]
        lat.append(time.perf_counter() - t0)
        top.append([(int(d), float(scores[d])) for d in part if scores[d] > 0])
    res.update(latency_stats(lat))
    res["rss_after_queries_mb"] = rss() / 2**20
    res["top"] = top
    log(f"[rank_bm25] {res['qps']:.2f} queries/s, p50 {res['p50_ms']:.0f} ms")
    return res


def worker(args: argparse.Namespace) -> None:
    passages = read_jsonl_gz(Path(args.worker_corpus))
    queries = [q["text"] for q in read_jsonl_gz(Path(args.worker_queries))]
    gc.collect()
    if args.worker == "capr":
        res = run_capr(passages, queries, args.tmp_dir, args.keep_index)
    elif args.worker == "bm25s":
        capr_top = None
        if args.worker_capr_result and Path(args.worker_capr_result).is_file():
            capr_top = json.loads(Path(args.worker_capr_result).read_text())["top"]
        res = run_bm25s(passages, queries, args.tmp_dir, capr_top, not args.no_agreement_check)
    else:
        res = run_rank_bm25(passages, queries, args.rank_bm25_queries)
    Path(args.worker_result).write_text(json.dumps(res))


# ---------------------------------------------------------------------------------------------
# Agreement, machine info, report
# ---------------------------------------------------------------------------------------------
def agreement(a_top: list, b_top: list, b_scores_of_a: list | None = None) -> dict[str, float]:
    """a, b: per query lists of (row, score) with positive scores, best first."""
    n = min(len(a_top), len(b_top))
    overlap, same, any_, top1, tie = [], 0, 0, 0, []
    for i in range(n):
        a = [r for r, _ in a_top[i]]
        b = [r for r, _ in b_top[i]]
        sa, sb = set(a), set(b)
        denom = max(len(sa), len(sb))
        overlap.append(len(sa & sb) / denom if denom else 1.0)
        same += sa == sb
        any_ += bool(sa & sb) or not (sa or sb)
        top1 += (a[:1] == b[:1])
        if b_scores_of_a is not None:
            cutoff = b_top[i][-1][1] if b_top[i] else 0.0
            bs = b_scores_of_a[i]
            # a passage of a's top-10 counts as agreeing when b scores it at least as high as b's own 10th
            ok = sum(1 for s in bs if s > 0 and s >= cutoff * (1 - 1e-4))
            tie.append(ok / len(bs) if bs else (1.0 if not b else 0.0))
    out = {"queries": n, "mean_overlap_at_10": sum(overlap) / n if n else float("nan"),
           "identical_top10_set": same / n if n else float("nan"), "any_overlap": any_ / n if n else float("nan"),
           "top1_match": top1 / n if n else float("nan"),
           "overlap_ge_0.8": sum(o >= 0.8 for o in overlap) / n if n else float("nan")}
    if tie:
        out["tie_aware_overlap_at_10"] = sum(tie) / len(tie)
    return out


def make_table(results: dict[str, Any]) -> list[str]:
    rows = ["| system | build s | docs/s | load s | queries/s | p50 ms | p95 ms | peak RSS MB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    c = results.get("capr")
    if c:
        rows.append(f"| capr (one query at a time) | {c['build_s']:.1f} | {c['indexed'] / c['build_s']:,.0f} | "
                    f"{c['load_s']:.2f} | {c['qps']:.1f} | {c['p50_ms']:.1f} | {c['p95_ms']:.1f} | {c['peak_rss_mb']:,.0f} |")
    b = results.get("bm25s")
    if b:
        rows.append(f"| bm25s, batched queries | {b['build_s']:.1f} | {b['indexed'] / b['build_s']:,.0f} | "
                    f"{b['load_s']:.2f} | {b['batched']['qps']:.1f} | — | — | {b['peak_rss_mb']:,.0f} |")
        s = b["single"]
        rows.append(f"| bm25s, one query at a time (same index) | — | — | — | {s['qps']:.1f} | "
                    f"{s['p50_ms']:.1f} | {s['p95_ms']:.1f} | — |")
    r = results.get("rank_bm25")
    if r:
        rows.append(f"| rank_bm25 BM25Okapi (first {r['queries_timed']} queries only) | {r['build_s']:.1f} | "
                    f"{r['indexed'] / r['build_s']:,.0f} | n/a | {r['qps']:.2f} | {r['p50_ms']:.0f} | "
                    f"{r['p95_ms']:.0f} | {r['peak_rss_mb']:,.0f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--passages", type=int, default=200_000, help="number of passages in the corpus")
    ap.add_argument("--queries", type=int, default=500, help="number of queries (half MedQuAD questions, half entity+aspect)")
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA), help="shared data folder (holds medquad/, mtsamples/)")
    ap.add_argument("--out-dir", default=str(DEFAULT_OUT), help="caches and results (gitignored)")
    ap.add_argument("--tmp-dir", default=None, help="where the indexes are written (default: system temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-rank-bm25", action="store_true", help="leave rank_bm25 out (its queries are slow: about 0.3 s each at 200k passages)")
    ap.add_argument("--rank-bm25-queries", type=int, default=50, help="rank_bm25 is timed on this many queries only")
    ap.add_argument("--rebuild-corpus", action="store_true", help="ignore the cached corpus and queries")
    ap.add_argument("--no-agreement-check", action="store_true",
                    help="skip the untimed extra bm25s index built with capr's token pattern")
    ap.add_argument("--keep-index", action="store_true", help="keep capr's index directory (path is printed)")
    # internal: run one system in this (child) process
    ap.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--worker-corpus", help=argparse.SUPPRESS)
    ap.add_argument("--worker-queries", help=argparse.SUPPRESS)
    ap.add_argument("--worker-result", help=argparse.SUPPRESS)
    ap.add_argument("--worker-capr-result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        worker(args)
        return 0
    if args.passages < K or args.queries < 1:
        ap.error(f"need --passages >= {K} and --queries >= 1")

    t_start = time.perf_counter()
    load_before = os.getloadavg()
    busy0, own0 = busy_cpu_seconds(), own_cpu_seconds()
    machine = machine_info()
    ppath, qpath, corpus_info = prepare_data(args)
    out = Path(args.out_dir)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)

    systems = [s for s in SYSTEMS if not (s == "rank_bm25" and args.skip_rank_bm25)]
    results: dict[str, Any] = {}
    for system in systems:
        rpath = work / f"{system}_{args.passages}.json"
        rpath.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "bench.bench_bm25", "--worker", system,
               "--worker-corpus", str(ppath), "--worker-queries", str(qpath), "--worker-result", str(rpath),
               "--rank-bm25-queries", str(args.rank_bm25_queries)]
        if args.tmp_dir:
            cmd += ["--tmp-dir", args.tmp_dir]
        if args.keep_index:
            cmd.append("--keep-index")
        if args.no_agreement_check:
            cmd.append("--no-agreement-check")
        if system == "bm25s" and "capr" in results:
            cmd += ["--worker-capr-result", str(work / f"capr_{args.passages}.json")]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd)
        if proc.returncode != 0 or not rpath.is_file():
            log(f"bench_bm25: {system} failed (exit status {proc.returncode}); leaving it out")
            continue
        results[system] = json.loads(rpath.read_text())
        results[system]["process_wall_s"] = time.perf_counter() - t0

    agree: dict[str, Any] = {}
    if "capr" in results and "bm25s" in results:
        agree["capr_vs_bm25s"] = agreement(results["capr"]["top"], results["bm25s"]["top"],
                                           results["bm25s"].get("bm25s_score_of_capr_top"))
        cp = results["bm25s"].get("capr_pattern")
        if cp:
            agree["capr_vs_bm25s_capr_tokens"] = agreement(results["capr"]["top"], cp["top"], cp["score_of_capr_top"])
    if "rank_bm25" in results and "bm25s" in results:
        agree["rank_bm25_vs_bm25s"] = agreement(results["rank_bm25"]["top"], results["bm25s"]["top"])

    load_after = os.getloadavg()
    wall = time.perf_counter() - t_start
    # CPU used by other processes while the benchmark ran (the load average would count the benchmark itself)
    other_cpu = max(0.0, (busy_cpu_seconds() - busy0) - (own_cpu_seconds() - own0))
    other_cores = other_cpu / wall if wall else 0.0
    n_rank = min(args.rank_bm25_queries, corpus_info["queries"])

    lines = [f"BM25 benchmark: {corpus_info['passages']:,} passages "
             f"(mean {corpus_info['mean_passage_words']} words), {corpus_info['queries']} queries "
             f"({corpus_info['queries_by_kind']['question']} MedQuAD questions, "
             f"{corpus_info['queries_by_kind']['entity+aspect']} entity+aspect), top-{K}", ""]
    lines += make_table(results)
    lines.append("")
    v = machine["versions"]
    lines.append(f"Machine: {machine['cpu']}, {machine['logical_cores']} logical cores "
                 f"({machine['physical_cores']} physical), {machine['memory_gb']} GB RAM; Python {machine['python']}; "
                 + ", ".join(f"{k} {val}" for k, val in v.items() if val)
                 + f" (capr sources {machine['capr_source_sha1']}); "
                 f"other processes used {other_cores:.2f} cores on average during the run "
                 f"(load average {load_before[0]:.2f} at start, {load_after[0]:.2f} at end)")
    notes = ["build = capr: IndexWriter.add for every passage + commit (sentence splitting, analysis, JSONL stores "
             "and arrays written to disk with fsync, commit's own reload); bm25s: tokenize + index in memory"]
    if "bm25s" in results:
        notes[-1] += f" (save to disk {results['bm25s']['save_s']:.2f} s, not included)"
    if "rank_bm25" in results:
        notes[-1] += "; rank_bm25: bm25s tokenizer (strings) + BM25Okapi"
    notes.append("queries/s and p50/p95 include query tokenization; capr returns passage records (text), bm25s and "
                 "rank_bm25 return row ids; one warm-up query is excluded")
    for s in ("capr", "bm25s"):
        if s in results:
            notes[-1] += f"; {s} first (cold) query {results[s]['first_query_ms']:.1f} ms"
    notes.append("peak RSS MB = peak resident memory during the build minus RSS before it (each system in its own process)")
    if "capr" in results:
        c = results["capr"]
        notes.append(f"index on disk: capr {c['index_mb']:,.0f} MB (passage text and offsets included)"
                     + (f", bm25s {results['bm25s']['index_mb']:,.0f} MB" if "bm25s" in results else ""))
        if c.get("skipped_passages"):
            notes.append(f"capr indexed {c['indexed']:,} passages; {c['skipped_passages']} had no sentence and were skipped")
    if "capr_vs_bm25s" in agree:
        a = agree["capr_vs_bm25s"]
        line = (f"agreement capr vs bm25s top-{K} over {a['queries']} queries: mean overlap {a['mean_overlap_at_10']:.3f}, "
                f"identical set {a['identical_top10_set']:.1%}, >=8/10 shared {a['overlap_ge_0.8']:.1%}, "
                f"any shared {a['any_overlap']:.1%}, same top-1 {a['top1_match']:.1%}")
        if "tie_aware_overlap_at_10" in a:
            line += f"; tie-aware overlap {a['tie_aware_overlap_at_10']:.3f}"
        notes.append(line + " (tie-aware: a capr passage counts if bm25s scores it at least as high as bm25s' own "
                     "10th; differences: capr keeps 1-character words such as '2', 's', 'x', bm25s drops them)")
    if "capr_vs_bm25s_capr_tokens" in agree:
        a = agree["capr_vs_bm25s_capr_tokens"]
        notes.append(f"agreement check, bm25s re-indexed with capr's token pattern \\w+ (untimed): mean overlap "
                     f"{a['mean_overlap_at_10']:.3f}, identical set {a['identical_top10_set']:.1%}, tie-aware overlap "
                     f"{a.get('tie_aware_overlap_at_10', float('nan')):.3f} (remaining differences: equal scores at the cut-off)")
    if "rank_bm25_vs_bm25s" in agree:
        a = agree["rank_bm25_vs_bm25s"]
        notes.append(f"agreement rank_bm25 (Okapi idf) vs bm25s (Lucene idf) over {a['queries']} queries: "
                     f"mean overlap {a['mean_overlap_at_10']:.3f}")
    if capr_fingerprint() != machine["capr_source_sha1"]:
        notes.append("WARNING: capr's source files changed while the benchmark ran; rerun for numbers that "
                     "belong to one version of the code")
    if other_cores > 0.2:
        notes.append(f"WARNING: other processes kept {other_cores:.2f} of {os.cpu_count()} cores busy during the run; "
                     "timings may be noisy")
    lines += [""] + [f"- {n}" for n in notes]
    text = "\n".join(lines)
    print(text, flush=True)
    log(f"\ntotal wall time {wall:.0f} s")

    for r in results.values():
        r.pop("top", None)
        r.pop("bm25s_score_of_capr_top", None)
        if isinstance(r.get("capr_pattern"), dict):
            r["capr_pattern"] = {"seconds": r["capr_pattern"]["seconds"]}
    report = {"config": {"passages": args.passages, "queries": args.queries, "seed": args.seed, "k": K,
                         "rank_bm25_queries": n_rank if "rank_bm25" in results else None,
                         "data_dir": str(Path(args.data_dir).resolve())},
              "corpus": corpus_info, "machine": machine, "loadavg_start": load_before, "loadavg_end": load_after,
              "other_processes_cpu_s": other_cpu, "other_processes_cores": other_cores,
              "results": results, "agreement": agree, "wall_s": wall, "markdown": text,
              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    jpath = out / f"bm25_{args.passages}.json"
    jpath.write_text(json.dumps(report, indent=2))
    log(f"results written to {jpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
