"""capr labels / train / merge: self-supervised labels and the model trainers."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from capr.cli.common import _progress, _run_guarded, app, err, out, write_json
from capr.corpus import Format, ReadReport, read_documents
from capr.corpus.segment import SegmenterConfig
from capr.errors import CaprError
from capr.models.context import parse_context


@app.command("labels")
def labels_cmd(
    corpus: Path = typer.Argument(..., help="Corpus to label (any format `capr index` reads)."),
    out_path: Path = typer.Option(..., "--out", "-o", help="Labels JSONL to write (atomically)."),
    fmt: Format = typer.Option(Format.auto, "--format", "-f"),
    split: Optional[str] = typer.Option(None, "--split", help="Only the mtsamples-capr 'train' or 'test' notes."),
    exclude_medquad_test: Optional[Path] = typer.Option(
        None, "--exclude-medquad-test", help="Data dir holding medquad_cdv_test: drop its documents."),
    strict: bool = typer.Option(False, "--strict", help="With --exclude-medquad-test: also drop documents whose "
                                "focus entity is a test entity."),
    no_ner: bool = typer.Option(False, "--no-ner", help="Title entities only (no dictionary NER)."),
    no_assertions: bool = typer.Option(False, "--no-assertions", help="Keep negated/family/hypothetical mentions."),
    max_tokens: int = typer.Option(200, "--max-tokens", help="Passage length in tokens."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N documents."),
    top: int = typer.Option(15, "--top", help="Top entities/aspects to print."),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
) -> None:
    """Generate self-supervised (entity, aspect) labels for every passage of an unlabeled corpus."""

    def run() -> None:
        import itertools

        from capr.labels import LabelConfig, LabelGenerator, write_labels
        from capr.labels.generate import check_labels_path
        from capr.labels.splits import exclude_test_documents, medquad_test_exclusion, select_split
        from capr.train.args import OptionRange as R
        from capr.train.args import check_options

        # refused before any document is read: a negative --limit was a traceback, --limit 0 labelled every document
        check_options([("--max-tokens", max_tokens, R.count0), ("--limit", limit, R.count), ("--top", top, R.count0)])
        check_labels_path(out_path, corpus)  # before the dictionary and ConText are loaded, seconds of work
        report = ReadReport()
        docs = read_documents(corpus, fmt, report)
        exclusion = None
        if exclude_medquad_test is not None:
            exclusion = medquad_test_exclusion(exclude_medquad_test)
            docs = exclude_test_documents(docs, exclusion, strict=strict)
        if split:
            docs = select_split(docs, split)
        if limit is not None:
            docs = itertools.islice(docs, min(limit, sys.maxsize))  # islice takes no larger stop
        config = LabelConfig(ner=not no_ner, assertions=not no_assertions,
                             segmenter=SegmenterConfig(max_tokens=max_tokens))
        gen = LabelGenerator(config, exclude_passage=exclusion.is_test_text if exclusion is not None else None)
        t0 = time.time()
        with _progress() as progress:
            task = progress.add_task("labelling documents", total=limit, note="")
            n = write_labels(out_path, gen(docs, progress=lambda k: progress.advance(task, k)), corpus=corpus)
        stats = gen.stats.to_dict(top)
        stats.update(seconds=round(time.time() - t0, 1), written=n, out=str(out_path))
        for note in report.notes:
            err.print(f"[yellow]note:[/] {escape(note)}")
        if exclusion is not None:
            stats.update(excluded_test_docs=exclusion.excluded_docs, excluded_by_entity=exclusion.excluded_by_entity)
        if as_json:
            write_json(stats, indent=2, ensure_ascii=True)
            return
        out.print(f"[bold]{n:,}[/] labeled passages from {stats['documents']:,} documents -> {out_path} "
                  f"({stats['seconds']} s)")
        out.print(f"skipped: {stats['skipped_no_aspect']:,} without aspect, {stats['skipped_no_entity']:,} without "
                  f"entity; mentions kept {stats['affirmed_mentions']:,}, dropped by ConText "
                  f"{sum(stats['dropped_mentions'].values()):,} ({stats['dropped_share']:.1%}): {stats['dropped_mentions']}")
        if exclusion is not None:
            out.print(f"excluded {exclusion.excluded_docs} medquad-cdv test documents, "
                      f"{exclusion.excluded_passages} passages repeating a test passage"
                      + (f" and {exclusion.excluded_by_entity} sharing a test entity" if strict else ""))
        for name, key in (("entities", "top_entities"), ("aspects", "top_aspects")):
            table = Table(title=f"top {name} ({stats['distinct_' + name]:,} distinct)")
            table.add_column(name[:-1] if name == "aspects" else "entity")
            table.add_column("passages", justify="right")
            for label, count in stats[key]:
                table.add_row(escape(label), f"{count:,}")
            out.print(table)

    _run_guarded(run)


@app.command("train")
def train_cmd(
    kind: str = typer.Argument(..., help="bi | poly | cross | cdv (from labels) | tsdae (corpus) | cases (distant supervision) | "
                      "diagnoses (case encoder from coded and mentioned diagnoses)"),
    source: Optional[str] = typer.Argument(None, help="tsdae: the corpus (file, folder, or cases:DATA_DIR for the local case corpus)."),
    labels: Optional[Path] = typer.Option(None, "--labels", "-l", help="Labels JSONL from `capr labels` (bi, poly, cross, cdv)."),
    question_pairs_dir: Optional[Path] = typer.Option(None, "--question-pairs", help="bi, poly, cross: also train on the question pairs "
                                             "in this data folder (MedQuAD, RQE, Curai MQP; capr.labels.questions), "
                                             "or on them alone without --labels."),
    question_max_length: Optional[int] = typer.Option(None, "--query-max-length", help="Query tokens the model reads "
                                                      "in training (default 48)."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Folder for the trained model (replaced atomically)."),
    base_model: Optional[str] = typer.Option(None, "--base-model", help="'minilm' (bundled, the default), an HF model "
                                             "id or a path; cross with --first-stage: that bi-encoder."),
    first_stage: Optional[Path] = typer.Option(None, "--first-stage", help="cross: the trained bi-encoder it re-ranks; "
        "the cross-encoder learns a correction to its scores on its hard negatives and is saved with it."),
    max_steps: int = typer.Option(300, "--max-steps"),
    time_budget: Optional[float] = typer.Option(None, "--time-budget", help="Minutes; stops and keeps the best checkpoint."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Queries per step (default: bi/poly 32, cross 8)."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Learning rate (default: bi/poly 5e-5, cross 3e-5)."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Tokens the model reads (default 128; cases 256: description + passage)."),
    shared: bool = typer.Option(True, "--shared/--separate", help="bi: one encoder with [QUERY]/[PASSAGE] markers, or two."),
    multi_positive: bool = typer.Option(True, "--multi-positive/--no-multi-positive",
                                        help="Mask in-batch passages that also answer the query."),
    hard_negatives: Optional[int] = typer.Option(None, "--hard-negatives", help="BM25 negatives per query (default: bi/poly 1, cross 2)."),
    sentence_selection: Optional[bool] = typer.Option(None, "--sentence-selection/--truncate",
        help="SPBERTQA: long passages keep their BM25-best sentences (default: on for cross, off for bi/poly, "
             "whose passages are encoded without the query at indexing)."),
    context: Optional[str] = typer.Option(None, "--context", help="Document context read with each passage: off | title | "
                                "title+heading (indexes built with the model read passages the same way; default off, "
                                "or the --first-stage model's)."),
    context_dropout: Optional[float] = typer.Option(None, "--context-dropout", help="Share of training passages read "
                                                    "without their context (title-less corpora must still work; default 0)."),
    group_batches: bool = typer.Option(False, "--group-batches", help="Batches of whole documents' passages: the "
                                       "same document's other passages become in-batch negatives."),
    question_prob: float = typer.Option(0.3, "--question-prob", help="Share of training queries phrased as questions."),
    poly_codes: int = typer.Option(16, "--poly-codes"),
    eval_every: int = typer.Option(50, "--eval-every"),
    patience: int = typer.Option(4, "--patience"),
    seed: int = typer.Option(13, "--seed"),
    device: Optional[str] = typer.Option(None, "--device", help="cpu | cuda (default: cuda when present)."),
    encoder_backend: str = typer.Option("torch", "--encoder-backend",
                                        help="cdv: backend of the frozen sentence encoder (torch | onnx | onnx-int8 | static)."),
    as_json: bool = typer.Option(False, "--json"),
    index_dir: Optional[Path] = typer.Option(None, "--index", help="cases: the case index (built with --dense on the TSDAE encoder)."),
    data_dir: Path = typer.Option(Path("../shared/data"), "--data-dir", help="cases: folder with rqe, headqa_en, medmcqa_dev, "
                                  "medqa_usmle; diagnoses: folder with codiesp and e3c_english."),
    codes_only: bool = typer.Option(False, "--codes-only", help="diagnoses: only the coded CodiEsp train cases, no "
                                    "masked mentions from uncoded cases."),
    stage: str = typer.Option("all", "--stage", help="cases: pretrain (RQE) | distant (S+/S- fine-tuning) | all | "
                              "candidates (save steps 1-2 for S+/S- to the file --out, to train where the index is not)."),
    candidates: Optional[Path] = typer.Option(None, "--candidates", help="cases --stage distant|all: S+/S- from "
                                              "candidates saved by --stage candidates (no --index needed)."),
    pretrained: Optional[Path] = typer.Option(None, "--pretrained", help="cases --stage distant: the RQE cross-encoder."),
    questions: int = typer.Option(600, "--questions", help="cases: training questions sampled for S+/S-."),
    top_k: int = typer.Option(1, "--top-k", help="cases: supports per (question, option) kept for S+/S- (paper: 1, 5, 10)."),
    dense_k: int = typer.Option(20, "--dense-k", help="cases: dense depth re-ranked by the pre-trained cross-encoder."),
    sentences: int = typer.Option(100_000, "--sentences", help="tsdae: most corpus sentences used."),
) -> None:
    """Train a bi-, poly- or cross-encoder or a CDV model from self-supervised labels (no annotation); `tsdae`:
    adapt the encoder to a corpus; `cases`: the similar-case cross-encoder (RQE pre-training, then distant supervision);
    `diagnoses`: the case encoder of `capr cases similar` (a case near the names of its diagnoses; CodiEsp dev unread)."""

    def run() -> None:
        from capr.train.args import OptionRange as R
        from capr.train.args import check_options

        # every numeric option, whichever kind reads it: refused before any data is read
        check_options([
            ("--max-steps", max_steps, R.count), ("--time-budget", time_budget, R.positive),
            ("--batch-size", batch_size, R.count), ("--lr", lr, R.rate), ("--max-length", max_length, R.count),
            ("--query-max-length", question_max_length, R.count), ("--hard-negatives", hard_negatives, R.count0),
            ("--context-dropout", context_dropout, R.share), ("--question-prob", question_prob, R.share),
            ("--poly-codes", poly_codes, R.count), ("--eval-every", eval_every, R.count), ("--patience", patience, R.count0),
            ("--seed", seed, R.seed), ("--questions", questions, R.count), ("--top-k", top_k, R.count),
            ("--dense-k", dense_k, R.count), ("--sentences", sentences, R.count)])
        if kind == "diagnoses":
            return _train_diagnoses(data_dir, out_dir, base_model or "minilm", codes_only, max_steps, time_budget,
                                    batch_size, lr, max_length, seed, device, as_json)

        if kind in ("tsdae", "cases"):
            return _train_cases(kind, source, out_dir, base_model or "minilm", max_steps, time_budget, batch_size, lr, max_length,
                                seed, device, index_dir, data_dir, stage, pretrained, questions, top_k, dense_k, candidates,
                                sentences, as_json)
        if labels is None and (question_pairs_dir is None or kind == "cdv"):
            raise CaprError(f"training a {kind} model needs --labels (from `capr labels`)"
                            + ("" if kind == "cdv" else " or --question-pairs DATA_DIR"))
        if kind == "cdv":
            return _train_cdv(labels, out_dir, base_model or "minilm", encoder_backend, max_steps, time_budget, batch_size, lr,
                              eval_every, patience, seed, device, as_json)
        _train_encoder(kind, labels, question_pairs_dir, out_dir, first_stage, as_json, dict(
            base_model=base_model, max_steps=max_steps, time_budget_min=time_budget, batch_size=batch_size, lr=lr,
            max_length=max_length, shared=shared, multi_positive=multi_positive, hard_negatives=hard_negatives,
            sentence_selection=sentence_selection, context=parse_context(context).value if context else None,
            question_prob=question_prob, poly_codes=poly_codes, eval_every=eval_every, patience=patience, seed=seed,
            device=device, query_max_length=question_max_length, context_dropout=context_dropout,
            group_batches=group_batches))

    _run_guarded(run)


def _train_encoder(kind: str, labels: Optional[Path], question_pairs_dir: Optional[Path], out_dir: Path,
                   first_stage: Optional[Path], as_json: bool, options: dict[str, Any]) -> None:
    """`capr train bi|poly|cross`: ``options`` are the TrainArgs fields given (None: the kind's default)."""
    from capr.train import ModelKind, TrainArgs, train

    try:
        mk = ModelKind(kind)
    except ValueError:
        raise CaprError(f"unknown model kind {kind!r}; choose bi, poly, cross, cdv, tsdae, cases or diagnoses") from None
    if options["max_steps"] < 1:
        raise CaprError("--max-steps must be at least 1")
    if first_stage is not None and mk is not ModelKind.cross:
        raise CaprError("--first-stage is for cross-encoders (capr train cross)")
    if first_stage is not None and not first_stage.is_dir():
        raise CaprError(f"--first-stage {first_stage}: no such model folder")
    args = TrainArgs.for_kind(  # options left unset (None) take the kind's defaults
        mk, **options, first_stage=str(first_stage) if first_stage else None,
        question_pairs=str(question_pairs_dir) if question_pairs_dir is not None else None)
    records: Any = labels
    if question_pairs_dir is not None:
        from capr.labels.questions import labels_with_question_pairs

        records = labels_with_question_pairs(labels, question_pairs_dir, log=lambda m: err.print(escape(m)))
    result = train(records, out_dir, args, progress=err.is_terminal, log=lambda m: err.print(escape(m)))
    _print_train_summary(f"{mk.value}-encoder", out_dir, result, as_json)


def _print_train_summary(label: str, out_dir: Path, result: Any, as_json: bool) -> None:
    summary = {"out": str(out_dir), "steps_run": result.steps, "kept_step": result.card.get("best_step", result.steps),
               "minutes": round(result.seconds / 60, 2), "stopped": result.stopped,
               "dev_start": result.card.get("dev_start"), "dev_best": result.best,
               "first_loss": result.losses[0] if result.losses else None,
               "last_loss": float(np.mean(result.losses[-10:])) if result.losses else None}
    if as_json:
        write_json(summary, indent=2, ensure_ascii=True)
    else:
        out.print(f"[bold]{label}[/] -> {out_dir}: {summary['steps_run']} steps in {summary['minutes']} min "
                  f"({summary['stopped']}); kept step {summary['kept_step']}, dev {summary['dev_best']}")


def _train_cdv(labels: Path, out_dir: Path, encoder: str, encoder_backend: str, max_steps: int, time_budget: Optional[float],
               batch_size: Optional[int], lr: Optional[float], eval_every: int, patience: int, seed: int,
               device: Optional[str], as_json: bool) -> None:
    from capr.cdv import CDVArgs, train_cdv
    from capr.models.encoder import parse_backend

    if max_steps < 1:
        raise CaprError("--max-steps must be at least 1")
    args = CDVArgs(encoder=encoder, encoder_backend=parse_backend(encoder_backend).value, max_steps=max_steps,
                   time_budget_min=time_budget, batch_docs=batch_size or 16, lr=lr if lr is not None else 1e-3, eval_every=eval_every if eval_every != 50 else 100, patience=patience, seed=seed,
                   device=device)
    result = train_cdv(labels, out_dir, args, progress=err.is_terminal, log=lambda m: err.print(escape(m)))
    _print_train_summary("cdv", out_dir, result, as_json)


def _train_diagnoses(data_dir: Path, out_dir: Path, base_model: str, codes_only: bool, max_steps: int,
                     time_budget: Optional[float], batch_size: Optional[int], lr: Optional[float],
                     max_length: Optional[int], seed: int, device: Optional[str], as_json: bool) -> None:
    from capr.cases.train_diagnoses import DiagnosisArgs, train_diagnoses

    defaults = DiagnosisArgs()
    args = DiagnosisArgs(base_model=base_model, max_steps=max_steps, time_budget_min=time_budget,
                         batch_size=batch_size or defaults.batch_size, lr=lr if lr is not None else defaults.lr,
                         max_length=max_length or defaults.max_length, seed=seed, device=device)
    result = train_diagnoses(data_dir, out_dir, args, codes_only=codes_only, progress=err.is_terminal,
                             log=lambda m: err.print(escape(m)))
    summary = {"out": str(out_dir), "steps": result.steps, "minutes": round(result.seconds / 60, 2),
               "stopped": result.stopped, "device": result.card.get("device"), "pairs": result.card.get("pairs"),
               "source": result.card.get("source"), "first_loss": result.losses[0],
               "last_loss": float(np.mean(result.losses[-20:]))}
    if as_json:
        write_json(summary, indent=2, ensure_ascii=True)
    else:
        out.print(f"[bold]diagnosis encoder[/] -> {escape(str(out_dir))}: {summary['steps']} steps in "
                  f"{summary['minutes']} min on {summary['device']} ({summary['stopped']}), {summary['pairs']:,} pairs; "
                  f"loss {summary['first_loss']:.3f} -> {summary['last_loss']:.3f} (mean of the last 20 steps)")


def _train_cases(kind, source, out_dir, base_model, max_steps, time_budget, batch_size, lr, max_length, seed, device,
                 index_dir, data_dir, stage, pretrained, questions, top_k, dense_k, candidates, sentences, as_json) -> None:
    from capr.cases.train import (
        CaseStage,
        DistantArgs,
        PairArgs,
        TsdaeArgs,
        corpus_sentences,
        distant_candidates,
        distant_pairs,
        train_pairs,
        train_tsdae,
    )

    say = lambda m: err.print(escape(m))  # noqa: E731
    if max_steps < 1:
        raise CaprError("--max-steps must be at least 1")
    if kind == "tsdae":
        if not source:
            raise CaprError("capr train tsdae needs a corpus: a file, a folder, or cases:DATA_DIR")
        args = TsdaeArgs(base_model=base_model, max_steps=max_steps, time_budget_min=time_budget,
                         batch_size=batch_size or 8, lr=lr if lr is not None else 3e-5, max_length=max_length or 128,
                         max_sentences=sentences, seed=seed, device=device)
        docs = _case_documents(source)
        sents = corpus_sentences((d.text for d in docs), args.max_sentences, seed)
        say(f"tsdae: {len(sents):,} sentences from {source}")
        rep = train_tsdae(sents, out_dir, args, log=say, source=source)
        summary = {"out": str(out_dir), "steps": rep.steps, "minutes": round(rep.seconds / 60, 2), "stopped": rep.stopped,
                   "sentences": len(sents), "first_loss": rep.losses[0], "last_loss": float(np.mean(rep.losses[-20:]))}
    else:
        try:
            st = CaseStage(stage)
        except ValueError:
            raise CaprError(f"unknown stage {stage!r}; choose pretrain, distant, all or candidates") from None
        dargs = DistantArgs(k=top_k, dense_k=dense_k, max_questions=questions, seed=seed)
        if st is CaseStage.candidates:
            from capr.cases.candidates import write_candidates

            if index_dir is None:
                raise CaprError("--stage candidates needs --index (the case index)")
            counts = write_candidates(distant_candidates(index_dir, data_dir, dargs, progress=err.is_terminal), out_dir)
            return _print_summary("candidates", out_dir, {"out": str(out_dir), **counts, "dense_k": dense_k}, as_json)
        pargs = dict(base_model=base_model, max_steps=max_steps, time_budget_min=time_budget, batch_size=batch_size or 8,
                     lr=lr if lr is not None else 2e-5, max_length=max_length or 256, seed=seed, device=device)
        summary = {"out": str(out_dir)}
        init = str(pretrained) if pretrained else None
        if st in (CaseStage.pretrain, CaseStage.all):
            from capr.cases.data import read_similarity_pairs

            pairs = read_similarity_pairs(data_dir)
            target = out_dir if st is CaseStage.pretrain else out_dir.with_name(out_dir.name + "-rqe")
            rep = train_pairs(pairs, target, PairArgs(**pargs), log=say, desc="rqe-pretrain",
                              card_extra={"data": "rqe/RQE_Train_8588_AMIA2016.xml.gz + mediqa2019 Task3 TrainingSet2"})
            summary["pretrain"] = {"out": str(target), "steps": rep.steps, "minutes": round(rep.seconds / 60, 2),
                                   "pairs": len(pairs), "stopped": rep.stopped}
            init = str(target)
        if st in (CaseStage.distant, CaseStage.all):
            if not init:
                raise CaprError("--stage distant needs --pretrained DIR (a cross-encoder from --stage pretrain)")
            saved = None
            if candidates is not None:
                from capr.cases.candidates import read_candidates

                saved = read_candidates(candidates)
            elif index_dir is None:
                raise CaprError("distant supervision needs --index (the case index) or --candidates FILE")
            pairs, stats = distant_pairs(index_dir, init, data_dir, dargs, log=say, candidates=saved,
                                         progress=err.is_terminal)
            rep = train_pairs(pairs, out_dir, PairArgs(**pargs), init=init, log=say, desc="distant",
                              card_extra={"distant": stats,
                                          "index": str(saved.header.get("index") if saved else index_dir)})
            summary["distant"] = {"steps": rep.steps, "minutes": round(rep.seconds / 60, 2), "pairs": len(pairs),
                                  "stopped": rep.stopped, **stats}
    _print_summary(kind, out_dir, summary, as_json)


def _print_summary(label: str, out_dir: Path, summary: dict, as_json: bool) -> None:
    if as_json:
        write_json(summary, indent=2, ensure_ascii=True)
    else:
        out.print(f"[bold]{label}[/] -> {escape(str(out_dir))}: {escape(json.dumps(summary))}")


def _case_documents(source: str):
    """A corpus spec: cases:DATA_DIR (every local text source, MedQuAD test documents excluded) or a path."""
    if source.startswith("cases:"):
        from capr.cases.data import case_corpus

        return case_corpus(source[len("cases:"):])
    return read_documents(Path(source), Format.auto)


@app.command("merge")
def merge_cmd(
    model_dir: Path = typer.Argument(..., help="A bi-encoder trained by `capr train bi`."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Folder for the merged model (written atomically)."),
    alpha: float = typer.Option(0.5, "--alpha", help="Share of the trained weights (0 = the start model, 1 = trained)."),
    start: Optional[str] = typer.Option(None, "--start", help="The model training started from (default: from the card)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Interpolate a trained bi-encoder's weights with its start model (WiSE-FT): keeps most of the in-domain
    gain and much of the start model's skill on free-text questions. Choose --alpha on dev data."""

    def body() -> None:
        from capr.train.merge import merge_with_start

        card = merge_with_start(model_dir, out_dir, alpha, start)
        m = card["merged"]
        if as_json:
            write_json({"out": str(out_dir), **m}, indent=None, ensure_ascii=True)
        else:
            typer.echo(f"merged {m['tensors_mixed']} tensors: {1 - alpha:.2f} × {m['start']} + {alpha:.2f} × {model_dir} → {out_dir}")

    _run_guarded(body)
