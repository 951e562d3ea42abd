"""capr adapt: labels → training → gate → index, in one command (capr.adapt)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from capr.cli.common import _progress, _run_guarded, _WriteProgress, app, err, out, write_json
from capr.corpus import Format
from capr.errors import CaprError


# what `capr adapt --add` takes beside the documents: every other option is the first run's
_ADD_TAKES = frozenset({"corpus", "out_dir", "add", "time_budget", "as_json"})


def _typed(ctx: typer.Context, name: str) -> bool:
    # by name: Typer carries its own copy of click, whose ParameterSource is not click's
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


@app.command("adapt")
def adapt_cmd(
    ctx: typer.Context,
    corpus: List[Path] = typer.Argument(None, help="Corpus file(s) or folder(s) to adapt to (any format `capr index` "
                                        "reads); with --add: the documents to add."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Index folder to build (replaced atomically); labels, models "
                                 "and the report go to OUT.adapt/."),
    add: bool = typer.Option(False, "--add", help="Continue an earlier `capr adapt --out OUT` with more documents: "
                             "same settings, training from the model it kept, gate and index redone over everything."),
    fmt: Format = typer.Option(Format.auto, "--format", "-f"),
    time_budget: Optional[float] = typer.Option(None, "--time-budget", help="Minutes for training and the gate "
                                                "(default 30; building the index comes on top)."),
    max_tokens: int = typer.Option(200, "--max-tokens", help="Passage length in words, for labels and index alike."),
    start_model: str = typer.Option("minilm", "--start-model", help="The zero-shot model to start from and to beat."),
    free_text: List[str] = typer.Option([], "--free-text-dev", help="Extra free-text dev set for the gate (repeatable): "
                                        "'mediqa2019-train', 'medicationqa-dev' or 'nfcorpus-dev' (from --data-dir), "
                                        "beir:PATH, or a JSONL file of {\"question\", \"answers\": [{\"text\", "
                                        "\"relevance\"}]}. With --question-pairs, medicationqa-dev is checked too."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data folder for named dev sets."),
    question_pairs: Optional[Path] = typer.Option(None, "--question-pairs", help="Also train on the question pairs in "
                                                  "this data folder (MedQuAD questions and answers, RQE, Curai MQP); "
                                                  "the gate still compares with the start model."),
    exclude_medquad_test: Optional[Path] = typer.Option(None, "--exclude-medquad-test",
                                                        help="Data folder holding medquad_cdv_test: leave its documents out."),
    split: Optional[str] = typer.Option(None, "--split", help="Only the mtsamples-capr 'train' or 'test' notes."),
    keep: str = typer.Option("auto", "--keep", help="auto (the gate decides) | trained | start."),
    context_dropout: float = typer.Option(0.25, "--context-dropout", help="Share of training passages read without "
                                          "their title (title-less corpora must still work)."),
    ict_prob: float = typer.Option(0.3, "--ict-prob", help="Share of training queries that are a sentence of their "
                                   "passage (inverse cloze): keeps free-text matching while training on labels."),
    free_text_margin: float = typer.Option(1.0, "--free-text-margin", help="Points a candidate may trail the start "
                                           "model on a free-text check and still be kept (0: at or above)."),
    second_stage: str = typer.Option("auto", "--second-stage", help="auto: gate an ensemble second stage (the start "
                                     "model + the trained one) and record it in the index when it helps | off."),
    max_steps: int = typer.Option(100_000, "--max-steps", help="Most training steps (the time budget usually stops first)."),
    seed: int = typer.Option(13, "--seed"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip malformed files/records and report them."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Adapt dense retrieval to your own unlabeled corpus: self-supervised labels, a bi-encoder trained on them, a
    gate that keeps it only if it beats the zero-shot model on held-out labels and is no worse on free text, and
    the index built with the kept model (`capr search OUT ...` then needs no further flags)."""

    def run() -> None:
        from capr.adapt import AdaptConfig, KeepPolicy, adapt, config_for_more
        from capr.train.args import OptionRange as R
        from capr.train.args import check_options

        # every numeric option: refused before any document is read (or, with --add, the kept model copied)
        check_options([("--time-budget", time_budget, R.positive), ("--max-tokens", max_tokens, R.count),
                       ("--free-text-margin", free_text_margin, R.rate), ("--max-steps", max_steps, R.count),
                       ("--seed", seed, R.seed)])
        if not corpus:
            raise CaprError("give the corpus to adapt to (or, with --add, the documents to add)")
        try:
            KeepPolicy(keep)
        except ValueError:
            raise CaprError(f"--keep must be auto, trained or start, not {keep!r}") from None
        if second_stage not in ("auto", "off"):
            raise CaprError(f"--second-stage must be auto or off, not {second_stage!r}")
        if not 0 <= context_dropout < 1 or not 0 <= ict_prob < 1:
            raise CaprError("--context-dropout and --ict-prob must be in [0, 1)")
        for c in corpus + ([question_pairs] if question_pairs else []):
            if not c.exists():
                raise CaprError(f"{c}: no such file or folder")
        if add:
            # --add keeps the first run's settings (its labels, model and gate are continued): a setting typed
            # beside it would be passed over without a word
            typed = [param.opts[0] for param in ctx.command.params if param.name not in _ADD_TAKES
                     and _typed(ctx, param.name)]
            if typed:
                raise CaprError(f"--add continues {out_dir} with the settings of the run that built it; "
                                f"{', '.join(typed)} cannot change them (run `capr adapt` without --add to build it "
                                "again with them)")
            config = config_for_more(out_dir, [str(c) for c in corpus], time_budget)
        else:
            config = AdaptConfig(corpora=[str(c) for c in corpus], out=str(out_dir), format=fmt.value,
                                 time_budget_min=time_budget if time_budget is not None else 30.0,
                                 start_model=start_model, max_tokens=max_tokens, context_dropout=context_dropout, ict_prob=ict_prob,
                                 free_text_margin=free_text_margin,
                                 free_text=tuple(free_text), data_dir=str(data_dir) if data_dir else None,
                                 question_pairs=str(question_pairs) if question_pairs else None,
                                 exclude_medquad_test=str(exclude_medquad_test) if exclude_medquad_test else None,
                                 split=split, keep=keep, seed=seed, skip_bad=skip_bad, second_stage=second_stage,
                                 max_steps=max_steps)
        with _progress() as progress:
            report = adapt(config, log=lambda m: err.print(escape(m)), progress=err.is_terminal,
                           index_progress=_WriteProgress(progress, "indexing with the kept model"))
        if as_json:
            write_json(report.to_dict())
            return
        render_report(report)

    _run_guarded(run)


