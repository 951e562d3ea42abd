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
  hybrid+names   the cases of hybrid; the codes: its votes fused with names-bm25 and names-minilm by weighted
                 reciprocal rank (--fusion, weights chosen with --tune on CodiEsp train, never on dev)
  RUN+likely     the cases of RUN (each hybrid run); the codes: what `capr cases similar` lists as likely codes
                 (capr.cases.diagnose.likely_codes: votes fused with the codes' names by BM25, the library's weights)
  capr-bm25      `capr cases similar --retriever bm25 --labelled` itself (CaseFinder.similar on the index): its
                 10 cases and its likely codes (the coder's list; the differential lists symptoms last), end to end
  --model NAME=DIR  a fine-tuned encoder: NAME (as minilm), hybrid-NAME (as hybrid), names-NAME (as names-minilm)
                 and hybrid-NAME+names (as hybrid+names, with names-NAME for names-minilm)
Paired randomisation test (capr.eval.significance.paired_randomisation_p, 10,000 sign flips) of every run against
bm25 and minilm. Queries are the whole dev case texts, unmasked: case reports usually name their final diagnosis.

--tune measures on CodiEsp TRAIN instead: a fixed fifth of the train cases (by a hash of their id) are the queries,
the other four fifths the coded cases and the label space; only untrained encoders (a --model saw every train case),
and it prints MAP for a grid of fusion weights and the best, to pass as --fusion to the dev run.

    PYTHONPATH=src CAPR_CACHE=/work/cache-cases/capr-cache OMP_NUM_THREADS=1 nice -n 10 \\
      python -m experiments.cases_similar_dev --index /work/cache-cases/idx-codiesp-lex --tune
    PYTHONPATH=src CAPR_CACHE=/work/cache-cases/capr-cache OMP_NUM_THREADS=1 nice -n 10 \\
      python -m experiments.cases_similar_dev --index /work/cache-cases/idx-codiesp-lex --examples 3 \\
        --fusion names-bm25=A,names-dense=B --model trained=DIR
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from capr.cases.data import CODIESP_FILE
from capr.cases.diagnose import NameMatcher
from capr.cases.icd10 import code_name
from capr.cases.similar import RRF_K, RRF_WEIGHTS, CaseFinder
from capr.cases.similar_eval import QueryScores, fuse_rankings, rrf, score_case_ranking, score_code_ranking
from capr.corpus import Format, read_documents
from capr.eval.significance import paired_randomisation_p as paired_p
from capr.index import Index
from capr.models.encoder import Encoder, EncoderConfig
from capr.records import Document

TUNE_SALT = "codiesp-similar-tune"
TUNE_GRID = (0.0, 0.25, 0.5, 1.0, 2.0)


def tune_part(doc_id: str) -> bool:
    """The fifth of CodiEsp train that --tune uses as queries (fixed by the id's hash, not by any result)."""
    return int.from_bytes(hashlib.sha1(f"{TUNE_SALT}:{doc_id}".encode()).digest()[:8], "big") % 5 == 0


def parse_fusion(spec: str) -> dict[str, float]:
    weights = {"votes": 1.0}
    for part in filter(None, spec.split(",")):
        name, _, value = part.partition("=")
        if name not in ("votes", "names-bm25", "names-dense"):
            raise SystemExit(f"--fusion: unknown ranking {name!r} (votes, names-bm25, names-dense)")
        weights[name] = float(value)
    return weights


class Measure:
    """Every run's per-query scores for ``queries`` over the coded ``pool`` cases."""

    def __init__(self, queries: Sequence[Document], pool: Sequence[Document], index: Index, t0: float) -> None:
        self.queries, self.pool, self.index, self.t0 = list(queries), list(pool), index, t0
        self.finder = CaseFinder(index, ("codiesp",))
        self.pool_codes = [d.metadata["diagnoses"] for d in self.pool]
        self.label_space = sorted({c for codes in self.pool_codes for c in codes})
        self.names = [code_name(c) or c for c in self.label_space]
        self.case_scores: dict[str, np.ndarray] = {}
        self.name_scores: dict[str, np.ndarray] = {}
        self.results: dict[str, list[QueryScores]] = {}
        self.name_rankings: dict[str, list[list[str]]] = {}

    def say(self, what: str) -> None:
        print(f"{what} ({time.time() - self.t0:.0f}s)", flush=True)

    def bm25(self) -> None:
        ids = [d.doc_id for d in self.pool]

        def row(text: str) -> np.ndarray:
            keys, scores = self.finder.document_scores(text, "bm25", set())
            by_id = {self.finder.doc_id(int(k)): float(s) for k, s in zip(keys, scores)}
            return np.array([by_id.get(i, 0.0) for i in ids])

        self.case_scores["bm25"] = np.stack([row(d.text) for d in self.queries])
        self.name_rankings["names-bm25"] = [self._names_bm25(d.text) for d in self.queries]
        self.say("bm25 done")

    def _names_bm25(self, text: str) -> list[str]:
        """Every code of the label space by the BM25 of its name (capr.cases.diagnose.NameMatcher); codes whose
        names share no word with the case follow in label-space order."""
        if not hasattr(self, "_matcher"):
            self._matcher = NameMatcher(self.index, self.label_space)
        s = self._matcher.scores(text)
        return [self.label_space[j] for j in np.lexsort((np.arange(len(s)), -s))]

    def dense(self, name: str, model: str) -> None:
        """NAME (cases by cosine), hybrid[-NAME] (fused with BM25) and names-NAME."""
        enc = Encoder(EncoderConfig(model=model, max_length=256))
        pv = enc.encode_passages([d.text for d in self.pool])
        qv = enc.encode_passages([d.text for d in self.queries])
        self.case_scores[name] = qv @ pv.T
        hybrid = "hybrid" if name == "minilm" else f"hybrid-{name}"
        self.case_scores[hybrid] = np.stack([rrf({"bm25": b, "dense": m}, RRF_WEIGHTS, RRF_K)
                                             for b, m in zip(self.case_scores["bm25"], self.case_scores[name])])
        names = qv @ enc.encode_passages(self.names).T
        self.name_rankings[f"names-{name}"] = [[self.label_space[j] for j in np.lexsort((np.arange(len(r)), -r))]
                                              for r in names]
        self.say(f"{name} done")

    def product(self) -> None:
        """`capr cases similar --retriever bm25 --labelled` end to end: its cases and its likely codes."""
        out = []
        for d in self.queries:
            found = self.finder.similar(d.text, k=10, retriever="bm25", evidence=0, labelled_only=True, diagnoses=10**6)
            case_codes = [[x.code for x in c.diagnoses] for c in found.cases]
            out.append(score_code_ranking(d.doc_id, d.metadata["diagnoses"], [x.code for x in found.codes],
                                          case_codes))
        self.results["capr-bm25"] = out
        self.say("capr cases similar (bm25) done")

    def ranked_cases(self, run: str) -> list[list[list[str]]]:
        n = len(self.pool)
        return [[self.pool_codes[j] for j in np.lexsort((np.arange(n), -row))] for row in self.case_scores[run]]

    def score(self, fusion: dict[str, float] | None) -> dict[str, list[QueryScores]]:
        res: dict[str, list[QueryScores]] = {}
        ranked = {run: self.ranked_cases(run) for run in self.case_scores}
        for run, cases in ranked.items():
            res[run] = [score_case_ranking(d.doc_id, d.metadata["diagnoses"], c) for d, c in zip(self.queries, cases)]
        for run, rankings in self.name_rankings.items():
            res[run] = [score_code_ranking(d.doc_id, d.metadata["diagnoses"], r) for d, r in zip(self.queries, rankings)]
        res.update(self.results)
        for run in [r for r in ranked if r.startswith("hybrid")]:
            res[f"{run}+likely"] = [
                score_code_ranking(d.doc_id, d.metadata["diagnoses"],
                                   [x.code for x in self.finder.likely_codes(d.text, cases, 10**6)], cases)
                for d, cases in zip(self.queries, ranked[run])]
        if fusion:
            for run in [r for r in ranked if r.startswith("hybrid")]:
                dense = "minilm" if run == "hybrid" else run[len("hybrid-"):]
                res[f"{run}+names"] = self.fused(run, dense, fusion, res[run], ranked[run])
        return res

    def fused(self, run: str, dense: str, weights: dict[str, float], votes: list[QueryScores],
              cases: list[list[list[str]]]) -> list[QueryScores]:
        out = []
        for i, d in enumerate(self.queries):
            codes = fuse_rankings({"votes": votes[i].ranked_codes, "names-bm25": self.name_rankings["names-bm25"][i],
                                   "names-dense": self.name_rankings[f"names-{dense}"][i]}, weights, RRF_K)
            out.append(score_code_ranking(d.doc_id, d.metadata["diagnoses"], codes, cases[i]))
        return out


def _mean(res: list[QueryScores], field: str) -> float:
    return 100 * float(np.mean([getattr(r, field) for r in res]))


def tune(m: Measure) -> None:
    """MAP on the train fifth for every fusion weight in the grid (votes 1); prints the best as --fusion."""
    base = m.score(None)
    votes, cases = base["hybrid"], m.ranked_cases("hybrid")
    print(f"\nCodiEsp train split: {len(m.queries)} query cases over {len(m.pool)} coded cases, "
          f"{len(m.label_space)} codes\n")
    print("| run | category P@10 | MAP (codes) | MAP (categories) |\n|---|---:|---:|---:|")
    for run, res in base.items():
        prec = "–" if res[0].precision is None else f"{_mean(res, 'precision'):.1f}"
        print(f"| {run} | {prec} | {_mean(res, 'ap'):.1f} | {_mean(res, 'category_ap'):.1f} |")
    print("\n| names-bm25 | names-dense | MAP (codes) | MAP (categories) |\n|---:|---:|---:|---:|")
    best = None
    for a, b in itertools.product(TUNE_GRID, TUNE_GRID):
        res = m.fused("hybrid", "minilm", {"votes": 1.0, "names-bm25": a, "names-dense": b}, votes, cases)
        ap, cat = _mean(res, "ap"), _mean(res, "category_ap")
        print(f"| {a} | {b} | {ap:.1f} | {cat:.1f} |")
        if best is None or ap > best[0]:
            best = (ap, cat, a, b)
    print(f"\nbest by MAP (codes): --fusion names-bm25={best[2]},names-dense={best[3]} "
          f"(MAP {best[0]:.1f}, category MAP {best[1]:.1f})")


def report(m: Measure, results: dict[str, list[QueryScores]], split: str = "dev") -> None:
    print(f"CodiEsp {split}, {len(m.queries)} queries over {len(m.pool)} coded train cases (+ background and E3C in the "
          "index)\n")
    print("| run | category P@10 | MAP (codes) | MAP (categories) | p vs bm25 (P@10 / MAP / cat-MAP) | "
          "p vs minilm (P@10 / MAP / cat-MAP) |")
    print("|---|---:|---:|---:|---|---|")

    def ps(res: list[QueryScores], other: str) -> str:
        if other not in results or res is results[other]:
            return "–"
        o = results[other]
        cells = []
        for f in ("precision", "ap", "category_ap"):
            if getattr(res[0], f) is None or getattr(o[0], f) is None:
                cells.append("–")
            else:
                cells.append(f"{paired_p(np.array([getattr(r, f) for r in res]), np.array([getattr(r, f) for r in o])):.4f}")
        return " / ".join(cells)

    for run, res in results.items():
        prec = "–" if res[0].precision is None else f"{_mean(res, 'precision'):.1f}"
        print(f"| {run} | {prec} | {_mean(res, 'ap'):.1f} | {_mean(res, 'category_ap'):.1f} | {ps(res, 'bm25')} | "
              f"{ps(res, 'minilm')} |")
    # each trained run against the same run with MiniLM
    for run in [r for r in results if r.startswith("hybrid-")]:
        other = "hybrid+names" if run.endswith("+names") else "hybrid"
        if other in results:
            a, b = results[run], results[other]
            print(f"\n{run} vs {other}: p (P@10) {paired_p(np.array([r.precision for r in a]), np.array([r.precision for r in b])):.4f}, "
                  f"p (MAP) {paired_p(np.array([r.ap for r in a]), np.array([r.ap for r in b])):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    ap.add_argument("--model", action="append", default=[], help="NAME=DIR of a fine-tuned encoder (repeatable)")
    ap.add_argument("--fusion", default="", help="weights of the code rankings fused with the votes (weight 1): "
                    "names-bm25=A,names-dense=B (choose with --tune)")
    ap.add_argument("--split", default="dev", help="the coded cases that are queries (dev; a held-out test split)")
    ap.add_argument("--cases", type=Path, default=None, help="a CodiEsp-layout cases file holding that split "
                    "(default: the one in --data-dir); the coded train cases always come from --data-dir")
    ap.add_argument("--tune", action="store_true", help="measure on a split of CodiEsp train (see above)")
    ap.add_argument("--limit", type=int, default=None, help="first N dev cases only")
    ap.add_argument("--examples", type=int, default=0)
    ap.add_argument("--examples-run", default=None, help="the run whose cases the worked examples show "
                    "(default: the last hybrid-NAME+names, else hybrid)")
    ap.add_argument("--out", type=Path, default=None, help="per-query scores as JSON")
    args = ap.parse_args()
    t0 = time.time()

    cases = list(read_documents(args.data_dir / CODIESP_FILE, Format.codiesp))
    train = [d for d in cases if d.metadata["split"] == "train"]
    held = list(read_documents(args.cases, Format.codiesp)) if args.cases else cases
    dev = [d for d in held if d.metadata["split"] == args.split and d.metadata.get("diagnoses")]
    if not dev:
        raise SystemExit(f"no coded cases of split {args.split!r} in {args.cases or args.data_dir / CODIESP_FILE}")
    index = Index.load(args.index)
    if any(index.has_document(d.doc_id) for d in dev):
        raise SystemExit(f"the index holds query cases of split {args.split!r}: they would find themselves")
    if args.tune:
        if args.model:
            raise SystemExit("--tune takes no --model: a trained encoder has seen every CodiEsp train case")
        m = Measure([d for d in train if tune_part(d.doc_id)], [d for d in train if not tune_part(d.doc_id)], index, t0)
        m.bm25()
        m.dense("minilm", "minilm")
        tune(m)
        print(f"\n{time.time() - t0:.0f}s")
        return

    m = Measure(dev[: args.limit], train, index, t0)
    m.product()
    m.bm25()
    m.dense("minilm", "minilm")
    for spec in args.model:
        name, _, path = spec.partition("=")
        m.dense(name, path)
    results = m.score(parse_fusion(args.fusion) if args.fusion else None)
    m.say("all runs done")
    report(m, results, args.split)
    if args.examples:
        run = args.examples_run or next((r for r in reversed(list(results)) if r.startswith("hybrid-") and
                                         r.endswith("+names")), "hybrid")
        cases_run = run[: -len("+names")] if run.endswith("+names") else run
        print(f"\n## Worked examples ({run}: the cases of {cases_run}, the codes as that run ranks them)")
        _examples(args.examples, m, m.case_scores[cases_run], results[run])
    if args.out:
        args.out.write_text(json.dumps({run: [{"qid": r.qid, "precision": r.precision, "ap": r.ap,
                                               "category_ap": r.category_ap} for r in res]
                                        for run, res in results.items()}))
    print(f"\n{time.time() - t0:.0f}s")


def _examples(n: int, m: Measure, scores: np.ndarray, res: list[QueryScores]) -> None:
    """The first ``n`` dev cases in file order: the query, its 3 most similar coded cases and the ranked codes."""
    for d, row, r in list(zip(m.queries, scores, res))[:n]:
        gold = d.metadata["diagnoses"]
        print(f"\n### {d.doc_id}\n\nQuery (first 60 words): {' '.join(d.text.split()[:60])} …\n")
        print(f"Its codes: {', '.join(f'{c} {code_name(c)}' for c in gold[:8])}{' …' if len(gold) > 8 else ''}\n")
        print(f"Category P@10 {100 * r.precision:.0f}, AP {100 * r.ap:.1f}\n")
        for j in np.lexsort((np.arange(len(m.pool)), -row))[:3]:
            c = m.pool[j]
            ev = m.finder.evidence(d.text, c.text, 1)
            shared = sorted({x[:3] for x in c.metadata["diagnoses"]} & {x[:3] for x in gold})
            print(f"- {c.doc_id}: codes {', '.join(c.metadata['diagnoses'][:6])}; shared categories: "
                  f"{', '.join(shared) or 'none'}")
            if ev:
                print(f"  - similar because: “{ev[0].sentence[:220]}” ≈ “{ev[0].query_sentence[:160]}” "
                      f"(shared: {', '.join(ev[0].shared[:6])})")
        top = r.ranked_codes[:5]
        marked = [f"{c}{'*' if c in gold else ''} {code_name(c)}" for c in top]
        print(f"\nRanked codes (top 5): {', '.join(marked)} (* = one of the query's codes)")


if __name__ == "__main__":
    main()
