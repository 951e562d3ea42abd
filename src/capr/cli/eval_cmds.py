"""capr eval: the benchmark runner (capr.eval.runner, capr.cases.bench) rendered as a table or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from capr.cli.common import (
    TLS_CA_OPTION,
    TOKEN_OPTION,
    URI_OPTION,
    _item_progress,
    _open_cdv_store,
    _progress,
    _run_guarded,
    _WriteProgress,
    app,
    backend_options,
    err,
    out,
    write_json,
)
from capr.errors import CaprError
from capr.index import Index
from capr.records import Retriever, Run
from capr.search.query import DEFAULT_TEMPLATE, TEMPLATES
from capr.search.fusion import FusionMethod
from capr.store.embedded import EmbeddedStore
from capr.store.protocol import Backend

if TYPE_CHECKING:
    from capr.eval.runner import EvalConfig


# `capr eval --run RUN --qrels QRELS`: a run file of the user's own questions scored against their judgements
RUN_FILE_OPTION = typer.Option(None, "--run", help="Score this TREC run file (e.g. from `capr search IDX --queries FILE "
                               "--group-by doc --run-out RUN`) against --qrels, as trec_eval does, instead of running a "
                               "benchmark.")
QRELS_OPTION = typer.Option(None, "--qrels", help="With --run: the judgements (TREC's 'qid 0 docid grade' lines, or "
                            "BEIR's 'query-id corpus-id score' under a header).")


@app.command("eval")
def eval_cmd(
    ctx: typer.Context,
    benchmark: str = typer.Option("medquad-cdv", help="Benchmark name; beir:PATH (a BEIR folder); mediqa:PATH (a "
                                  "MEDIQA 2019 Task 3 file with judgements); mcqa:PATH (a MedQA-, MedMCQA- or "
                                  "HEAD-QA-style question file, scored over --index like medqa-dev)."),
    data_dir: Path = typer.Option(Path("../shared/data"), help="Folder holding the benchmark data sets."),
    retriever: Optional[Retriever] = typer.Option(None, "--retriever", "-r", help="First stage (default bm25; on the "
                                                  "similar-case benchmarks: what `capr cases` uses on the index)."),
    protocol: Optional[str] = typer.Option(None, help="rerank64 (CDV/CAPR) or full (default: rerank64; full for "
                                           "BEIR folders and the consumer dev sets)."),
    query_field: Optional[str] = typer.Option(None, help="tuple (entity + aspect) or question (default: tuple "
                                              "where the benchmark has it)."),
    run_out: Optional[Path] = typer.Option(None, help="Write the ranking as a TREC run file (case benchmarks: one JSON "
                                           "line per question: option scores, answer, supporting pids)."),
    cache_dir: Optional[Path] = typer.Option(None, help="Folder under which benchmark indexes are kept between runs, one sub-folder per benchmark, corpus "
                                               "version and encoder (default: the capr cache's bench/)."),
    model: str = typer.Option("minilm", help="Dense encoder (dense/hybrid): 'minilm', a Hugging Face id, a path, or an index "
                                            "(`capr adapt --out IDX`): the encoder it was built with."),
    query_model: Optional[str] = typer.Option(None, help="Separate query encoder."),
    encoder_backend: Optional[str] = typer.Option(None, "--encoder-backend", help="Encoder: torch (default) | onnx | onnx-int8 | static."),
    backend: str = typer.Option("embedded", "--backend", help="Index backend that scores the retriever: embedded or milvus "
                                "(the benchmark's passages are loaded into a collection on --uri)."),
    uri: Optional[str] = URI_OPTION,
    token: Optional[str] = TOKEN_OPTION,
    tls_ca: Optional[Path] = TLS_CA_OPTION,
    collection: Optional[str] = typer.Option(None, "--collection", help="Milvus collection for the benchmark (default: capr_bench_<benchmark>_<encoder>)."),
    template: str = typer.Option(DEFAULT_TEMPLATE, help=f"⟨entity, aspect⟩ → text for the encoder: {', '.join(TEMPLATES)}."),
    fusion: FusionMethod = typer.Option(FusionMethod.rrf, help="Hybrid fusion: rrf or weighted."),
    reranker: Optional[str] = typer.Option(None, "--reranker", help="Second stage: cross:DIR, poly:DIR, bi:DIR "
                                           "(bi:minilm: the bundled MiniLM), or several joined by commas (an ensemble)."),
    rerank_depth: Optional[int] = typer.Option(None, "--rerank-depth", help="Candidates the re-ranker re-orders "
                                               "(default 64 under the papers' protocol, 20 with --pipeline default)."),
    rerank_share: Optional[float] = typer.Option(None, "--rerank-share", help="--pipeline default: the re-ranker's share "
                                                 "when its ranking is fused with the first stage's (default as capr search)."),
    cdv: Optional[Path] = typer.Option(None, "--cdv", help="Rank with a CDV model (from `capr train cdv`) instead of --retriever."),
    boundaries: str = typer.Option("fixed", "--boundaries", help="fixed, or free: also score CDV free-boundary spans "
                                   "against the gold passages (character-overlap F1)."),
    theta_open: float = typer.Option(0.8, "--theta-open", help="Free boundaries: a span opens at this (document-scaled) sentence score."),
    theta_close: float = typer.Option(0.4, "--theta-close", help="Free boundaries: a span closes below this score."),
    pipeline: str = typer.Option("protocol", "--pipeline", help="protocol: the papers' protocol (one retriever scores "
                                 "every candidate); default: exactly what `capr search` with default options returns."),
    titles: Optional[bool] = typer.Option(None, "--titles/--no-titles", help="The benchmark index reads each passage "
                                          "with its document title in front, as `capr index` does (default: with "
                                          "--pipeline default only; the papers' protocol reads passage text)."),
    entity_synonyms: bool = typer.Option(True, "--entity-synonyms/--no-entity-synonyms", help="--pipeline default: "
                                         "a passage names the entity by any of its names, as in capr search."),
    split: Optional[str] = typer.Option(None, "--split", help="BEIR benchmarks: the judgements, qrels/SPLIT.tsv "
                                        "(default: test, else dev)."),
    compare: Optional[Path] = typer.Option(None, "--compare", help="A TREC run of the same benchmark (e.g. another "
                                           "--run-out): each metric side by side, with a paired randomisation test."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    index_dir: Optional[Path] = typer.Option(None, "--index", help="Case benchmarks (medqa-dev, headqa, medmcqa-dev, headqa-dev): the case index."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Evaluate a fixed random subset of N questions (any "
                                        "benchmark; the same N and --seed give the same questions, each scored as in "
                                        "the whole evaluation)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the --limit subset."),
    dense_k: int = typer.Option(50, "--dense-k", help="Case benchmarks: supports per option kept by the encoder."),
    match: str = typer.Option("phrase", "--match", help="Case benchmarks: an option is mentioned as a phrase, or by "
                              "all its words (words)."),
    fallback: Optional[str] = typer.Option(None, "--fallback", help="Case benchmarks: an option no passage mentions is "
                                           "scored on the passages closest to its words (related, as `capr cases`), or "
                                           "on its own text (text, the paper's)."),
    run_file: Optional[Path] = RUN_FILE_OPTION,
    qrels: Optional[Path] = QRELS_OPTION,
) -> None:
    """Evaluate a retriever on a benchmark; prints R@1/5/10, MAP, MRR@10, nDCG@10 (percent). A BEIR-layout folder
    (--benchmark beir:PATH, nfcorpus-dev or medicationqa-dev) is judged by document: nDCG@10, P@1, MRR@10, R@100, MAP. The
    similar-case benchmarks (medqa-dev, headqa, medmcqa-dev) print accuracy and AP over all (question, option) pairs.
    With --run and --qrels: a run of your own questions on your own index, scored against your judgements."""
    def body() -> None:
        if run_file is not None or qrels is not None:
            return _judge_run(ctx, run_file, qrels, compare, as_json)
        from capr.cases.bench import is_case_benchmark
        from capr.eval.runner import EvalConfig, check_benchmark, check_eval_options, check_run_out

        check_eval_options(limit, seed, rerank_depth, rerank_share, (theta_open, theta_close), dense_k)
        if run_out is not None:
            check_run_out(run_out, benchmark, data_dir, index_dir, compare, cache_dir)
        if is_case_benchmark(benchmark):
            if compare is not None:  # it was passed over: the table came without the comparison asked for
                raise CaprError(f"--compare compares TREC runs of passage benchmarks; {benchmark} is a similar-case "
                                "benchmark (its --run-out files are compared by experiments/cases_paired.py)")
            return _eval_cases(benchmark, data_dir, index_dir, retriever, reranker, rerank_depth or 64, limit, seed, dense_k,
                               as_json, run_out, match, fallback)
        check_benchmark(benchmark)
        compared = _compared_run(compare)  # a bad run file: refused before any work
        opts = backend_options(backend, uri, token, tls_ca, encoder_backend)
        config = EvalConfig(benchmark=benchmark, data_dir=data_dir, retriever=retriever or Retriever.bm25, protocol=protocol,
                            query_field=query_field, model=model, query_model=query_model,
                            encoder_backend=opts.encoder_backend, template=template, fusion=fusion, reranker=reranker,
                            rerank_depth=rerank_depth, cache_dir=cache_dir, backend=opts, collection=collection,
                            cdv=cdv, boundaries=boundaries, thetas=(theta_open, theta_close), pipeline=pipeline,
                            titles=titles, rerank_share=rerank_share, entity_synonyms=entity_synonyms, split=split,
                            limit=limit, seed=seed)
        _render_benchmark(_run_benchmark(config, compared, compare, run_out), as_json)

    _run_guarded(body)


def _warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}")


def _compared_run(compare: Optional[Path]) -> Optional[Run]:
    """--compare RUN, read (a missing or bad file is refused before any work); None without it."""
    if compare is None:
        return None
    if not compare.is_file():
        raise CaprError(f"{compare}: no such run file (--compare)")
    from capr.eval.runs import read_run

    return read_run(compare, warn=_warn)


def _run_benchmark(config: EvalConfig, compared: Optional[Run], compare: Optional[Path],
                   run_out: Optional[Path]) -> dict[str, Any]:
    """`capr eval` of a passage benchmark: its index loaded (with a progress bar), every warning said, the run
    written and compared when asked; the record `--json` prints."""
    from capr.eval.runner import (check_run_ids, compare_coverage, compare_runs, load_benchmark, reading_warnings,
                                  run_eval, unsearchable_warnings)
    from capr.eval.runs import write_run

    benchmark, opts = config.benchmark, config.backend
    for warning in config.warnings():
        _warn(warning)
    with _progress() as p:
        data = load_benchmark(config, _WriteProgress(p, f"indexing {benchmark}"))
    for warning in reading_warnings(data):
        _warn(warning)
    if run_out is not None:
        check_run_ids(data, run_out)
    if compared is not None:  # a run of other queries: refused before the evaluation, not compared as zeros
        for warning in compare_coverage(compared, data, f"{compare} (--compare)"):
            _warn(warning)
    cdv_store = _open_cdv_store(EmbeddedStore.of(data.index), config.cdv) if config.cdv is not None else None
    label = f"{benchmark} {config.protocol.value} {'default' if config.pipeline == 'default' else config.retriever.value}"
    if opts.backend is Backend.milvus:
        # loading the benchmark's passages into a collection, before (not during) the per-query bar
        from capr.eval.benchmarks import benchmark_store

        with _progress() as p:
            task = p.add_task(f"loading {benchmark} into Milvus {config.collection_name()}", total=None, note="")
            benchmark_store(data, opts.uri, config.collection_name(), token=opts.token,
                            progress=lambda n: p.advance(task, n), **opts.milvus_options())
    result, run = run_eval(config, data, progress=_item_progress(label), cdv_store=cdv_store)
    for warning in unsearchable_warnings(data):  # found while running (the config's were said above)
        _warn(warning)
    if run_out:
        write_run(run_out, run)
    if compared is not None:
        from capr.eval.metrics import ALL_METRICS

        result["compare"] = compare_runs(run, compared, data, [m for m in result["metrics"] if m in ALL_METRICS])
        result["compare"]["file"] = str(compare)
    return result


def _render_benchmark(result: dict[str, Any], as_json: bool) -> None:
    """A passage benchmark's record as JSON, or as a table (with the compared run, and CDV's free boundaries when
    scored)."""
    if as_json:
        write_json(result, indent=None, ensure_ascii=True)
        return
    _print_metrics(f"{result['benchmark']} · {result['protocol']} · {result['query_field']} queries · "
                   f"{result['retriever']} ({result['queries']} queries)", "this run", result["metrics"],
                   result.get("compare"))
    if "boundaries" in result:
        b = result["boundaries"]
        out.print(f"top answer vs gold passage, character-overlap F1: fixed passages {b['fixed_F1']:.2f} "
                  f"(mean {b['fixed_chars']:.0f} chars), free boundaries {b['free_F1']:.2f} "
                  f"(mean {b['free_chars']:.0f} chars; θ_open {b['theta_open']}, θ_close {b['theta_close']})")


_JUDGE_OPTIONS = {"run_file", "qrels", "compare", "as_json"}


def _judge_run(ctx: typer.Context, run_file: Optional[Path], qrels: Optional[Path], compare: Optional[Path],
               as_json: bool) -> None:
    """`capr eval --run RUN --qrels QRELS [--compare RUN2]`: a run file scored against judgements."""
    from capr.eval.judge import judge_run_files
    from capr.eval.metrics import METRICS

    if run_file is None or qrels is None:
        raise CaprError("--run and --qrels go together: a run file (capr search IDX --queries FILE --run-out RUN) "
                        "scored against its judgements")
    given = [p.opts[0] for p in ctx.command.params if p.name not in _JUDGE_OPTIONS and p.name is not None
             and getattr(ctx.get_parameter_source(p.name), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")]
    if given:
        raise CaprError(f"{given[0]} runs a benchmark; --run and --qrels score a run file already made (give the "
                        "search options to `capr search --queries` instead)")
    result = judge_run_files(run_file, qrels, compare, warn=lambda m: err.print(f"[yellow]warning:[/] {escape(m)}"))
    if as_json:
        write_json(result, indent=None, ensure_ascii=True)
        return
    _print_metrics(f"{run_file} · judged by {qrels} ({result['queries']} queries)", str(run_file),
                   {m: result["metrics"][m] for m in METRICS}, result.get("compare"))


def _print_metrics(title: str, label: str, metrics: dict[str, float], compare: dict | None) -> None:
    """One row of metrics, labelled; with a compared run, its row and the paired test's p-values below, each
    labelled. Printed at the width it needs (a pipe or file is 80 columns to rich, which cut the last header)."""
    from rich.measure import Measurement

    table = Table(title=title)
    table.add_column("run")
    for m in metrics:
        table.add_column(m, justify="right", no_wrap=True)
    table.add_row(label, *(f"{v:.2f}" for v in metrics.values()))
    if compare is not None:
        table.add_row(compare["file"], *(f"{compare[m]['compared']:.2f}" if m in compare else "" for m in metrics))
        table.add_row("p (paired)", *(f"{compare[m]['p']:.3f}" if m in compare else "" for m in metrics))
        table.caption = (f"p: paired randomisation test (two-sided, 10,000 sign flips) over {compare['queries']} "
                         "queries")
    needed = Measurement.get(out, out.options.update(width=10_000), table).maximum
    detected = out.width
    out.width = max(detected, needed)  # print() clips a width it is given to the console's
    try:
        out.print(table)
    finally:
        out.width = detected


def _eval_cases(benchmark: str, data_dir: Path, index_dir: Optional[Path], retriever: Optional[Retriever],
                reranker: Optional[str], rerank_depth: int, limit: Optional[int], seed: int, dense_k: int, as_json: bool,
                run_out: Optional[Path] = None, match: str = "phrase", fallback: Optional[str] = None) -> None:
    from capr.cases import CasePipeline, CaseScorer
    from capr.cases.bench import benchmark_questions, evaluate_cases, write_outcomes
    from capr.cases.config import case_config

    if index_dir is None:
        raise CaprError(f"{benchmark} needs --index (the case index from `capr case-index`)")
    if reranker and not reranker.startswith("cross:"):
        raise CaprError(f"{benchmark}: the re-ranker must be cross:DIR, got {reranker!r}")
    if reranker or retriever is None:
        sc = None  # the cross-encoder given, or what `capr cases` runs on this index
    elif retriever in (Retriever.bm25, Retriever.dense):
        sc = CaseScorer(retriever.value)
    else:
        raise CaprError(f"{benchmark}: use --retriever bm25 or dense, or --reranker cross:DIR")
    qs = benchmark_questions(data_dir, benchmark, limit, seed)  # a bad question file: said before the index loads
    index = Index.load(index_dir)
    cfg = case_config(index.has_dense, reranker[len("cross:"):] if reranker else None, scorer=sc, dense_k=dense_k,
                      cross_k=min(rerank_depth, dense_k), match=match, fallback=fallback)
    sc = cfg.scorer
    pipe = CasePipeline(index, cfg)

    progress = _item_progress(f"{benchmark} {sc.value}")

    metrics, outcomes = evaluate_cases(pipe, qs, progress)
    if metrics.get("unreadable"):
        err.print(f"[yellow]warning:[/] {metrics['unreadable']} question(s) have no word the {sc.value} scorer can "
                  "search; their options tie (chance credit)")
    if run_out is not None:
        write_outcomes(run_out, outcomes)
    result = {"benchmark": benchmark, "scorer": sc.value, "reranker": reranker, "index": str(index_dir),
              "limit": limit, "seed": seed, "config": cfg.to_dict(), "metrics": metrics}
    if as_json:
        write_json(result, indent=None, ensure_ascii=True)
    else:
        table = Table(title=f"{benchmark} · {sc.value} ({metrics['questions']} questions)")
        for m in ("accuracy", "AP", "coverage", "correct_found", "chance"):
            table.add_column(m, justify="right")
        table.add_row(*(f"{metrics[m]:.2f}" for m in ("accuracy", "AP", "coverage", "correct_found", "chance")))
        out.print(table)