def render_report(report) -> None:
    tr = report.training
    out.print(f"[bold]capr adapt[/]: {report.documents:,} documents, {report.labeled_passages:,} labeled passages "
              f"({report.held_out_passages:,} held out for the gate)")
    if tr:
        out.print(f"trained {tr['steps']} steps in {tr['minutes']} min ({tr['stopped']}), kept step {tr['kept_step']}; "
                  f"trainer dev {tr['dev_start']} → {tr['dev_best']}")
    names = list(report.candidates)
    if names:
        table = Table(title=escape("gate: dev checks, ranked as the index searches (the Searcher on held-out documents; "
                            "BM25 and the model fused on a pool; P@1 / MAP / nDCG@10; primary metric first; the model "
                            "alone in brackets; [reported]: not part of the decision)"))
        table.add_column("candidate")
        for c in report.checks:
            table.add_column(escape(f"{c['name']} [{c['side']}] ({c['primary']})"), justify="right")
        for name in names:
            row = [name + (" ← kept" if name == report.kept else "")]
            for c in report.checks:
                m = report.candidates[name][c["name"]]
                alone = (report.candidates_dense.get(name) or {}).get(c["name"], {}).get(c["primary"])
                row.append(f"{m[c['primary']]:.2f}  ({m['P@1']:.1f}/{m['MAP']:.1f}/{m['nDCG@10']:.1f})"
                           + (f" [{alone:.2f}]" if alone is not None else ""))
            table.add_row(*row)
        out.print(table)
    out.print(f"[bold]kept[/]: {report.kept} ({report.kept_model}) — {report.reason}")
    if report.fusion:
        bm25, dense = report.fusion["weights"]
        out.print(f"[bold]fusion[/]: BM25 : dense = {bm25:g} : {dense:g} — {report.fusion['reason']}")
    second = report.second_stage or {}
    if second.get("table"):
        table = Table(title="second stage: the ensemble re-ranking the kept first stage's top "
                            f"{second.get('depth')} (primary metric, without → with; paired p)")
        for col in ("check", "without", "with", "p"):
            table.add_column(col, justify="left" if col == "check" else "right")
        sides = {c["name"]: c["side"] for c in report.checks}
        for name, row in second["table"].items():
            table.add_row(escape(f"{name} [{sides.get(name, '?')}] ({row['primary']})"), f"{row['without']:.2f}", f"{row['with']:.2f}",
                          f"{second['paired'].get(name, 1.0):.3f}")
        out.print(table)
    if second:
        out.print(f"[bold]second stage[/]: {'kept: ' + second['spec'] if second.get('kept') else 'none'} — "
                  f"{second.get('reason', '')}")
    out.print(f"index: {report.index.get('dir')} ({report.index.get('passages', 0):,} passages); "
              f"minutes: {report.minutes}")
    out.print(f"search it: capr search {report.index.get('dir')} --entity ENTITY --aspect ASPECT")
