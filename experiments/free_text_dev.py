#!/usr/bin/env python3
"""The default pipeline against its parts on the free-text dev sets (issue 36): NFCorpus dev (BEIR layout; its text
is the original release's, lower-cased and stop-word-free), MEDIQA 2019 validation and training set 2 (judged
answers re-ranked), the consumer dev sets without and with titles (RQE consumer questions over whole MedQuAD answers,
judged by document). Every system runs through `capr eval`'s code (capr.eval.runner, one index per set, titles as
`capr index` reads them): the default pipeline (SearchOptions(), what `capr search` does), BM25 alone and MiniLM
dense alone (each scoring every candidate), and variants of the default (SearchOptions fields). nDCG@10 and P@1 per
question; the default (or each variant) against each single retriever with the paired randomisation test of
capr.eval.significance (two-sided, 10,000 sign flips).

    CAPR_CACHE=/work/cache-ft OMP_NUM_THREADS=1 .venv/bin/python -m experiments.free_text_dev [--sets a,b] [--variants x,y]
        [--parts] [--encoders torch,static] [--model NAME=MODEL ...] [--reranker NAME=SPEC ...]

``--model NAME=MODEL`` (repeatable): each set indexed again with MODEL as the index's encoder (a trained bi-encoder
folder), and "NAME dense alone" and "NAME default" (the default pipeline on that index) added; like every other
system they are compared with BM25 alone and zero-shot MiniLM dense alone. ``--reranker NAME=SPEC``: the default
pipeline with that second stage (e.g. ``bi:minilm,bi:MODEL``, the ensemble `capr adapt` gates), on each index.

``--parts`` (issue 53): the decision table. Every set is indexed once per ``--encoders`` backend (``torch``: MiniLM;
``static``: the model2vec model capr distils from it), and on each it runs BM25 alone, dense alone, the 1 : 1 glue
(BM25 and dense fused by equal-weight reciprocal rank, no question focus, no priors, no reading: what a user glues
together in twenty lines), the default, and the default with each of its parts switched off (PARTS) or, for a
part it leaves off (the question reading), switched on (OFF_PARTS). It prints each
system per set and encoder, the pooled questions of all sets, and for each part the default minus the default
without it (nDCG@10 / P@1) per set and pooled, with the verdict of the rule: a part stays on only if it is at or
above the pipeline without it on every set, with both encoders, and gains on the pooled questions; then the
default against each rival, and the ceiling of choosing per question (ceiling_table).

``--fusions`` (issue 53, item 3): each set's index probe (capr.search.strength: MRR@10 of inverse-cloze questions
drawn from the index, by BM25's share in the fusion) and the default with its fusion fixed at each share the probe
can choose (SHARE_VARIANTS); then what each candidate rule (probe_rules) chooses per set and encoder, checked
against the issue's rule (passes), and whether the probe orders the shares and the sets as the questions do.
``--probe-only`` measures only the probes; ``--tables-from A.json,B.json`` prints the tables from ``--dump`` files
(a ``--probe-only`` dump's probes replace the runs' own).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from capr.eval.benchmarks import BenchmarkSearcher, default_scorer, run_benchmark
from capr.eval.metrics import per_query_metrics
from capr.eval.runner import EvalConfig, load_benchmark
from capr.eval.significance import paired_randomisation_p as paired_p
from capr.records import Retriever
from capr.records import qrels_as_dict
from capr.search.fusion import FusionConfig, FusionMethod
from capr.search.second_stage import load_reranker
from capr.search.strength import SHARES as PROBE_SHARES, measure_strength

from experiments.common import DEFAULT_DATA

SETS = ("nfcorpus-dev", "medicationqa-dev", "mediqa2019", "mediqa2019-train", "consumer-dev", "consumer-dev-titled",
        "consumer-dev-sections")
METRICS = ("nDCG@10", "P@1")
# default-pipeline variants: SearchOptions fields changed
VARIANTS = {
    "default": {},
    "prior off": {"aspect_boost": 0.0},
    "fusion by question": {"fusion_by_question": True},
    "fusion fixed": {"fusion_by_question": False},  # the store's fusion for every question (the default before c9f710a)
    "before": {"wording_prior": "everywhere", "question_focus": False},  # the default before issue 36
    "focus off": {"question_focus": False},
    "rrf 1:1": {"fusion": FusionConfig(FusionMethod.rrf, weights=(0.5, 0.5))},
    "rrf 1:9": {"fusion": FusionConfig(FusionMethod.rrf, weights=(0.1, 0.9))},
    "rrf 0:1": {"fusion": FusionConfig(FusionMethod.rrf, weights=(0.0, 1.0))},
    # the twenty-line glue of issue 53: equal-weight RRF of BM25 and dense, none of the default's parts
    "glue 1:1": {"fusion": FusionConfig(FusionMethod.rrf, weights=(0.5, 0.5)), "question_focus": False,
                 "aspect_boost": 0.0, "fusion_by_question": False, "reading": False},
    "reading off": {"reading": False},
    "reading on": {"reading": True},
    "share off": {"fusion_by_question": False},
    "synonyms off": {"entity_synonyms": False},
}


def share_name(share: float) -> str:
    """The variant of the default pipeline with a fixed RRF at this BM25 share ("rrf 1:4" for 0.2)."""
    from fractions import Fraction

    f = Fraction(share).limit_denominator(10)
    return f"rrf {f.numerator}:{f.denominator - f.numerator}"


# --fusions (issue 53): the default's parts on, the fusion fixed at each BM25 share the index probe can choose
# (capr.search.strength.SHARES; an explicit fusion also leaves BM25's share by question out)
SHARE_VARIANTS = {share_name(s): {"fusion": FusionConfig(FusionMethod.rrf, weights=(s, 1.0 - s))} for s in PROBE_SHARES}
VARIANTS.update({k: v for k, v in SHARE_VARIANTS.items() if k not in VARIANTS})
# the default's parts a free-text question meets, each switched off in the decision table (--parts)
PARTS = {"question focus": "focus off", "aspect prior": "prior off", "entity synonyms": "synonyms off"}
# parts the default leaves off, measured switched on: the table shows (with it) − (the default)
OFF_PARTS = {"BM25 share by question": "fusion by question", "question reading": "reading on"}
SINGLE = ("BM25 alone", "dense alone")


def probe(store: Any, name: str, backend: str) -> dict | None:
    """The index probe (capr.search.strength) of one set's index, printed as a JSON row; what --dump keeps of it."""
    t = time.time()
    strength = measure_strength(store)
    kept = None if strength is None else {**strength.to_dict(), "by_share": {str(k): v for k, v in strength.by_share.items()}}
    print(json.dumps({"probe": name, "encoder": backend, **(kept or {}), "seconds": round(time.time() - t, 1)}), flush=True)
    return kept


