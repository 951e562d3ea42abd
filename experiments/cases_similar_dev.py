"""CodiEsp dev, "patients like this one" (issue 34): each of the 250 coded dev cases is a query over a case index of
CodiEsp train + background and E3C (`capr case-index --source e3c --source codiesp`, which holds dev out). The
cases that count are the 500 coded train cases; metrics in capr.cases.similar_eval (category precision@10 of the
similar cases, MAP and category MAP of the query's diagnoses ranked by similar-case voting).

Runs, side by side:
  bm25           CaseFinder's BM25 over the index (idf of the whole case index)
  minilm         zero-shot all-MiniLM-L6-v2 cosine (case text, 256 tokens)
  hybrid         both fused by reciprocal rank, BM25 : dense = 1 : 4 (capr's default weights; ranks among coded cases)
  names-bm25     no similar cases: the ICD-10-CM names of the 1,767 train codes ranked by BM25 against the case text
  names-minilm   the same names ranked by MiniLM cosine
  --model NAME=DIR  a fine-tuned encoder: NAME (as minilm), hybrid-NAME (as hybrid) and names-NAME (as names-minilm)
Paired randomisation test (capr.eval.significance.paired_randomisation_p, 10,000 sign flips) of every run against bm25.
Queries are the whole dev case texts, unmasked: case reports usually name their final diagnosis.

    PYTHONPATH=src CAPR_CACHE=/work/cache-cases/capr-cache OMP_NUM_THREADS=1 nice -n 10 \\
      python -m experiments.cases_similar_dev --index /work/cache-cases/idx-codiesp-lex --examples 3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from capr.cases.data import CODIESP_FILE
from capr.cases.icd10 import code_name
from capr.cases.similar import RRF_K, RRF_WEIGHTS, CaseFinder
from capr.cases.similar_eval import QueryScores, rrf, score_case_ranking, score_code_ranking
from capr.corpus import Format, read_documents
from capr.eval.significance import paired_randomisation_p as paired_p
from capr.index import Index
from capr.models.encoder import Encoder, EncoderConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    ap.add_argument("--model", action="append", default=[], help="NAME=DIR of a fine-tuned encoder (repeatable)")
    ap.add_argument("--limit", type=int, default=None, help="first N dev cases only")
    ap.add_argument("--examples", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="per-query scores as JSON")
    args = ap.parse_args()
    t0 = time.time()

    cases = list(read_documents(args.data_dir / CODIESP_FILE, Format.codiesp))
    train = [d for d in cases if d.metadata["split"] == "train"]
    dev = [d for d in cases if d.metadata["split"] == "dev"][: args.limit]
    train_codes = [d.metadata["diagnoses"] for d in train]
    label_space = sorted({c for codes in train_codes for c in codes})
    names = [code_name(c) or c for c in label_space]
    index = Index.load(args.index)
    assert not any(index.has_document(d.doc_id) for d in dev), "the index holds CodiEsp dev cases"
    finder = CaseFinder(index, ("codiesp",))
    train_ids = [d.doc_id for d in train]

    def bm25_scores(text: str) -> np.ndarray:
        keys, scores = finder.document_scores(text, "bm25", set())
        by_id = {finder.doc_id(int(k)): float(s) for k, s in zip(keys, scores)}
        return np.array([by_id.get(i, 0.0) for i in train_ids])

    def dense_scores(model: str) -> tuple[np.ndarray, np.ndarray]:
        """(dev × train cosines, dev × code-name cosines)."""
        enc = Encoder(EncoderConfig(model=model, max_length=256))
        tv = enc.encode_passages([d.text for d in train])
        qv = enc.encode_passages([d.text for d in dev])
        return qv @ tv.T, qv @ enc.encode_passages(names).T

    scores: dict[str, np.ndarray] = {"bm25": np.stack([bm25_scores(d.text) for d in dev])}
    print(f"bm25 done ({time.time() - t0:.0f}s)", flush=True)
    name_scores: dict[str, np.ndarray] = {}
    scores["minilm"], name_scores["names-minilm"] = dense_scores("minilm")
    print(f"minilm done ({time.time() - t0:.0f}s)", flush=True)
    scores["hybrid"] = np.stack([rrf({"bm25": b, "dense": m}, RRF_WEIGHTS, RRF_K)
                                 for b, m in zip(scores["bm25"], scores["minilm"])])
    for spec in args.model:
        name, _, path = spec.partition("=")
        scores[name], name_scores[f"names-{name}"] = dense_scores(path)
        scores[f"hybrid-{name}"] = np.stack([rrf({"bm25": b, "dense": m}, RRF_WEIGHTS, RRF_K)
                                             for b, m in zip(scores["bm25"], scores[name])])
        print(f"{name} done ({time.time() - t0:.0f}s)", flush=True)

    results: dict[str, list[QueryScores]] = {}
    for run, mat in scores.items():
        results[run] = [score_case_ranking(d.doc_id, d.metadata["diagnoses"],
                                           [train_codes[j] for j in np.lexsort((np.arange(len(train)), -row))])
                        for d, row in zip(dev, mat)]
    # the names baselines rank codes directly
    analyze = index.analyzer
    name_terms = [analyze(n) for n in names]
    idf = index.term_idf(sorted({t for ts in name_terms for t in ts}))
    lengths = np.array([len(ts) for ts in name_terms], dtype=np.float64)
    avg = lengths.mean()

    def names_bm25(text: str) -> list[str]:
        q = set(analyze(text))
        s = np.zeros(len(names))
        for j, ts in enumerate(name_terms):
            for t in set(ts) & q:
                tf = ts.count(t)
                s[j] += float(idf.get(t, 0.0)) * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * lengths[j] / avg))
        return [label_space[j] for j in np.lexsort((np.arange(len(names)), -s))]

    results["names-bm25"] = [score_code_ranking(d.doc_id, d.metadata["diagnoses"], names_bm25(d.text)) for d in dev]
    for run, mat in name_scores.items():
        results[run] = [score_code_ranking(d.doc_id, d.metadata["diagnoses"],
                                           [label_space[j] for j in np.lexsort((np.arange(len(names)), -row))])
                        for d, row in zip(dev, mat)]
    print(f"all runs done ({time.time() - t0:.0f}s)\n", flush=True)

    base = results["bm25"]
    print(f"CodiEsp dev, {len(dev)} queries over {len(train)} coded train cases (+ background and E3C in the index)\n")
    print("| run | category P@10 | MAP (codes) | MAP (categories) | p vs bm25 (P@10 / MAP / cat-MAP) |")
    print("|---|---:|---:|---:|---|")
    for run, res in results.items():
        prec = [r.precision for r in res]
        cells = [f"{100 * np.mean(prec):.1f}" if prec[0] is not None else "–",
                 f"{100 * np.mean([r.ap for r in res]):.1f}", f"{100 * np.mean([r.category_ap for r in res]):.1f}"]
        if run == "bm25":
            ps = "–"
        else:
            p_prec = "–" if prec[0] is None else f"{paired_p(np.array(prec), np.array([b.precision for b in base])):.4f}"
            ps = " / ".join([p_prec, f"{paired_p(np.array([r.ap for r in res]), np.array([b.ap for b in base])):.4f}",
                             f"{paired_p(np.array([r.category_ap for r in res]), np.array([b.category_ap for b in base])):.4f}"])
        print(f"| {run} | {' | '.join(cells)} | {ps} |")
    pairs = [("hybrid", "minilm")] + [(run, other) for run in results if run.startswith("hybrid-")
                                      for other in ("hybrid", "minilm")]
    for run, other in pairs:
        if run in results and other in results:
            a, b = results[run], results[other]
            print(f"\n{run} vs {other}: p (P@10) {paired_p(np.array([r.precision for r in a]), np.array([r.precision for r in b])):.4f}, "
                  f"p (MAP) {paired_p(np.array([r.ap for r in a]), np.array([r.ap for r in b])):.4f}")
    if args.examples:
        print("\n## Worked examples (hybrid, what `capr cases similar` runs on an index with vectors)")
        _examples(args.examples, dev, train, scores["hybrid"], results["hybrid"], finder)
    if args.out:
        args.out.write_text(json.dumps({run: [{"qid": r.qid, "precision": r.precision, "ap": r.ap,
                                               "category_ap": r.category_ap} for r in res]
                                        for run, res in results.items()}))
    print(f"\n{time.time() - t0:.0f}s")


def _examples(n: int, dev, train, hybrid: np.ndarray, res: list[QueryScores], finder: CaseFinder) -> None:
    """The first ``n`` dev cases in file order: the query, its 3 most similar coded cases and the voted codes."""
    for d, row, r in list(zip(dev, hybrid, res))[:n]:
        gold = d.metadata["diagnoses"]
        print(f"\n### {d.doc_id}\n\nQuery (first 60 words): {' '.join(d.text.split()[:60])} …\n")
        print(f"Its codes: {', '.join(f'{c} {code_name(c)}' for c in gold[:8])}{' …' if len(gold) > 8 else ''}\n")
        print(f"Category P@10 {100 * r.precision:.0f}, AP {100 * r.ap:.1f}\n")
        for j in np.lexsort((np.arange(len(train)), -row))[:3]:
            c = train[j]
            ev = finder.evidence(d.text, c.text, 1)
            shared = sorted({x[:3] for x in c.metadata["diagnoses"]} & {x[:3] for x in gold})
            print(f"- {c.doc_id}: codes {', '.join(c.metadata['diagnoses'][:6])}; shared categories: "
                  f"{', '.join(shared) or 'none'}")
            if ev:
                print(f"  - similar because: “{ev[0].sentence[:220]}” ≈ “{ev[0].query_sentence[:160]}”")
        top = r.ranked_codes[:5]
        marked = [f"{c}{'*' if c in gold else ''} {code_name(c)}" for c in top]
        print(f"\nVoted codes (top 5): {', '.join(marked)} "
              "(* = one of the query's codes)")


if __name__ == "__main__":
    main()
