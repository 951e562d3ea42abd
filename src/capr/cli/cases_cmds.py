"""capr case-index / cases / cases similar: similar-case retrieval."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from capr.cli.common import _encoder_config, _fail, _print_write_summary, _run_guarded, app, out, write_to_store, write_json
from capr.corpus import Format, ReadReport, read_documents
from capr.corpus.segment import SegmenterConfig
from capr.errors import CaprError, QueryError
from capr.index import AnalyzerConfig, Index
from capr.store import BackendOptions


@app.command("case-index")
def case_index_cmd(
    out_dir: Path = typer.Option(..., "--out", "-o", help="Index directory (created, or replaced atomically)."),
    data_dir: Path = typer.Option(Path("../shared/data"), "--data-dir", help="Folder holding the data sets."),
    extra: List[Path] = typer.Option([], "--add", help="A user corpus (file or folder) indexed too (repeatable)."),
    max_tokens: int = typer.Option(120, help="Words per passage."),
    dense: bool = typer.Option(True, "--dense/--no-dense", help="Encode passages (needed by the dense and cross scorers)."),
    model: str = typer.Option("minilm", help="Encoder: a `capr train tsdae` folder, 'minilm', an HF id or a path."),
    max_length: int = typer.Option(256, help="Encoder max tokens."),
    encoder_backend: str = typer.Option("torch", "--encoder-backend", help="Encoder: torch (default) | onnx | "
                                        "onnx-int8 | static (model2vec, distilled locally: encodes the whole case "
                                        "corpus in minutes on a CPU)."),
    mtsamples_notes: Optional[int] = typer.Option(None, "--mtsamples-notes", help="Only the first N MTSamples notes (file order)."),
    sources: List[str] = typer.Option([], "--source", help="Only these local sources (repeatable): medquad, mtsamples, "
                                      "pubmedqa, medmcqa, e3c, codiesp, openstax (default: all)."),
    codiesp_splits: List[str] = typer.Option(["train", "background"], "--codiesp-split", help="CodiEsp splits indexed "
                                             "(repeatable; dev is held out for measuring similar cases)."),
) -> None:
    """Index the local case corpus: MedQuAD answers (test documents excluded), MTSamples notes, PubMedQA
    abstracts, MedMCQA explanations, E3C case narratives, CodiEsp coded cases, OpenStax sections, plus any
    --add corpus; then the disease profiles the likely diagnoses match (from the articles' headings and titles)."""

    def body() -> None:
        import itertools

        from capr.cases.data import CASE_SOURCES, case_corpus
        from capr.train.args import OptionRange as R
        from capr.train.args import check_options

        # taken as given: a negative --max-tokens indexed whole sections, a negative --mtsamples-notes no note
        check_options([("--max-tokens", max_tokens, R.count0), ("--max-length", max_length, R.count),
                       ("--mtsamples-notes", mtsamples_notes, R.count0)])
        docs = itertools.chain(case_corpus(data_dir, tuple(sources) or CASE_SOURCES, mtsamples_notes=mtsamples_notes,
                                           codiesp_splits=tuple(codiesp_splits)),
                               *(read_documents(p, Format.auto) for p in extra))
        store = BackendOptions().create(out_dir, segmenter=SegmenterConfig(max_tokens=max_tokens), analyzer=AnalyzerConfig(),
                                        dense=_encoder_config(dense, model, None, encoder_backend, max_length))
        secs = write_to_store(store, docs, "indexing the case corpus")
        _print_write_summary(f"indexed {store.stats()['documents']} documents", store, ReadReport(), secs)
        from capr.cases.similar import CaseFinder

        table = CaseFinder(Index.load(out_dir)).prepare().table
        out.print(f"profiles: {len(table):,} conditions from {len(table.rows):,} passages (what `capr cases similar` "
                  "matches the findings against)")

    _run_guarded(body)


def _read_description(text: str) -> str:
    try:
        is_file = len(text) < 4096 and "\n" not in text and Path(text).is_file()
    except OSError:  # a description longer than a file name can be
        is_file = False
    if not is_file and not any(c.isspace() for c in text.strip()) and (os.sep in text or text.endswith((".txt", ".md"))):
        # one word that names a file: a mistyped path, not a patient description to search for
        raise QueryError(f"{text}: no such file (give the patient description as text or an existing file)")
    if not is_file:
        return text
    try:
        return Path(text).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise QueryError(f"{text}: not UTF-8 text (byte {e.start}); save the patient description as UTF-8") from None
    except OSError as e:
        raise QueryError(f"{text}: cannot read the patient description ({e.strerror or e})") from None


cases_app = typer.Typer(help="Similar cases: rank hypotheses by their most similar case (no subcommand), or find "
                        "the patients most like a description (`capr cases similar`).")
app.add_typer(cases_app, name="cases")


@cases_app.callback(invoke_without_command=True)
def cases_cmd(
    ctx: typer.Context,
    index_dir: Optional[Path] = typer.Option(None, "--index", "-i", help="Case index (`capr case-index` or any `capr index --dense`)."),
    description: Optional[str] = typer.Option(None, "--description", "-d", help="Patient description: text, or a file holding it."),
    options: List[str] = typer.Option([], "--options", help="Hypotheses (diagnoses, drugs, tests), each once: --options A B C."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Cross-encoder from `capr train cases` (scorer cross)."),
    scorer: Optional[str] = typer.Option(None, "--scorer", help="bm25 | dense | cross | profile (default: cross with "
                                         "--model, else dense when the index has vectors, else bm25; profile: each "
                                         "option's disease profile matched against the description's findings)."),
    dense_k: int = typer.Option(50, "--dense-k", help="Supports per hypothesis kept by the encoder."),
    cross_k: int = typer.Option(50, "--cross-k", help="Of those, scored by the cross-encoder."),
    match: str = typer.Option("phrase", "--match", help="A passage mentions a hypothesis as a phrase, or by all its "
                              "words anywhere (words: finds long options that are rarely written verbatim)."),
    fallback: Optional[str] = typer.Option(None, "--fallback", help="A hypothesis no passage mentions is scored on the "
                                           "passages closest to its words (related, the default) or on its own text "
                                           "(text)."),
    explain: bool = typer.Option(False, "--explain", help="Show the variants searched and every scored support."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Rank hypotheses for a patient description by their most similar case in the corpus."""

    if ctx.invoked_subcommand is not None:
        return
    for flag, value in (("--index", index_dir), ("--description", description), ("--options", options)):
        if value is None or value == []:
            _fail(f"missing option {flag} (or a subcommand: capr cases similar \"DESCRIPTION\" --index DIR)")

    def body() -> None:
        from capr.cases import CasePipeline, CaseScorer
        from capr.cases.config import case_config

        index = Index.load(index_dir)
        try:
            chosen = CaseScorer(scorer) if scorer else None
        except ValueError:
            raise CaprError(f"unknown scorer {scorer!r}; choose bm25, dense, cross or profile") from None
        cfg = case_config(index.has_dense, str(model) if model else None, scorer=chosen, dense_k=dense_k,
                          cross_k=cross_k, match=match, fallback=fallback)
        sc = cfg.scorer
        text = _read_description(description)
        res = CasePipeline(index, cfg).rank(text, [o for o in options])
        if as_json:
            write_json(res.to_dict(explain))
            return
        table = Table(title=f"hypotheses · scorer {sc.value}")
        for col in ("rank", "hypothesis", "score", "found", "supporting case"):
            table.add_column(col, overflow="fold")
        for h in res.hypotheses:
            sup = f"({h.notice or 'scored on its disease profile and the passages naming it'})" if h.passage is None else \
                f"[{h.passage.doc_id}] {h.passage.text[:220]}{'…' if len(h.passage.text) > 220 else ''}" + \
                (f" ({h.notice})" if h.notice else "")
            table.add_row(str(h.rank), escape(h.hypothesis), f"{h.score:.3f}", f"{h.candidates}" if h.found else "no",
                          escape(sup))
        out.print(table)
        if explain:
            for h in res.hypotheses:
                out.print(f"[bold]{escape(h.hypothesis)}[/]: variants {escape(str(h.variants))}")
                for s in h.supports[:10]:
                    out.print(f"  {s.passage.pid}  bm25 {s.bm25:.2f}  dense {s.dense if s.dense is None else round(s.dense, 3)}"
                              f"  cross {s.cross if s.cross is None else round(s.cross, 3)}")

    _run_guarded(body)


@cases_app.command("similar")
def similar_cmd(
    description: str = typer.Argument(..., help="Patient description: text, or a file holding it."),
    index_dir: Path = typer.Option(..., "--index", "-i", help="Case index (`capr case-index`, or any index of notes)."),
    k: int = typer.Option(10, "--k", "-k", help="Cases to return."),
    retriever: str = typer.Option("auto", "--retriever", "-r", help="auto (hybrid with vectors, else bm25) | bm25 | "
                                  "dense | hybrid."),
    sources: List[str] = typer.Option([], "--source", help="Only cases of these sources (repeatable; default: "
                                      "every patient description: all but the reference texts of MedQuAD, MedMCQA, "
                                      "OpenStax and PubMedQA)."),
    labelled: bool = typer.Option(False, "--labelled", help="Only cases that carry diagnosis codes."),
    evidence: int = typer.Option(2, "--evidence", help="Sentences per case that make it similar."),
    diagnoses: int = typer.Option(10, "--diagnoses", help="Likely diagnoses and likely codes to list (0: none): the "
                                  "conditions whose profiles, passages and similar coded cases match the description's "
                                  "findings, and the codes a coder would assign as the similar coded cases were coded."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Patients like this one: first the findings read from the description and the differential diagnosis (the
    conditions whose profiles, passages and similar coded cases match them, each with the findings for and against
    it), the likely codes (for coding: as the most similar coded cases were coded, symptoms included), then the most
    similar cases, their diagnoses (ICD-10-CM codes and names where labelled, the ICD-10-CM names
    the text mentions otherwise) and the sentences that make them similar."""

    def body() -> None:
        from capr.cases.similar import CaseFinder

        finder = CaseFinder(Index.load(index_dir), tuple(sources) or None)
        if diagnoses < 0:
            _fail(f"--diagnoses must be 0 or more, got {diagnoses}")
        res = finder.similar(_read_description(description), k=k, retriever=retriever, evidence=evidence,
                             labelled_only=labelled, diagnoses=diagnoses)
        if as_json:
            write_json(res.to_dict())
            return
        for note in res.notices:
            out.print(f"note: {escape(note)}")
        _print_findings(res.findings)
        _print_differential(res.diagnoses)
        _print_codes(res.codes)
        if not res.cases:
            out.print("no similar case found")
        for c in res.cases:
            out.print(f"[bold]{c.rank}. {escape(c.doc_id)}[/] ({escape(c.source or 'case')}, score {c.score:.3f})")
            head = "diagnoses" if c.labelled else "mentions"
            dx = "; ".join(f"{d.code} {d.name}" if d.code else d.name for d in c.diagnoses) or "none found"
            out.print(f"   {head}: {escape(dx)}")
            for e in c.evidence:
                out.print(f"   ≈ {escape(e.sentence[:300])}")
                out.print(f"     [dim]matches: {escape(e.query_sentence[:200])} (shared: {escape(', '.join(e.shared[:8]))})[/]")

    _run_guarded(body)


def _print_findings(found) -> None:
    if found is None or not found.findings:
        return
    ctx = found.context
    who = ", ".join(x for x in (f"{ctx.age:g} years" if ctx.age is not None else "", ctx.sex or "") if x)
    out.print(f"[bold]findings[/]{f' ({escape(who)})' if who else ''}: "
              + "; ".join(escape(("no " if f.negated else "") + f.label) for f in found.findings))


def _print_codes(codes) -> None:
    """The coder's list: codes as the most similar coded cases were coded, symptoms among them."""
    if not codes:
        return
    out.print("[bold]likely codes[/] (for coding: as the most similar coded cases were coded, symptoms included):")
    for c in codes:
        carried = f" [dim](carried by {c.cases} of the 20 most similar coded cases)[/]" if c.cases else ""
        out.print(f"  {c.rank}. {escape(c.code)} {escape(c.name)}{carried}")


def _print_differential(diagnoses) -> None:
    """The differential: conditions first, then (labelled) coded symptoms; each with what supports it."""
    if not diagnoses:
        return
    out.print("[bold]differential diagnosis[/] (conditions whose profiles, passages and similar coded cases match "
              "the findings):")
    for d in diagnoses:
        label = {"finding": " [dim](a finding, not a diagnosis)[/]",
                 "factor": " [dim](a factor of the case, not a diagnosis)[/]"}.get(d.kind, "")
        code = f"{escape(d.code)} " if d.code else ""
        out.print(f"  {d.rank}. {code}{escape(d.name)}{label}")
        for e in d.supporting:
            out.print(f"     [green]+[/] {escape(e.finding)}: “{escape(e.sentence[:200])}” [dim]({escape(e.doc_id)})[/]")
        for e in d.against:
            out.print(f"     [red]−[/] no {escape(e.finding)}: “{escape(e.sentence[:200])}” [dim]({escape(e.doc_id)})[/]")
        if d.cases:
            out.print(f"     [dim]carried by {d.cases} of the 20 most similar coded cases ({escape(', '.join(d.case_ids))})[/]")