def measure(name: str, args: argparse.Namespace, variants: list[str], backend: str = "torch") -> tuple[dict, dict]:
    """Every system on one set, its index built with the encoder ``backend``: {system: {metric: per-question
    scores}}, and what --dump keeps of the set."""
    config = EvalConfig(benchmark=name, data_dir=args.data_dir, pipeline="default", query_field=args.query_field,
                        protocol=args.protocol, encoder_backend=backend)
    data = load_benchmark(config)
    qrels = qrels_as_dict(data.qrels)
    bench = BenchmarkSearcher(data, config.query_field)
    probed = probe(bench.searcher.store, name, backend) if args.fusions else None
    systems = {"BM25 alone": bench.scorer(Retriever.bm25, config.template, FusionConfig()),
               "dense alone": bench.scorer(Retriever.dense, config.template, FusionConfig())}
    for v in variants:
        options = replace(config.search_options(), **VARIANTS[v])
        systems[v] = default_scorer(data, config.query_field, options=options)
    indexed = {}  # system → the set indexed with its model (default: MiniLM's)
    for label, model in (m.split("=", 1) for m in args.model):
        trained_config = replace(config, model=model)
        trained = load_benchmark(trained_config)
        systems[f"{label} dense alone"] = BenchmarkSearcher(trained, config.query_field).scorer(
            Retriever.dense, config.template, FusionConfig())
        systems[f"{label} default"] = default_scorer(trained, config.query_field, options=trained_config.search_options())
        indexed[f"{label} dense alone"] = indexed[f"{label} default"] = trained
        for second, spec in (r.split("=", 1) for r in args.reranker):
            systems[f"{label} default + {second}"] = default_scorer(
                trained, config.query_field, options=trained_config.search_options(), reranker=load_reranker(spec))
            indexed[f"{label} default + {second}"] = trained
    for second, spec in (r.split("=", 1) for r in args.reranker):
        for v in variants:
            options = replace(config.search_options(), **VARIANTS[v])
            systems[f"{v} + {second}"] = default_scorer(data, config.query_field, options=options,
                                                        reranker=load_reranker(spec))
    scores = {}
    for system, scorer in systems.items():
        _, run = run_benchmark(indexed.get(system, data), scorer, config.protocol, config.query_field)
        scores[system] = {m: np.asarray(v) for m, v in per_query_metrics(run.as_scores(), qrels, METRICS).items()}
    qids = sorted(qrels)
    parsed = {q.qid: bench.parsed[q.qid] for q in data.queries}
    kept = {"qids": qids, "idf": {qid: data.index.term_idf(parsed[qid].terms) for qid in qids},
            "terms": {qid: parsed[qid].terms for qid in qids}, "passages": len(data.index), "probe": probed,
            "scores": {sy: {m: v.tolist() for m, v in sc.items()} for sy, sc in scores.items()}}
    return scores, kept


