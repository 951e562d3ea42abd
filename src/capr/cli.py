"""The `capr` command line."""

from __future__ import annotations

import json
from functools import partial
import sys
import time
from contextlib import nullcontext
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, List, Optional

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from capr.corpus import Format, ReadReport, read_documents
from capr.corpus.segment import SegmenterConfig, segment
from capr.errors import CaprError, QueryError
from capr.models.context import parse_context
from capr.index import AnalyzerConfig, Index, IndexWriter, Retriever
from capr.index.index import DEFAULT_TEMPLATE, TEMPLATES, query_tokens
from capr.models.encoder import EncoderConfig, cache_root, parse_backend
from capr.retrieve.fusion import FusionConfig, FusionMethod
from capr.records import Query, ScoredPassage
from capr.retrieve.highlight import snippet

app = typer.Typer(add_completion=False, no_args_is_help=True, help="capr: clinical and health answer-passage retrieval.")
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def _progress(transient: bool = False) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=err,
        transient=transient,
    )


def _item_progress(label: str):
    """A function that yields the items of a sized sequence, advancing a transient progress bar."""

    def progress(items):
        with _progress(transient=True) as p:
            task = p.add_task(label, total=len(items), note="")
            for item in items:
                yield item
                p.advance(task)

    return progress


def _run_guarded(fn):
    """Runs a command body; user errors become one clean line, never a traceback."""
    try:
        return fn()
    except CaprError as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("interrupted", 130)


# --------------------------------------------------------------------------- index
class _WriteProgress:
    """Feeds IndexWriter's phases (reading, encoding, writing) into one rich progress display."""

    def __init__(self, progress: Progress | None, label: str) -> None:
        self.p = progress
        self.read_task = progress.add_task(label, total=None, note="") if progress else None
        self.enc_task = None

    def __call__(self, what: str) -> None:
        if self.p is None:
            return
        if what.startswith("encoding"):
            total = int(what.split()[1])
            self.enc_task = self.p.add_task("encoding passages", total=total, note="")
        else:
            self.p.update(self.read_task, note=what)

    def advance_encoding(self, n: int) -> None:
        if self.p is not None and self.enc_task is not None:
            self.p.advance(self.enc_task, n)

    def read(self, n_passages: int) -> None:
        if self.p is not None:
            self.p.update(self.read_task, advance=1, note=f"{n_passages} passages")


def write_documents(
    writer_args: dict,
    documents: Iterable,
    label: str,
    quiet: bool = False,
    deletes: Iterable[str] = (),
) -> tuple[Index, float]:
    """Runs an IndexWriter over documents (and deletions) with a progress display; returns the new snapshot."""
    t0 = time.time()
    with (_progress() if not quiet else nullcontext()) as progress:
        track = _WriteProgress(progress, label)
        writer = IndexWriter(progress=track, **writer_args)
        try:
            for doc_id in deletes:
                writer.delete(doc_id)
            for doc in documents:
                writer.add(doc)
                track.read(writer.n_passages)
            index = writer.commit()
        except BaseException:
            writer.abort()
            raise
    return index, time.time() - t0


def index_source(
    source: Path,
    out_dir: Path,
    fmt: Format,
    segmenter: SegmenterConfig,
    analyzer: AnalyzerConfig,
    skip_bad: bool,
    quiet: bool = False,
    dense: EncoderConfig | None = None,
) -> tuple[Index, ReadReport, float]:
    report = ReadReport(skip_bad=skip_bad)
    docs = read_documents(source, fmt, report)
    args = dict(root=out_dir, segmenter=segmenter, analyzer=analyzer, report=report, dense=dense)
    index, secs = write_documents(args, docs, f"indexing {source.name}", quiet)
    return index, report, secs


def _print_write_summary(verb: str, index: Index, report: ReadReport, secs: float, out_dir: Path) -> None:
    c = index.counts
    err.print(
        f"{verb} → index now has [bold]{c['documents']}[/] documents, [bold]{c['passages']}[/] passages "
        f"({c['vocabulary']} terms) in {secs:.1f}s at {escape(str(out_dir))}; {report.summary()}"
    )
    for e in report.skipped[:50]:
        err.print(f"  [yellow]skipped[/] {escape(str(e))}")
    if len(report.skipped) > 50:
        err.print(f"  … and {len(report.skipped) - 50} more")


def _encoder_config(dense: bool, model: str, query_model: Optional[str], backend: str, max_length: int) -> EncoderConfig | None:
    if not dense:
        return None
    return EncoderConfig(model=model, query_model=query_model, backend=parse_backend(backend), max_length=max_length)


# --------------------------------------------------------------------------- index backends
ENCODER_BACKENDS = ("torch", "onnx", "onnx-int8", "static")
BACKEND_HELP = "Index backend: embedded (an index directory, default) or milvus (a collection on the Milvus at --uri)."
URI_HELP = "Milvus: a Milvus Lite file (*.db) or http(s)://host:19530 (standalone or cluster; https = TLS)."
TOKEN_HELP = "Milvus token ('user:password' or an API key); prefer $CAPR_MILVUS_TOKEN (command lines are visible in ps)."
CA_HELP = "Milvus TLS: PEM file of a private CA that signed the server certificate (with an https:// --uri)."


def split_backend(backend: str, encoder_backend: Optional[str]) -> tuple[str, str]:
    """(index backend, encoder backend). ``--backend`` names the index backend (embedded | milvus); before
    issue 7 it named the encoder on `capr index` and `capr eval`, so an encoder name there still means the
    encoder (the two sets of names do not overlap) and a note points to ``--encoder-backend``."""
    if backend in ENCODER_BACKENDS:
        if encoder_backend and encoder_backend != backend:
            raise CaprError(f"--backend {backend} (an encoder) conflicts with --encoder-backend {encoder_backend}")
        err.print(f"[yellow]note:[/] --backend {backend} names an encoder; it is now spelled --encoder-backend {backend} "
                  "(--backend is the index backend: embedded | milvus)")
        return "embedded", backend
    if backend not in ("embedded", "milvus"):
        raise CaprError(f"unknown --backend {backend!r}: index backends are embedded, milvus "
                        f"(encoders go to --encoder-backend: {', '.join(ENCODER_BACKENDS)})")
    return backend, encoder_backend or "torch"


def _milvus_options(tls_ca: Optional[Path]) -> dict:
    if tls_ca is None:
        return {}
    if not tls_ca.is_file():
        raise CaprError(f"--tls-ca {tls_ca}: no such file")
    return {"secure": True, "ca_pem_path": str(tls_ca)}


def open_any(name: Path, backend: str, uri: Optional[str], token: Optional[str], tls_ca: Optional[Path] = None):
    """The index to search or update: the directory (embedded) or the collection (milvus)."""
    from capr.store import open_store

    if backend == "embedded":
        if uri:
            raise CaprError("--uri is only for --backend milvus")
        return Index.load(name)
    return open_store(str(name), "milvus", uri=uri, token=token, **_milvus_options(tls_ca))


def _store_summary(verb: str, store, report: ReadReport, secs: float) -> None:
    c = store.counts()
    err.print(f"{verb} → collection [bold]{escape(store.name)}[/] on {escape(store.uri)} now has [bold]{c['documents']}[/] "
              f"documents, [bold]{c['passages']}[/] passages, in {secs:.1f}s; {report.summary()}")
    for e in report.skipped[:50]:
        err.print(f"  [yellow]skipped[/] {escape(str(e))}")