def mean(values: np.ndarray) -> float:
    return round(float(np.mean(values)), 2) if len(values) else float("nan")


def decision_table(results: dict[tuple[str, str], dict], sets: list[str], encoders: list[str]) -> list[str]:
    """The default minus the default without each part, per set and encoder and pooled (nDCG@10 / P@1), and the
    rule's verdict; then each set's default against BM25 alone, dense alone and the 1 : 1 glue."""
    lines = ["", "| part | encoder | " + " | ".join(sets) + " | pooled | verdict |",
             "|---|---|" + "---:|" * (len(sets) + 1) + "---|"]
    for part, off in {**PARTS, **OFF_PARTS}.items():
        sign = -1.0 if part in OFF_PARTS else 1.0  # with the part minus without it
        verdicts, moved = [], False
        for enc in encoders:
            cells, ok = [], True
            pooled = {m: [] for m in METRICS}
            for name in sets:
                sc = results[(name, enc)]
                d = {m: sign * float(np.mean(sc["default"][m]) - np.mean(sc[off][m])) for m in METRICS}
                ok &= all(v >= -1e-9 for v in d.values())
                moved |= any(abs(v) > 1e-9 for v in d.values())
                cells.append(" / ".join(f"{d[m]:+.2f}" for m in METRICS))
                for m in METRICS:
                    pooled[m].append(sign * (sc["default"][m] - sc[off][m]))
            gain = {m: float(np.concatenate(pooled[m]).mean()) for m in METRICS}
            verdicts.append(ok and gain["nDCG@10"] > 0)
            lines.append(f"| {part} | {enc} | " + " | ".join(cells) + " | "
                         + " / ".join(f"{gain[m]:+.2f}" for m in METRICS) + f" | {'on' if verdicts[-1] else 'off'} |")
        verdict = ("stays on" if all(verdicts) else "goes off") if part in PARTS else \
            ("goes on" if all(verdicts) else "stays off")
        if not moved:  # a part for ⟨entity, aspect⟩ queries (entity synonyms): judged on their dev sets
            verdict = "no effect on these questions"
        lines.append(f"| **{part}** | both | | " + "| " * (len(sets) - 1) + f"| **{verdict}** |")
    lines += ["", "| encoder | set | default − BM25 alone | default − dense alone | default − glue 1:1 |",
              "|---|---|---|---|---|"]
    for enc in encoders:
        for name in [*sets, "pooled"]:
            def delta(other: str) -> str:
                if name == "pooled":
                    return " / ".join(f"{float(np.concatenate([results[(s, enc)]['default'][m] - results[(s, enc)][other][m] for s in sets]).mean()):+.2f}" for m in METRICS)
                sc = results[(name, enc)]
                return " / ".join(f"{float(np.mean(sc['default'][m]) - np.mean(sc[other][m])):+.2f}" for m in METRICS)
            lines.append(f"| {enc} | {name} | {delta('BM25 alone')} | {delta('dense alone')} | {delta('glue 1:1')} |")
    return lines + ceiling_table(results, sets, encoders)


def ceiling_table(results: dict[tuple[str, str], dict], sets: list[str], encoders: list[str]) -> list[str]:
    """What choosing per question could reach at best (nDCG@10): each question given the better of dense alone and
    the default, or the best of those and BM25 alone, as an oracle that knew the judgements would choose — the most
    any per-question fusion rule or switch between these runs can give."""
    lines = ["", "| encoder | set | dense alone | default | better of the two, per question | best of BM25, dense, "
             "default, per question |", "|---|---|---:|---:|---:|---:|"]
    for enc in encoders:
        for name in sets:
            sc = results[(name, enc)]
            runs = [np.asarray(sc[sy]["nDCG@10"]) for sy in ("dense alone", "default", "BM25 alone")]
            two, three = np.maximum(runs[0], runs[1]), np.maximum.reduce(runs)
            lines.append(f"| {enc} | {name} | {mean(runs[0]):.2f} | {mean(runs[1]):.2f} | {mean(two):.2f} | "
                         f"{mean(three):.2f} |")
    return lines


PROBE_TOLERANCES = (0.0, 0.02, 0.05, 0.1)  # capr.search.strength.probe_share's tolerance, each a candidate rule
RIVALS = ("BM25 alone", "dense alone", "glue 1:1")
MEDICATION_MARGIN = 3.0  # issue 53: on medicationqa-dev the default must be this far above dense alone (nDCG@10)


def passes(sc: dict, system: str, name: str) -> bool:
    """Issue 53's rule on one set and encoder: ``system`` at or above BM25 alone, dense alone and the 1 : 1 glue on
    nDCG@10 and P@1, and on medicationqa-dev ``MEDICATION_MARGIN`` nDCG@10 above dense alone."""
    mean = {o: {m: float(np.mean(sc[o][m])) for m in METRICS} for o in (system, *RIVALS)}
    ok = all(mean[system][m] >= mean[o][m] - 1e-9 for o in RIVALS for m in METRICS)
    if name == "medicationqa-dev":
        ok &= mean[system]["nDCG@10"] >= mean["dense alone"]["nDCG@10"] + MEDICATION_MARGIN - 1e-9
    return ok


def probe_rules(st: Any) -> dict[str, str]:
    """Each candidate rule's choice for one index probe: the system (a --fusions variant, or the default) it runs."""
    from capr.search.strength import probe_fusion, probe_share

    switch = probe_fusion(st)
    rules = {f"argmax, tolerance {t}": share_name(probe_share(st, t)) for t in PROBE_TOLERANCES}
    return {"BM25 alone if dense loses (the option)": "default" if switch is None else share_name(switch.weights[0]), **rules}