def _store_add(store, docs, label: str) -> int:
    with _progress() as p:
        task = p.add_task(label, total=None, note="")
        return store.add(docs, progress=lambda n: p.advance(task, n))


@app.command("index")
def index_cmd(
    source: Path = typer.Argument(..., help="File or directory to index."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Index directory (created, or replaced atomically)."),
    fmt: Format = typer.Option(Format.auto, "--format", "-f", help="Input format."),
    max_tokens: int = typer.Option(200, help="Split sections into passages of at most this many words (0: never)."),
    overlap: int = typer.Option(0, help="Words of trailing sentences repeated at the start of the next passage."),
    language: str = typer.Option("english", help="Analyzer language (stopwords, stemming)."),
    lowercase: bool = typer.Option(True, help="Fold case."),
    stopwords: bool = typer.Option(True, help="Remove stopwords."),
    stem: bool = typer.Option(True, help="Snowball stemming."),
    title: bool = typer.Option(True, help="Index each passage together with its document title."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip malformed files/records and report them."),
    dense: bool = typer.Option(False, "--dense", help="Also encode passages for dense and hybrid search."),
    model: str = typer.Option("minilm", help="Encoder: 'minilm' (bundled), any Hugging Face id, or a local path."),
    query_model: Optional[str] = typer.Option(None, help="Separate query encoder (MedCPT-style); default: --model."),
    encoder_backend: Optional[str] = typer.Option(None, "--encoder-backend", help="Encoder: torch (default) | onnx | onnx-int8 | static (model2vec, distilled locally)."),
    max_length: int = typer.Option(256, help="Encoder max tokens per passage."),
    backend: str = typer.Option("embedded", "--backend", help=BACKEND_HELP + " --out is then the collection name."),
    uri: Optional[str] = typer.Option(None, "--uri", help=URI_HELP),
    token: Optional[str] = typer.Option(None, "--token", "--milvus-token", envvar="CAPR_MILVUS_TOKEN", help=TOKEN_HELP),
    tls_ca: Optional[Path] = typer.Option(None, "--tls-ca", help=CA_HELP),
    milvus_index: str = typer.Option("FLAT", "--milvus-index", help="Milvus vector index: FLAT (exact, default) | HNSW | IVF_FLAT | AUTOINDEX."),
) -> None:
    """Read SOURCE, split it into passages and build a persistent index (BM25/TF-IDF, optionally dense)."""

    def body() -> None:
        if overlap < 0 or max_tokens < 0:
            raise CaprError("--max-tokens and --overlap must be >= 0")
        store_backend, enc_backend = split_backend(backend, encoder_backend)
        seg = SegmenterConfig(max_tokens=max_tokens, overlap=overlap, include_title=title)
        ana = AnalyzerConfig(language=language, lowercase=lowercase, stopwords=stopwords, stem=stem)
        enc = _encoder_config(dense, model, query_model, enc_backend, max_length)
        if store_backend == "milvus":
            from capr.store import create_store

            t0 = time.time()
            store = create_store(str(out_dir), "milvus", uri=uri, token=token, segmenter=seg, analyzer=ana, dense=enc,
                                 index_type=milvus_index, **_milvus_options(tls_ca))
            report = ReadReport(skip_bad=skip_bad)
            _store_add(store, read_documents(source, fmt, report), f"indexing {source.name} into Milvus")
            _store_summary("indexed", store, report, time.time() - t0)
            return
        if uri:
            raise CaprError("--uri is only for --backend milvus")
        index, report, secs = index_source(source, out_dir, fmt, seg, ana, skip_bad, dense=enc)
        _print_write_summary(f"indexed {index.counts['documents']} documents", index, report, secs, out_dir)

    _run_guarded(body)


@app.command("add")
def add_cmd(
    index_dir: Path = typer.Argument(..., help="Existing index directory."),
    source: Path = typer.Argument(..., help="File or directory with documents to add (same id = replace)."),
    fmt: Format = typer.Option(Format.auto, "--format", "-f"),
    skip_bad: bool = typer.Option(False, "--skip-bad"),
    backend: str = typer.Option("embedded", "--backend", help=BACKEND_HELP + " INDEX_DIR is then the collection name."),
    uri: Optional[str] = typer.Option(None, "--uri", help=URI_HELP),
    token: Optional[str] = typer.Option(None, "--token", "--milvus-token", envvar="CAPR_MILVUS_TOKEN", help=TOKEN_HELP),
    tls_ca: Optional[Path] = typer.Option(None, "--tls-ca", help=CA_HELP),
) -> None:
    """Add documents to an index without rebuilding it; a document with an existing id replaces it."""

    def body() -> None:
        report = ReadReport(skip_bad=skip_bad)
        store_backend, _ = split_backend(backend, None)
        if store_backend == "milvus":
            t0 = time.time()
            store = open_any(index_dir, store_backend, uri, token, tls_ca)
            _store_add(store, read_documents(source, fmt, report), f"adding {source.name}")
            _store_summary("added", store, report, time.time() - t0)
            return
        args = dict(root=index_dir, report=report, mode="update")
        index, secs = write_documents(args, read_documents(source, fmt, report), f"adding {source.name}")
        _print_write_summary("added", index, report, secs, index_dir)

    _run_guarded(body)


@app.command("delete")
def delete_cmd(
    index_dir: Path = typer.Argument(..., help="Existing index directory."),
    doc_ids: List[str] = typer.Option(..., "--doc-id", help="Document id to delete (repeatable)."),
    backend: str = typer.Option("embedded", "--backend", help=BACKEND_HELP + " INDEX_DIR is then the collection name."),
    uri: Optional[str] = typer.Option(None, "--uri", help=URI_HELP),
    token: Optional[str] = typer.Option(None, "--token", "--milvus-token", envvar="CAPR_MILVUS_TOKEN", help=TOKEN_HELP),
    tls_ca: Optional[Path] = typer.Option(None, "--tls-ca", help=CA_HELP),
) -> None:
    """Delete documents (all their passages) from an index without rebuilding it."""

    def body() -> None:
        store_backend, _ = split_backend(backend, None)
        if store_backend == "milvus":
            t0 = time.time()
            store = open_any(index_dir, store_backend, uri, token, tls_ca)
            store.delete(doc_ids)
            _store_summary(f"deleted {len(doc_ids)} document(s)", store, ReadReport(), time.time() - t0)
            return
        args = dict(root=index_dir, mode="update")
        index, secs = write_documents(args, [], "deleting", quiet=True, deletes=doc_ids)
        _print_write_summary(f"deleted {len(doc_ids)} document(s)", index, ReadReport(), secs, index_dir)

    _run_guarded(body)


# --------------------------------------------------------------------------- search
def _parse_filters(filters: list[str]) -> list:
    """--filter clauses: FIELD=VALUE, FIELD!=VALUE, FIELD>=VALUE (<=, >, <), FIELD in (A, B) (capr.filters)."""
    from capr.filters import parse_filters

    return parse_filters(filters)


def result_dict(index: Index, hit: ScoredPassage, terms: set[str]) -> dict:
    p = hit.passage
    assert p is not None
    snip = snippet(p.text, terms, index.analyzer)
    return {
        "rank": hit.rank,
        "pid": p.pid,
        "doc_id": p.doc_id,
        "title": p.title,
        "aspect": p.aspect,
        "heading": p.heading,
        "score": round(hit.score, 4),
        "start": p.start,
        "end": p.end,
        "text": p.text,
        "snippet": snip.text,
        "snippet_start": snip.start,
        "highlights": [[a + snip.start + p.start, b + snip.start + p.start] for a, b in snip.highlights],
        "metadata": p.metadata,
    }


def _evidence(index: Index, store, q: Query, passages: list, method: str, thetas: tuple[float, float], expand: bool):
    from capr.retrieve.evidence import dense_sentence_scores, lexical_sentence_scores

    if method == "cdv":
        from capr.cdv.search import evidence_sentences
        from capr.cdv.spans import BoundaryConfig

        qv = store.query(q.entity, q.aspect)
        return [evidence_sentences(store, p, qv, BoundaryConfig(*thetas)) for p in passages]
    if method == "dense":
        if not index.has_dense:
            raise QueryError("--evidence dense needs an index built with --dense")
        return dense_sentence_scores(index, q, passages)
    return [lexical_sentence_scores(index, q, p, expand) for p in passages]


def render_spans(spans: list, console: Console = out) -> None:
    if not spans:
        console.print("[yellow]no answer span reached θ_open[/]")
        return
    for h in spans:
        console.print(Text.assemble((f"{h.rank:>2}. ", "bold"), (h.title or h.doc_id, "bold cyan"), ("  ·  ", "dim"),
                                    (f"score {h.score:.3f}", "green"), ("  ·  ", "dim"),
                                    (f"chars {h.start}–{h.end}, {len(h.sentences)} sentences", "dim")))
        console.print(Text("    " + " ".join(h.text.split())[:600], style="yellow"))
        console.print()


def render_results(index: Index, results: list[dict], console: Console = out) -> None:
    if not results:
        console.print("[yellow]no matching passages[/]")
        return
    for r in results:
        head = Text.assemble(
            (f"{r['rank']:>2}. ", "bold"),
            (r["title"] or r["doc_id"], "bold cyan"),
            ("  ·  ", "dim"),
            (r["aspect"] or "—", "magenta"),
            ("  ·  ", "dim"),
            (f"score {r['score']:.3f}", "green"),
            ("  ·  ", "dim"),
            (r["pid"], "dim"),
        )
        console.print(head)
        snip = Text(r["snippet"].replace("\n", " "))
        base = r["start"] + r["snippet_start"]
        for a, b in r["highlights"]:
            snip.stylize("bold yellow", a - base, b - base)
        prefix = "… " if r["snippet_start"] > 0 else ""
        console.print(Text("    " + prefix) + snip + Text(" …" if len(r["snippet"]) + r["snippet_start"] < len(r["text"]) else ""))
        for sent in r.get("sentences", []):
            if sent["evidence"]:
                console.print(Text.assemble(("    ▸ ", "bold yellow"), (" ".join(sent["text"].split()), "bold yellow"),
                                            (f"  ({sent['score']:.3f})", "dim")))
        console.print()


@app.command("search")
def search_cmd(
    index_dir: Path = typer.Argument(..., help="Index directory."),
    query: Optional[str] = typer.Argument(None, help="Free-text question."),
    entity: Optional[str] = typer.Option(None, "--entity", "-e", help="Entity of a structured question."),
    aspect: Optional[str] = typer.Option(None, "--aspect", "-a", help="Aspect of a structured question."),
    k: int = typer.Option(10, "-k", help="Number of passages."),
    filters: List[str] = typer.Option([], "--filter", help="FIELD=VALUE (repeatable, ANDed); also !=, >=, <=, >, < and 'FIELD in (A, B)', e.g. aspect=symptoms, \"charttime>=2150-01-01\"."),
    retriever: Retriever = typer.Option(Retriever.bm25, "--retriever", "-r"),
    expand: bool = typer.Option(True, help="Expand the aspect with its synonyms."),
    aspect_boost: float = typer.Option(0.5, help="Score bonus (×(1+b)) for passages from the section aspect asked about; 0 turns it off."),
    fusion: FusionMethod = typer.Option(FusionMethod.rrf, help="How --retriever hybrid fuses BM25 and dense: rrf or weighted."),
    template: str = typer.Option(DEFAULT_TEMPLATE, help=f"How ⟨entity, aspect⟩ becomes text for the dense encoder: {', '.join(TEMPLATES)}."),
    reranker: Optional[str] = typer.Option(None, "--reranker", help="Second stage on the retriever's top hits: cross:DIR, poly:DIR or bi:DIR."),
    rerank_depth: int = typer.Option(20, "--rerank-depth", help="First-stage hits the re-ranker re-orders."),
    cdv: Optional[Path] = typer.Option(None, "--cdv", help="Rank ⟨entity, aspect⟩ questions with a CDV model (from `capr train cdv`)."),
    boundaries: str = typer.Option("passages", "--boundaries", help="passages (the index's own) or free (CDV spans; needs --cdv)."),
    theta_open: float = typer.Option(0.8, "--theta-open", help="Free boundaries: a span opens at this (document-scaled) sentence score."),
    theta_close: float = typer.Option(0.4, "--theta-close", help="Free boundaries: a span closes below this score."),
    evidence: Optional[str] = typer.Option(None, "--evidence", help="Score each result's sentences and mark the evidence: "
                                           "lexical, dense (index built with --dense) or cdv (needs --cdv)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    backend: str = typer.Option("embedded", "--backend", help=BACKEND_HELP + " INDEX_DIR is then the collection name."),
    uri: Optional[str] = typer.Option(None, "--uri", help=URI_HELP),
    token: Optional[str] = typer.Option(None, "--token", "--milvus-token", envvar="CAPR_MILVUS_TOKEN", help=TOKEN_HELP),
    tls_ca: Optional[Path] = typer.Option(None, "--tls-ca", help=CA_HELP),
) -> None:
    """Search an index with a free-text question or an ⟨entity, aspect⟩ pair."""

    def body() -> None:
        if not (query and query.strip()) and not (entity and entity.strip()) and not (aspect and aspect.strip()):
            raise QueryError("empty query: give a question, or --entity and/or --aspect")
        if boundaries not in ("passages", "free"):
            raise QueryError(f"unknown --boundaries {boundaries!r}; choose passages or free")
        if evidence not in (None, "lexical", "dense", "cdv"):
            raise QueryError(f"unknown --evidence {evidence!r}; choose lexical, dense or cdv")
        if (boundaries == "free" or evidence == "cdv") and cdv is None:
            raise QueryError(f"{'--boundaries free' if boundaries == 'free' else '--evidence cdv'} needs a CDV model: add --cdv DIR")
        if k <= 0:
            raise QueryError(f"k must be positive, got {k}")
        q = Query("cli", text=query or None, entity=entity or None, aspect=aspect or None)
        index = open_any(index_dir, split_backend(backend, None)[0], uri, token, tls_ca)
        if (cdv is not None or evidence) and not isinstance(index, Index):
            raise QueryError("--cdv and --evidence need the embedded index (--backend embedded)")
        cdv_store = _open_cdv_store(index, cdv) if cdv is not None else None
        if cdv_store is not None and boundaries == "free":
            from capr.cdv.search import free_search
            from capr.cdv.spans import BoundaryConfig

            spans = free_search(index, cdv_store, entity, aspect, k, BoundaryConfig(theta_open, theta_close))
            if as_json:
                payload = {"query": {"entity": q.entity, "aspect": q.aspect}, "retriever": "cdv", "boundaries": "free",
                           "results": [h.to_dict() for h in spans]}
                sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
            else:
                render_spans(spans)
            return
        second = None
        if reranker:
            from capr.retrieve.rerank import load_reranker, rerank_hits

            second = load_reranker(reranker)
        if cdv_store is not None:
            from capr.cdv.search import cdv_search

            hits = cdv_search(index, cdv_store, entity, aspect, max(k, rerank_depth) if second else k, _parse_filters(filters))
        else:
            hits = index.search(
                q, k=max(k, rerank_depth) if second else k, filters=_parse_filters(filters), retriever=retriever,
                expand=expand, aspect_boost=aspect_boost, fusion=FusionConfig(method=fusion), template=template,
            )
        if second is not None:
            from capr.index.index import dense_query_text

            hits = rerank_hits(dense_query_text(q, "plain"), hits, second, k)
        terms = set(query_tokens(index.analyzer, q, expand))
        results = [result_dict(index, h, terms) for h in hits]
        if evidence:
            for r, sents in zip(results, _evidence(index, cdv_store, q, [h.passage for h in hits], evidence,
                                                   (theta_open, theta_close), expand)):
                r["sentences"] = [x.to_dict() for x in sents]
        if as_json:
            payload = {
                "query": {"text": q.text, "entity": q.entity, "aspect": q.aspect},
                "retriever": "cdv" if cdv_store is not None else retriever.value,
                "reranker": reranker,
                "filters": [str(c) for c in _parse_filters(filters)],
                "results": results,
            }
            sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
        else:
            render_results(index, results)

    _run_guarded(body)


# --------------------------------------------------------------------------- eval
@app.command("eval")
def eval_cmd(
    benchmark: str = typer.Option("medquad-cdv", help="Benchmark name."),
    data_dir: Path = typer.Option(Path("../shared/data"), help="Folder holding the benchmark data sets."),
    retriever: Retriever = typer.Option(Retriever.bm25, "--retriever", "-r"),
    protocol: str = typer.Option("rerank64", help="rerank64 (CDV/CAPR) or full."),
    query_field: str = typer.Option("tuple", help="tuple (entity + aspect) or question."),
    run_out: Optional[Path] = typer.Option(None, help="Write the ranking as a TREC run file (case benchmarks: one JSON "
                                           "line per question: option scores, answer, supporting pids)."),
    cache_dir: Optional[Path] = typer.Option(None, help="Where the benchmark index is kept between runs."),
    model: str = typer.Option("minilm", help="Dense encoder (dense/hybrid): 'minilm', a Hugging Face id, or a path."),
    query_model: Optional[str] = typer.Option(None, help="Separate query encoder."),
    encoder_backend: Optional[str] = typer.Option(None, "--encoder-backend", help="Encoder: torch (default) | onnx | onnx-int8 | static."),
    backend: str = typer.Option("embedded", "--backend", help="Index backend that scores the retriever: embedded or milvus "
                                "(the benchmark's passages are loaded into a collection on --uri)."),
    uri: Optional[str] = typer.Option(None, "--uri", help=URI_HELP),
    token: Optional[str] = typer.Option(None, "--token", "--milvus-token", envvar="CAPR_MILVUS_TOKEN", help=TOKEN_HELP),
    tls_ca: Optional[Path] = typer.Option(None, "--tls-ca", help=CA_HELP),
    collection: Optional[str] = typer.Option(None, "--collection", help="Milvus collection for the benchmark (default: capr_bench_<benchmark>_<encoder>)."),
    template: str = typer.Option(DEFAULT_TEMPLATE, help=f"⟨entity, aspect⟩ → text for the encoder: {', '.join(TEMPLATES)}."),
    fusion: FusionMethod = typer.Option(FusionMethod.rrf, help="Hybrid fusion: rrf or weighted."),
    reranker: Optional[str] = typer.Option(None, "--reranker", help="Second stage: cross:DIR, poly:DIR or bi:DIR."),
    rerank_depth: int = typer.Option(64, "--rerank-depth", help="Candidates the re-ranker re-orders."),
    cdv: Optional[Path] = typer.Option(None, "--cdv", help="Rank with a CDV model (from `capr train cdv`) instead of --retriever."),
    boundaries: str = typer.Option("fixed", "--boundaries", help="fixed, or free: also score CDV free-boundary spans "
                                   "against the gold passages (character-overlap F1)."),
    theta_open: float = typer.Option(0.8, "--theta-open", help="Free boundaries: a span opens at this (document-scaled) sentence score."),
    theta_close: float = typer.Option(0.4, "--theta-close", help="Free boundaries: a span closes below this score."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    index_dir: Optional[Path] = typer.Option(None, "--index", help="Case benchmarks (medqa-dev, headqa, medmcqa-dev, headqa-dev): the case index."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Case benchmarks: a fixed random subset of N questions."),
    seed: int = typer.Option(0, "--seed", help="Seed of the --limit subset."),
    dense_k: int = typer.Option(50, "--dense-k", help="Case benchmarks: supports per option kept by the encoder."),
    match: str = typer.Option("phrase", "--match", help="Case benchmarks: an option is mentioned as a phrase, or by "
                              "all its words (words)."),
) -> None:
    """Evaluate a retriever on a benchmark; prints R@1/5/10, MAP, MRR@10, nDCG@10 (percent). The similar-case
    benchmarks (medqa-dev, headqa, medmcqa-dev) print accuracy and AP over all (question, option) pairs."""
    from capr.corpus.trec import write_run
    from capr.eval.benchmarks import (
        Protocol, QueryField, dense_scorer, hybrid_scorer, lexical_scorer, load_mediqa2019, load_medquad_cdv,
        load_mtsamples_capr, run_benchmark,
    )

    def body() -> None:
        from capr.cases.bench import CaseBenchmark

        if benchmark in {b.value for b in CaseBenchmark}:
            return _eval_cases(benchmark, data_dir, index_dir, retriever, reranker, rerank_depth, limit, seed, dense_k,
                               as_json, run_out, match)
        loaders = {"medquad-cdv": load_medquad_cdv, "mtsamples-capr": load_mtsamples_capr, "mediqa2019": load_mediqa2019,
                   "mediqa2019-train": partial(load_mediqa2019, name="mediqa2019-train")}
        if benchmark not in loaders:
            raise CaprError(f"unknown benchmark {benchmark!r}; available: {', '.join(loaders)}, "
                            f"{', '.join(b.value for b in CaseBenchmark)}")
        try:
            proto = Protocol(protocol)
        except ValueError:
            raise CaprError(f"unknown protocol {protocol!r}; choose rerank64 or full") from None
        try:
            qfield = QueryField(query_field)
        except ValueError:
            raise CaprError(f"unknown query field {query_field!r}; choose tuple or question") from None
        needs_dense = retriever in (Retriever.dense, Retriever.hybrid)
        store_backend, enc_backend = split_backend(backend, encoder_backend)
        if store_backend == "embedded" and uri:
            raise CaprError("--uri is only for --backend milvus")
        if store_backend == "milvus" and retriever is Retriever.tfidf:
            raise CaprError("tfidf is only available on the embedded backend")
        enc = _encoder_config(needs_dense, model, query_model, enc_backend, 256)
        cache = cache_dir or cache_root() / "bench" / benchmark / (_slug_of(enc) if enc else "lexical")
        with _progress() as p:
            data = loaders[benchmark](data_dir, cache, dense=enc, progress=_WriteProgress(p, f"indexing {benchmark}"))
        if benchmark == "mtsamples-capr" and qfield is not QueryField.tuple:
            raise CaprError("mtsamples-capr has ⟨entity, aspect⟩ queries only; use --query-field tuple")
        if benchmark.startswith("mediqa2019") and qfield is not QueryField.question:
            raise CaprError(f"{benchmark} has free-text questions only; use --query-field question")

        progress = _item_progress(f"{benchmark} {proto.value} {retriever.value}")

        if boundaries not in ("fixed", "free"):
            raise CaprError(f"unknown --boundaries {boundaries!r}; choose fixed or free")
        if boundaries == "free" and cdv is None:
            raise CaprError("--boundaries free needs a CDV model: add --cdv DIR")
        if cdv is not None and store_backend != "embedded":
            raise CaprError("--cdv needs the embedded index (--backend embedded)")
        store = cdv_store = None
        if cdv is not None:
            from capr.eval.benchmarks import cdv_scorer

            cdv_store = _open_cdv_store(data.index, cdv)
            scorer = cdv_scorer(data, cdv_store, qfield)
        elif store_backend == "milvus":
            import re as _re

            from capr.eval.benchmarks import benchmark_store, store_scorer

            name = collection or _re.sub(r"[^A-Za-z0-9_]", "_", f"capr_bench_{benchmark}_{_slug_of(enc) if enc else 'lexical'}")
            with _progress() as p:
                task = p.add_task(f"loading {benchmark} into Milvus {name}", total=None, note="")
                if not uri:
                    raise CaprError("--backend milvus needs --uri: a Milvus Lite file (*.db) or http(s)://host:19530")
                store = benchmark_store(data, uri, name, token=token, progress=lambda n: p.advance(task, n),
                                        **_milvus_options(tls_ca))
            scorer = store_scorer(data, store, retriever, qfield, template, proto, FusionConfig(method=fusion))
        elif retriever in (Retriever.bm25, Retriever.tfidf):
            scorer = lexical_scorer(data.index, retriever)
        else:
            dense = dense_scorer(data, qfield, template, progress)
            scorer = dense if retriever is Retriever.dense else hybrid_scorer(
                lexical_scorer(data.index, Retriever.bm25), dense, FusionConfig(method=fusion)
            )
        if reranker:
            from capr.eval.benchmarks import rerank_scorer
            from capr.retrieve.rerank import load_reranker

            scorer = rerank_scorer(data, scorer, load_reranker(reranker), rerank_depth)
        t_start = time.time()
        metrics, run = run_benchmark(data, scorer, proto, qfield, progress=progress)
        seconds = time.time() - t_start
        if run_out:
            run.name = f"capr-{retriever.value}-{proto.value}-{qfield.value}"
            write_run(run_out, run)
        result = {
            "benchmark": benchmark,
            "protocol": proto.value,
            "retriever": "cdv" if cdv is not None else retriever.value,
            "query_field": qfield.value,
            "queries": len(data.queries),
            "metrics": metrics,
            "seconds": round(seconds, 1),
        }
        if store_backend != "embedded":  # the embedded JSON keeps its keys (scripts compare them)
            result["index_backend"] = store_backend
        if reranker:
            result["reranker"] = {"spec": reranker, "depth": rerank_depth}
        if cdv is not None:
            result["cdv"] = str(cdv)
        if boundaries == "free":
            from capr.cdv.spans import BoundaryConfig
            from capr.eval.benchmarks import boundary_eval

            result["boundaries"] = boundary_eval(data, cdv_store, qfield, BoundaryConfig(theta_open, theta_close),
                                                 progress=progress)
        if needs_dense and cdv is None:
            result["encoder"] = {"model": model, "backend": enc_backend, "template": template}
            if retriever is Retriever.hybrid:
                result["fusion"] = fusion.value
        if as_json:
            sys.stdout.write(json.dumps(result) + "\n")
        else:
            table = Table(title=f"{benchmark} · {proto.value} · {qfield.value} queries · {retriever.value} ({len(data.queries)} queries)")
            for m in metrics:
                table.add_column(m, justify="right")
            table.add_row(*(f"{v:.2f}" for v in metrics.values()))
            out.print(table)
            if "boundaries" in result:
                b = result["boundaries"]
                out.print(f"top answer vs gold passage, character-overlap F1: fixed passages {b['fixed_F1']:.2f} "
                          f"(mean {b['fixed_chars']:.0f} chars), free boundaries {b['free_F1']:.2f} "
                          f"(mean {b['free_chars']:.0f} chars; θ_open {b['theta_open']}, θ_close {b['theta_close']})")

    _run_guarded(body)


# --------------------------------------------------------------------------- explain
@app.command("explain")
def explain_cmd(
    index_dir: Path = typer.Argument(..., help="Index directory."),
    doc_or_pid: str = typer.Argument(..., help="A document id, or a passage id (its passage is shaded in the plot)."),
    cdv: Path = typer.Option(..., "--cdv", help="CDV model folder (from `capr train cdv`)."),
    entity: Optional[str] = typer.Option(None, "--entity", "-e"),
    aspect: Optional[str] = typer.Option(None, "--aspect", "-a"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write the score curves (PNG, SVG or PDF by suffix)."),
    theta_open: float = typer.Option(0.8, "--theta-open"),
    theta_close: float = typer.Option(0.4, "--theta-close"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Entity, aspect and combined CDV scores for every sentence of one document, and its best free span
    (the CDV paper's Figure 4)."""

    def body() -> None:
        from capr.cdv.search import explain
        from capr.cdv.spans import BoundaryConfig

        if plot is not None and plot.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise CaprError(f"--plot {plot}: use a .png, .svg or .pdf file name")
        index = Index.load(index_dir)
        store = _open_cdv_store(index, cdv)
        ex = explain(index, store, doc_or_pid, entity, aspect, BoundaryConfig(theta_open, theta_close), plot)
        if as_json:
            payload = ex.to_dict()
            if plot is not None:
                payload["plot"] = {"path": str(plot), "points": ex.plot_points}
            sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
            return
        best = ex.best
        out.print(f"[bold]{ex.title or ex.doc_id}[/] ({ex.doc_id}) — ⟨{entity or ''}, {aspect or ''}⟩")
        comb = ex.curves["combined"]
        lo, hi = min(comb), max(comb)
        for i, (a, b, t) in enumerate(ex.sentences):
            width = int(round(20 * (comb[i] - lo) / (hi - lo))) if hi > lo else 20
            style = "bold yellow" if best and best.start <= a < best.end else ""
            out.print(Text.assemble((f"{i + 1:>3} ", "dim"), ("█" * width + " " * (20 - width), "green"),
                                    (f" {comb[i]:.3f}  ", "dim"), (" ".join(t.split())[:110], style)))
        if best:
            out.print(f"best free span: characters {best.start}–{best.end} ({len(best.sentences)} sentences), "
                      f"score {best.score:.3f}")
        if plot is not None:
            out.print(f"plot written to {plot}")

    _run_guarded(body)


# --------------------------------------------------------------------------- stats
@app.command("stats")
def stats_cmd(
    source: Path = typer.Argument(..., help="File or directory."),
    fmt: Format = typer.Option(Format.auto, "--format", "-f"),
    top: int = typer.Option(30, help="How many aspects to list."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Segmentation report: documents, sections, passages and the most frequent aspects."""

    def body() -> None:
        report = ReadReport(skip_bad=True)
        docs = sections = passages = with_headings = 0
        aspects: Counter[str] = Counter()
        from capr.corpus.segment import detect_sections, paragraph_sections

        for doc in read_documents(source, fmt, report):
            docs += 1
            secs = doc.sections if doc.sections is not None else detect_sections(doc.text)
            if secs and any(s.heading for s in secs):
                with_headings += 1
            secs = secs or paragraph_sections(doc.text)
            sections += len(secs)
            aspects.update(s.aspect for s in secs if s.aspect)
            passages += len(segment(doc))
        result = {
            "source": str(source),
            "documents": docs,
            "documents_with_headings": with_headings,
            "sections": sections,
            "passages": passages,
            "distinct_aspects": len(aspects),
            "read": report.summary(),
            "top_aspects": aspects.most_common(top),
        }
        if as_json:
            sys.stdout.write(json.dumps(result) + "\n")
            return
        out.print(
            f"{docs} documents ({with_headings} with headings), {sections} sections, {passages} passages, "
            f"{len(aspects)} distinct aspects; {report.summary()}"
        )
        table = Table(title=f"top {top} aspects")
        table.add_column("#", justify="right")
        table.add_column("aspect")
        table.add_column("sections", justify="right")
        for i, (a, n) in enumerate(aspects.most_common(top), 1):
            table.add_row(str(i), a, str(n))
        out.print(table)

    _run_guarded(body)


# --------------------------------------------------------------------------- demo
DEMO_QUERIES = [
    Query("demo-1", entity="IgA nephropathy", aspect="symptoms"),
    Query("demo-2", entity="cardiomyopathy", aspect="family history"),
    Query("demo-3", text="how is atrial fibrillation treated"),
]


def _open_cdv_store(index: Index, model_dir: Path):
    """The index's CDV vectors under this model (computed now for documents that have none yet)."""
    from capr.cdv import CDVModel
    from capr.cdv.store import CDVStore

    model = CDVModel.load(model_dir)
    with _progress(transient=True) as p:
        task = p.add_task("CDV document vectors", total=None, note="")

        def tick(done: int, total: int) -> None:
            p.update(task, completed=done, total=total)

        return CDVStore.open(index, model, progress=tick)


def _slug_of(enc: EncoderConfig) -> str:
    import hashlib

    return "dense-" + hashlib.sha1(json.dumps(enc.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def demo_corpus_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("capr") / "demo" / "corpus"))


@app.command("demo")
def demo_cmd(
    cache_dir: Optional[Path] = typer.Option(None, help="Where the demo index is written."),
    k: int = typer.Option(3, "-k"),
) -> None:
    """Index the bundled demo corpus (synthetic notes and articles) and run three example queries."""

    def body() -> None:
        target = (cache_dir or cache_root()) / "demo-index"
        index, report, secs = index_source(demo_corpus_dir(), target, Format.text, SegmenterConfig(), AnalyzerConfig(), False)
        c = index.counts
        out.print(f"[bold]capr demo[/]: indexed {c['documents']} documents → {c['passages']} passages in {secs:.1f}s ({escape(str(target))})\n")
        for q in DEMO_QUERIES:
            label = f'"{q.text}"' if q.text else f"⟨{q.entity}, {q.aspect}⟩"
            out.rule(f"[bold]{escape(label)}")
            hits = index.search(q, k=k)
            terms = set(query_tokens(index.analyzer, q))
            render_results(index, [result_dict(index, h, terms) for h in hits])

    _run_guarded(body)


# --------------------------------------------------------------------------- labels
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
        from capr.labels.splits import exclude_test_documents, medquad_test_exclusion, select_split

        report = ReadReport()
        docs = read_documents(corpus, fmt, report)
        exclusion = None
        if exclude_medquad_test is not None:
            exclusion = medquad_test_exclusion(exclude_medquad_test)
            docs = exclude_test_documents(docs, exclusion, strict=strict)
        if split:
            docs = select_split(docs, split)
        if limit:
            docs = itertools.islice(docs, limit)
        config = LabelConfig(ner=not no_ner, assertions=not no_assertions,
                             segmenter=SegmenterConfig(max_tokens=max_tokens))
        gen = LabelGenerator(config, exclude_passage=exclusion.is_test_text if exclusion is not None else None)
        t0 = time.time()
        with _progress() as progress:
            task = progress.add_task("labelling documents", total=limit, note="")
            n = write_labels(out_path, gen(docs, progress=lambda k: progress.advance(task, k)))
        stats = gen.stats.to_dict(top)
        stats.update(seconds=round(time.time() - t0, 1), written=n, out=str(out_path))
        if exclusion is not None:
            stats.update(excluded_test_docs=exclusion.excluded_docs, excluded_by_entity=exclusion.excluded_by_entity)
        if as_json:
            print(json.dumps(stats, indent=2))
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


# --------------------------------------------------------------------------- train
@app.command("train")
def train_cmd(
    kind: str = typer.Argument(..., help="bi | poly | cross | cdv (from labels) | tsdae (corpus) | cases (distant supervision)"),
    source: Optional[str] = typer.Argument(None, help="tsdae: the corpus (file, folder, or cases:DATA_DIR for the local case corpus)."),
    labels: Optional[Path] = typer.Option(None, "--labels", "-l", help="Labels JSONL from `capr labels` (bi, poly, cross, cdv)."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Folder for the trained model (replaced atomically)."),
    base_model: str = typer.Option("minilm", "--base-model", help="'minilm' (bundled), an HF model id or a path."),
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
    context: str = typer.Option("off", "--context", help="Document context read with each passage: off | title | "
                                "title+heading (indexes built with the model read passages the same way)."),
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
    data_dir: Path = typer.Option(Path("../shared/data"), "--data-dir", help="cases: folder with rqe, headqa_en, medmcqa_dev, medqa_usmle."),
    stage: str = typer.Option("all", "--stage", help="cases: pretrain (RQE) | distant (S+/S- fine-tuning) | all."),
    pretrained: Optional[Path] = typer.Option(None, "--pretrained", help="cases --stage distant: the RQE cross-encoder."),
    questions: int = typer.Option(600, "--questions", help="cases: training questions sampled for S+/S-."),
    top_k: int = typer.Option(1, "--top-k", help="cases: supports per (question, option) kept for S+/S- (paper: 1, 5, 10)."),
    dense_k: int = typer.Option(20, "--dense-k", help="cases: dense depth re-ranked by the pre-trained cross-encoder."),
    sentences: int = typer.Option(100_000, "--sentences", help="tsdae: most corpus sentences used."),
) -> None:
    """Train a bi-, poly- or cross-encoder or a CDV model from self-supervised labels (no annotation); `tsdae`:
    adapt the encoder to a corpus; `cases`: the similar-case cross-encoder (RQE pre-training, then distant supervision)."""

    def run() -> None:
        from capr.train import ModelKind, TrainArgs, train

        if kind in ("tsdae", "cases"):
            return _train_cases(kind, source, out_dir, base_model, max_steps, time_budget, batch_size, lr, max_length,
                                seed, device, index_dir, data_dir, stage, pretrained, questions, top_k, dense_k,
                                sentences, as_json)
        if labels is None:
            raise CaprError(f"training a {kind} model needs --labels (from `capr labels`)")
        if kind == "cdv":
            return _train_cdv(labels, out_dir, base_model, encoder_backend, max_steps, time_budget, batch_size, lr,
                              eval_every, patience, seed, device, as_json)
        try:
            mk = ModelKind(kind)
        except ValueError:
            raise CaprError(f"unknown model kind {kind!r}; choose bi, poly, cross, cdv, tsdae or cases") from None
        if max_steps < 1:
            raise CaprError("--max-steps must be at least 1")
        cross = mk is ModelKind.cross
        args = TrainArgs(
            kind=mk, base_model=base_model, max_steps=max_steps, time_budget_min=time_budget,
            batch_size=batch_size or (8 if cross else 32), lr=lr or (3e-5 if cross else 5e-5), max_length=max_length or 128,
            shared=shared, multi_positive=multi_positive,
            hard_negatives=hard_negatives if hard_negatives is not None else (2 if cross else 1),
            sentence_selection=cross if sentence_selection is None else sentence_selection,
            context=parse_context(context).value,
            question_prob=question_prob, poly_codes=poly_codes, eval_every=eval_every, patience=patience, seed=seed,
            device=device,
        )
        result = train(labels, out_dir, args, progress=True, log=lambda m: err.print(escape(m)))
        _print_train_summary(f"{mk.value}-encoder", out_dir, result, as_json)

    _run_guarded(run)


def _print_train_summary(label: str, out_dir: Path, result: Any, as_json: bool) -> None:
    summary = {"out": str(out_dir), "steps_run": result.steps, "kept_step": result.card.get("best_step", result.steps),
               "minutes": round(result.seconds / 60, 2), "stopped": result.stopped,
               "dev_start": result.card.get("dev_start"), "dev_best": result.best,
               "first_loss": result.losses[0] if result.losses else None,
               "last_loss": float(np.mean(result.losses[-10:])) if result.losses else None}
    if as_json:
        print(json.dumps(summary, indent=2))
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
                   time_budget_min=time_budget, batch_docs=batch_size or 16, lr=lr or 1e-3, eval_every=eval_every if eval_every != 50 else 100, patience=patience, seed=seed,
                   device=device)
    result = train_cdv(labels, out_dir, args, progress=True, log=lambda m: err.print(escape(m)))
    _print_train_summary("cdv", out_dir, result, as_json)


def _train_cases(kind, source, out_dir, base_model, max_steps, time_budget, batch_size, lr, max_length, seed, device,
                 index_dir, data_dir, stage, pretrained, questions, top_k, dense_k, sentences, as_json) -> None:
    from capr.cases.train import (CaseStage, DistantArgs, PairArgs, TsdaeArgs, corpus_sentences, distant_pairs,
                                  train_pairs, train_tsdae)

    say = lambda m: err.print(escape(m))  # noqa: E731
    if max_steps < 1:
        raise CaprError("--max-steps must be at least 1")
    if kind == "tsdae":
        if not source:
            raise CaprError("capr train tsdae needs a corpus: a file, a folder, or cases:DATA_DIR")
        args = TsdaeArgs(base_model=base_model, max_steps=max_steps, time_budget_min=time_budget,
                         batch_size=batch_size or 8, lr=lr or 3e-5, max_length=max_length or 128,
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
            raise CaprError(f"unknown stage {stage!r}; choose pretrain, distant or all") from None
        pargs = dict(base_model=base_model, max_steps=max_steps, time_budget_min=time_budget, batch_size=batch_size or 8,
                     lr=lr or 2e-5, max_length=max_length or 256, seed=seed, device=device)
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
            if index_dir is None:
                raise CaprError("distant supervision needs --index (the case index with TSDAE vectors)")
            dargs = DistantArgs(k=top_k, dense_k=dense_k, max_questions=questions, seed=seed)
            pairs, stats = distant_pairs(index_dir, init, data_dir, dargs, log=say)
            rep = train_pairs(pairs, out_dir, PairArgs(**pargs), init=init, log=say, desc="distant",
                              card_extra={"distant": stats, "index": str(index_dir)})
            summary["distant"] = {"steps": rep.steps, "minutes": round(rep.seconds / 60, 2), "pairs": len(pairs),
                                  "stopped": rep.stopped, **stats}
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        out.print(f"[bold]{kind}[/] -> {escape(str(out_dir))}: {escape(json.dumps(summary))}")


def _case_documents(source: str):
    """A corpus spec: cases:DATA_DIR (every local text source, MedQuAD test documents excluded) or a path."""
    if source.startswith("cases:"):
        from capr.cases.data import case_corpus

        return case_corpus(source[len("cases:"):])
    return read_documents(Path(source), Format.auto)


# --------------------------------------------------------------------------- cases
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
            typer.echo(json.dumps({"out": str(out_dir), **m}))
        else:
            typer.echo(f"merged {m['tensors_mixed']} tensors: {1 - alpha:.2f} × {m['start']} + {alpha:.2f} × {model_dir} → {out_dir}")

    _run_guarded(body)


@app.command("case-index")
def case_index_cmd(
    out_dir: Path = typer.Option(..., "--out", "-o", help="Index directory (created, or replaced atomically)."),
    data_dir: Path = typer.Option(Path("../shared/data"), "--data-dir", help="Folder holding the data sets."),
    extra: List[Path] = typer.Option([], "--add", help="A user corpus (file or folder) indexed too (repeatable)."),
    max_tokens: int = typer.Option(120, help="Words per passage."),
    dense: bool = typer.Option(True, "--dense/--no-dense", help="Encode passages (needed by the dense and cross scorers)."),
    model: str = typer.Option("minilm", help="Encoder: a `capr train tsdae` folder, 'minilm', an HF id or a path."),
    max_length: int = typer.Option(256, help="Encoder max tokens."),
    mtsamples_notes: Optional[int] = typer.Option(None, "--mtsamples-notes", help="Only the first N MTSamples notes (file order)."),
) -> None:
    """Index the local case corpus: MedQuAD answers (test documents excluded), MTSamples notes, PubMedQA
    abstracts, MedMCQA explanations, plus any --add corpus."""

    def body() -> None:
        import itertools

        from capr.cases.data import case_corpus

        docs = itertools.chain(case_corpus(data_dir, mtsamples_notes=mtsamples_notes),
                               *(read_documents(p, Format.auto) for p in extra))
        args = dict(root=out_dir, segmenter=SegmenterConfig(max_tokens=max_tokens), analyzer=AnalyzerConfig(),
                    dense=_encoder_config(dense, model, None, "torch", max_length))
        index, secs = write_documents(args, docs, "indexing the case corpus")
        _print_write_summary(f"indexed {index.counts['documents']} documents", index, ReadReport(), secs, out_dir)

    _run_guarded(body)


def _read_description(text: str) -> str:
    p = Path(text)
    if len(text) < 4096 and "\n" not in text and p.is_file():
        return p.read_text(encoding="utf-8")
    return text


@app.command("cases")
def cases_cmd(
    index_dir: Path = typer.Option(..., "--index", "-i", help="Case index (`capr case-index` or any `capr index --dense`)."),
    description: str = typer.Option(..., "--description", "-d", help="Patient description: text, or a file holding it."),
    options: List[str] = typer.Option(..., "--options", help="Hypotheses (diagnoses, drugs, tests): --options A B C."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Cross-encoder from `capr train cases` (scorer cross)."),
    scorer: Optional[str] = typer.Option(None, "--scorer", help="bm25 | dense | cross (default: cross with --model, else dense "
                                         "when the index has vectors, else bm25)."),
    dense_k: int = typer.Option(50, "--dense-k", help="Supports per hypothesis kept by the encoder."),
    cross_k: int = typer.Option(50, "--cross-k", help="Of those, scored by the cross-encoder."),
    match: str = typer.Option("phrase", "--match", help="A passage mentions a hypothesis as a phrase, or by all its "
                              "words anywhere (words: finds long options that are rarely written verbatim)."),
    explain: bool = typer.Option(False, "--explain", help="Show the variants searched and every scored support."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Rank hypotheses for a patient description by their most similar case in the corpus."""

    def body() -> None:
        from capr.cases import CaseConfig, CasePipeline, CaseScorer

        index = Index.load(index_dir)
        try:
            sc = CaseScorer(scorer) if scorer else (CaseScorer.cross if model else CaseScorer.dense if index.has_dense
                                                     else CaseScorer.bm25)
        except ValueError:
            raise CaprError(f"unknown scorer {scorer!r}; choose bm25, dense or cross") from None
        cfg = CaseConfig(scorer=sc, cross_model=str(model) if model else None, dense_k=dense_k, cross_k=cross_k,
                         match=match)
        text = _read_description(description)
        res = CasePipeline(index, cfg).rank(text, [o for o in options])
        if as_json:
            sys.stdout.write(json.dumps(res.to_dict(explain), ensure_ascii=False, indent=1) + "\n")
            return
        table = Table(title=f"hypotheses · scorer {sc.value}")
        for col in ("rank", "hypothesis", "score", "found", "supporting case"):
            table.add_column(col, overflow="fold")
        for h in res.hypotheses:
            sup = "(no passage mentions it: scored on its own text)" if h.passage is None else \
                f"[{h.passage.doc_id}] {h.passage.text[:220]}{'…' if len(h.passage.text) > 220 else ''}"
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


def _eval_cases(benchmark: str, data_dir: Path, index_dir: Optional[Path], retriever: Retriever, reranker: Optional[str],
                rerank_depth: int, limit: Optional[int], seed: int, dense_k: int, as_json: bool,
                run_out: Optional[Path] = None, match: str = "phrase") -> None:
    from capr.cases import CaseConfig, CasePipeline, CaseScorer
    from capr.cases.bench import benchmark_questions, evaluate_cases, write_outcomes

    if index_dir is None:
        raise CaprError(f"{benchmark} needs --index (the case index from `capr case-index`)")
    if reranker and not reranker.startswith("cross:"):
        raise CaprError(f"{benchmark}: the re-ranker must be cross:DIR, got {reranker!r}")
    if reranker:
        sc = CaseScorer.cross
    elif retriever in (Retriever.bm25, Retriever.dense):
        sc = CaseScorer(retriever.value)
    else:
        raise CaprError(f"{benchmark}: use --retriever bm25 or dense, or --reranker cross:DIR")
    cfg = CaseConfig(scorer=sc, cross_model=reranker[len("cross:"):] if reranker else None, dense_k=dense_k,
                     cross_k=min(rerank_depth, dense_k), match=match)
    qs = benchmark_questions(data_dir, benchmark, limit, seed)
    pipe = CasePipeline(Index.load(index_dir), cfg)

    progress = _item_progress(f"{benchmark} {sc.value}")

    metrics, outcomes = evaluate_cases(pipe, qs, progress)
    if run_out is not None:
        write_outcomes(run_out, outcomes)
    result = {"benchmark": benchmark, "scorer": sc.value, "reranker": reranker, "index": str(index_dir),
              "limit": limit, "seed": seed, "config": cfg.to_dict(), "metrics": metrics}
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        table = Table(title=f"{benchmark} · {sc.value} ({metrics['questions']} questions)")
        for m in ("accuracy", "AP", "coverage", "correct_found", "chance"):
            table.add_column(m, justify="right")
        table.add_row(*(f"{metrics[m]:.2f}" for m in ("accuracy", "AP", "coverage", "correct_found", "chance")))
        out.print(table)


# --------------------------------------------------------------------------- serve
@app.command("serve")
def serve_cmd(
    index_dir: Path = typer.Option(..., "--index", "-i", help="Index directory to serve."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (loopback by default)."),
    port: int = typer.Option(8000, help="TCP port."),
    token_file: Optional[Path] = typer.Option(None, help="API tokens, one per line (besides $CAPR_API_TOKENS, comma separated)."),
    auth_reads: bool = typer.Option(False, "--auth-reads", help="Require a token for reads too (writes always need one)."),
    max_body_bytes: int = typer.Option(1 << 20, help="Largest request body accepted (larger: 413)."),
    reranker: List[str] = typer.Option([], "--reranker", help="Re-ranker spec a search may name, e.g. cross:DIR (repeatable)."),
    workers: int = typer.Option(1, help="uvicorn worker processes (each holds its own snapshot of the index)."),
    log_level: str = typer.Option("info", help="debug | info | warning | error."),
    backend: str = typer.Option("embedded", "--backend", help=BACKEND_HELP + " --index is then the collection name."),
    uri: Optional[str] = typer.Option(None, "--uri", help=URI_HELP),
    milvus_token: Optional[str] = typer.Option(None, "--milvus-token", envvar="CAPR_MILVUS_TOKEN", help=TOKEN_HELP),
    tls_ca: Optional[Path] = typer.Option(None, "--tls-ca", help=CA_HELP),
    cases_model: Optional[Path] = typer.Option(None, "--cases-model", help="Cross-encoder from `capr train cases`: POST /cases "
                                               "runs the similar-case pipeline (index needs vectors); default: lexical baseline."),
) -> None:
    """Serve an index over HTTP: JSON API (OpenAPI at /openapi.json) and a search page at /."""

    def body() -> None:
        from capr.service.config import ServiceConfig, load_tokens
        from capr.service.server import serve

        store_backend, _ = split_backend(backend, None)
        store = open_any(index_dir, store_backend, uri, milvus_token, tls_ca) if store_backend == "milvus" else None
        if store is None and uri:
            raise CaprError("--uri is only for --backend milvus")
        config = ServiceConfig(tokens=load_tokens(token_file), auth_reads=auth_reads, max_body_bytes=max_body_bytes,
                               rerankers=tuple(reranker), cases_model=str(cases_model) if cases_model else None)
        if store is not None and cases_model:
            raise CaprError("--cases-model needs the embedded index (the case pipeline reads its vectors)")
        serve(index_dir, config, host=host, port=port, workers=workers, token_file=token_file, log_level=log_level,
              store=store)

    _run_guarded(body)


# Options that take several values after one flag (`--options A B C`); click wants the flag repeated.
_VARIADIC = ("--options",)


def expand_variadic(argv: list[str]) -> list[str]:
    """`--options A B C` → `--options A --options B --options C` (up to the next token starting with "-")."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        out.append(tok)
        i += 1
        if tok in _VARIADIC:
            first = True
            while i < len(argv) and (first or not argv[i].startswith("-")):
                if not first:
                    out.append(tok)
                out.append(argv[i])
                i += 1
                first = False
    return out


def main() -> None:
    app(args=expand_variadic(sys.argv[1:]), prog_name="capr")


if __name__ == "__main__":
    main()