def probe_rules_table(results: dict[tuple[str, str], dict], probes: dict[tuple[str, str], Any], sets: list[str],
                      encoders: list[str]) -> list[str]:
    """--fusions: each set's probe (MRR@10 of BM25, dense, and their fusion by BM25 share) and what each candidate rule
    (:func:`probe_rules`) chooses; per rule, the chosen system against BM25 alone, dense alone, the 1 : 1 glue and the
    default, and the issue's rule (:func:`passes`) on every set and encoder."""
    from capr.search.strength import SHARES, Strength

    chosen: dict[tuple[str, str], dict[str, str]] = {}
    names: list[str] = []
    rows = []
    for enc in encoders:
        for name in sets:
            p = probes.get((name, enc))
            if not p:
                rows.append(f"| {enc} | {name} | — | — | |")
                continue
            st = Strength(p["questions"], {float(k): v for k, v in p["by_share"].items()})
            chosen[(name, enc)] = probe_rules(st)
            names = list(chosen[(name, enc)])
            by = " ".join(f"{st.by_share[s]:.3f}" for s in SHARES)
            rows.append(f"| {enc} | {name} | {st.questions} | {st.bm25:.3f} / {st.dense:.3f} | {by} | "
                        + " | ".join(chosen[(name, enc)].values()) + " |")
    lines = ["", "| encoder | set | cloze questions | probe MRR@10 BM25 / dense | MRR@10 by BM25 share "
             + " ".join(share_name(s)[4:] for s in SHARES) + " | " + " | ".join(names) + " |",
             "|---|---|---:|---|---|" + "---|" * len(names), *rows]
    for rule in names:
        lines += ["", f"{rule}: the chosen system (nDCG@10 / P@1) and it − each", "",
                  "| encoder | set | system | nDCG@10 / P@1 | − BM25 alone | − dense alone | − glue 1:1 | − default | rule |",
                  "|---|---|---|---|---|---|---|---|---|"]
        passed = True
        for enc in encoders:
            for name in sets:
                if (name, enc) not in chosen:
                    passed = False
                    continue
                sc, v = results[(name, enc)], chosen[(name, enc)][rule]
                cand = {m: float(np.mean(sc[v][m])) for m in METRICS}

                def d(other: str) -> str:
                    return " / ".join(f"{cand[m] - float(np.mean(sc[other][m])):+.2f}" for m in METRICS)
                ok = passes(sc, v, name)
                passed &= ok
                lines.append(f"| {enc} | {name} | {v} | " + " / ".join(f"{cand[m]:.2f}" for m in METRICS)
                             + f" | {d('BM25 alone')} | {d('dense alone')} | {d('glue 1:1')} | {d('default')} | {'pass' if ok else 'FAIL'} |")
        lines.append(f"\n{rule}: the issue's rule {'PASSES' if passed else 'fails'}")
    return lines


def agreement_table(results: dict[tuple[str, str], dict], probes: dict[tuple[str, str], Any], sets: list[str],
                    encoders: list[str]) -> list[str]:
    """Does the probe order what the questions order? Per set and encoder: the BM25 shares at which the default with
    a fixed fusion passes the issue's rule (≥ BM25 alone, dense alone and the 1 : 1 glue on nDCG@10 and P@1), the
    share the questions like best (nDCG@10), the probe's best, and Spearman's ρ between the probe's MRR@10 and the
    questions' nDCG@10 over the shares; then, over the sets, ρ between the probe's dense − BM25 MRR@10 and the
    questions' dense − BM25 nDCG@10."""
    from capr.search.strength import SHARES, Strength, probe_share

    def rho(a: list[float], b: list[float]) -> float:
        ra, rb = (np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(float) for x in (a, b))
        return float(np.corrcoef(ra, rb)[0, 1]) if np.std(ra) and np.std(rb) else float("nan")

    lines = ["", "| encoder | set | shares passing the rule (+ default) | best share (nDCG@10) | probe's best | ρ(probe, questions) over shares |",
             "|---|---|---|---|---|---|"]
    gaps: dict[str, tuple[list[float], list[float]]] = {}
    for enc in encoders:
        for name in sets:
            sc, p = results[(name, enc)], probes.get((name, enc))
            real = {s: float(np.mean(sc[share_name(s)]["nDCG@10"])) for s in SHARES}
            ok = [share_name(s) for s in SHARES if passes(sc, share_name(s), name)]
            best = share_name(max(SHARES, key=lambda s: (real[s], -s)))
            if p:
                st = Strength(p["questions"], {float(k): v for k, v in p["by_share"].items()})
                mine = share_name(probe_share(st))
                r = rho([st.by_share[s] for s in SHARES], [real[s] for s in SHARES])
                g = gaps.setdefault(enc, ([], []))
                g[0].append(st.dense - st.bm25)
                g[1].append(float(np.mean(sc["dense alone"]["nDCG@10"]) - np.mean(sc["BM25 alone"]["nDCG@10"])))
            else:
                mine, r = "—", float("nan")
            ok += ["default"] if passes(sc, "default", name) else []
            lines.append(f"| {enc} | {name} | {', '.join(ok) or 'none'} | {best} | {mine} | {r:+.2f} |")
    every = ([x for g in gaps.values() for x in g[0]], [y for g in gaps.values() for y in g[1]])
    lines.append("")
    for label, (a, b) in [*gaps.items(), ("both encoders", every)]:
        lines.append(f"ρ over sets ({label}), probe dense − BM25 MRR@10 against the questions' dense − BM25 nDCG@10: "
                     f"{rho(a, b):+.2f} ({len(a)} indexes)")
    return lines


def grid_table(results: dict[tuple[str, str], dict], sets: list[str], encoders: list[str]) -> list[str]:
    """--fusions: every system's nDCG@10 / P@1 per set and encoder (the singles, the glue, the default, each share)."""
    lines = ["", "| encoder | system | " + " | ".join(sets) + " |", "|---|---|" + "---:|" * len(sets)]
    for enc in encoders:
        for system in results[(sets[0], enc)]:
            lines.append(f"| {enc} | {system} | " + " | ".join(
                " / ".join(f"{float(np.mean(results[(s, enc)][system][m])):.2f}" for m in METRICS) for s in sets) + " |")
    return lines


def tables_from_dumps(paths: list[Path]) -> None:
    """--tables-from: the --parts and --fusions tables again from --dump files (one per encoder, or one for both)."""
    results, probes, sets, encoders = {}, {}, [], []
    for path in paths:
        for key, kept in json.loads(path.read_text()).items():
            name, enc = (key[:-1].split(" [") if key.endswith("]") else (key, "torch"))
            if "scores" in kept:
                results[(name, enc)] = {sy: {m: np.asarray(v) for m, v in sc.items()} for sy, sc in kept["scores"].items()}
            if "scores" not in kept or (name, enc) not in probes:  # a --probe-only file's probe replaces a run's
                probes[(name, enc)] = kept.get("probe")
            sets += [name] if name not in sets else []
            encoders += [enc] if enc not in encoders else []
    sets = [s for s in sets if all((s, e) in results for e in encoders)]
    def has(systems: list[str]) -> bool:
        return all(sy in results[(s, e)] for s in sets for e in encoders for sy in systems)
    if has(["glue 1:1", *PARTS.values(), *OFF_PARTS.values()]):  # --parts runs
        print("\n".join(decision_table(results, sets, encoders)))
    if has(list(SHARE_VARIANTS)):  # --fusions runs
        print("\n".join(grid_table(results, sets, encoders) + probe_rules_table(results, probes, sets, encoders)
                        + agreement_table(results, probes, sets, encoders)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--variants", default="default", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--parts", action="store_true", help="the decision table: the default, each part off, the glue")
    ap.add_argument("--fusions", action="store_true", help="issue 53: the index probe (capr.search.strength) per set "
                    "and encoder, and the default with its fusion fixed at each BM25 share the probe can choose")
    ap.add_argument("--encoders", default="torch", help="comma-separated encoder backends each set is indexed with "
                    "(torch: MiniLM; static: the model2vec model distilled from it)")
    ap.add_argument("--protocol", default=None, help="full or rerank64 (default: the benchmark's own)")
    ap.add_argument("--query-field", default="question", help="question, or tuple (⟨entity, aspect⟩ benchmarks)")
    ap.add_argument("--model", action="append", default=[], help="NAME=MODEL: also index each set with MODEL (repeatable)")
    ap.add_argument("--reranker", action="append", default=[], help="NAME=SPEC: the default pipeline with this second "
                    "stage (`capr search --reranker SPEC`), on MiniLM's index and on each --model's (repeatable)")
    ap.add_argument("--dump", type=Path, help="write every system's per-question scores here (JSON), with each "
                    "question's analysed terms and their IDF in the set's index")
    ap.add_argument("--probe-only", action="store_true", help="only the index probe of each set and encoder (with "
                    "--dump: kept there, for --tables-from to use instead of the runs' own)")
    ap.add_argument("--tables-from", help="comma-separated --dump files of --parts or --fusions runs: print their tables, run nothing")
    args = ap.parse_args()
    if args.tables_from:
        tables_from_dumps([Path(p) for p in args.tables_from.split(",")])
        return
    variants = list(dict.fromkeys(args.variants.split(",") + (["default", "glue 1:1", *PARTS.values(), *OFF_PARTS.values()] if args.parts else [])
                                         + (["default", "glue 1:1", *SHARE_VARIANTS] if args.fusions else [])))
    sets, encoders = args.sets.split(","), args.encoders.split(",")
    if args.probe_only:
        probes = {}
        for enc in encoders:
            for name in sets:
                config = EvalConfig(benchmark=name, data_dir=args.data_dir, pipeline="default", query_field=args.query_field,
                                    protocol=args.protocol, encoder_backend=enc)
                store = BenchmarkSearcher(load_benchmark(config), config.query_field).searcher.store
                probes[name if enc == "torch" else f"{name} [{enc}]"] = {"probe": probe(store, name, enc)}
                if args.dump:
                    args.dump.write_text(json.dumps(probes))
        return
    rows, dump, results, probes = [], {}, {}, {}
    for enc in encoders:
        for name in sets:
            t = time.time()
            scores, kept = measure(name, args, variants, enc)
            results[(name, enc)] = scores
            probes[(name, enc)] = kept["probe"]
            if args.dump:
                dump[name if enc == "torch" else f"{name} [{enc}]"] = kept
                args.dump.write_text(json.dumps(dump))
            for system, sc in scores.items():
                row = {"set": name, "encoder": enc, "system": system, "queries": len(sc["P@1"]),
                       **{m: mean(sc[m]) for m in METRICS}}
                if system not in SINGLE:
                    for base in SINGLE:
                        row[f"p vs {base}"] = {m: round(paired_p(sc[m], scores[base][m]), 4) for m in METRICS}
                row["seconds"] = round(time.time() - t, 1)
                print(json.dumps(row), flush=True)
                rows.append(row)
    for enc in encoders:
        for system in results[(sets[0], enc)]:
            pooled = {m: np.concatenate([results[(s, enc)][system][m] for s in sets]) for m in METRICS}
            rows.append({"set": "pooled", "encoder": enc, "system": system, "queries": len(pooled["P@1"]),
                         **{m: mean(pooled[m]) for m in METRICS}})
            print(json.dumps(rows[-1]), flush=True)
    print("\n| set | encoder | system | queries | nDCG@10 | P@1 | p vs BM25 (nDCG@10 / P@1) | p vs dense (nDCG@10 / P@1) |")
    print("|---|---|---|---:|---:|---:|---|---|")
    for r in rows:
        ps = [" / ".join(f"{r[k][m]:.3f}" for m in METRICS) if k in r else "—" for k in ("p vs BM25 alone", "p vs dense alone")]
        print(f"| {r['set']} | {r['encoder']} | {r['system']} | {r['queries']} | {r['nDCG@10']:.2f} | {r['P@1']:.2f} | {ps[0]} | {ps[1]} |")
    if args.parts:
        print("\n".join(decision_table(results, sets, encoders)))
    if args.fusions:
        print("\n".join(grid_table(results, sets, encoders) + probe_rules_table(results, probes, sets, encoders)
                    + agreement_table(results, probes, sets, encoders)))


if __name__ == "__main__":
    main()
