"""The `capr` command line."""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from collections import Counter
from pathlib import Path
from typing import Iterable, List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from capr.corpus import Format, ReadReport, read_documents
from capr.corpus.segment import SegmenterConfig, segment
from capr.errors import CaprError, QueryError
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
    backend: str = typer.Option("torch", help="torch | onnx | onnx-int8 | static (model2vec, distilled locally)."),
    max_length: int = typer.Option(256, help="Encoder max tokens per passage."),
) -> None:
    """Read SOURCE, split it into passages and build a persistent index (BM25/TF-IDF, optionally dense)."""

    def body() -> None:
        if overlap < 0 or max_tokens < 0:
            raise CaprError("--max-tokens and --overlap must be >= 0")
        seg = SegmenterConfig(max_tokens=max_tokens, overlap=overlap, include_title=title)
        ana = AnalyzerConfig(language=language, lowercase=lowercase, stopwords=stopwords, stem=stem)
        enc = _encoder_config(dense, model, query_model, backend, max_length)
        index, report, secs = index_source(source, out_dir, fmt, seg, ana, skip_bad, dense=enc)
        _print_write_summary(f"indexed {index.counts['documents']} documents", index, report, secs, out_dir)

    _run_guarded(body)


@app.command("add")
def add_cmd(
    index_dir: Path = typer.Argument(..., help="Existing index directory."),
    source: Path = typer.Argument(..., help="File or directory with documents to add (same id = replace)."),
    fmt: Format = typer.Option(Format.auto, "--format", "-f"),
    skip_bad: bool = typer.Option(False, "--skip-bad"),
) -> None:
    """Add documents to an index without rebuilding it; a document with an existing id replaces it."""

    def body() -> None:
        report = ReadReport(skip_bad=skip_bad)
        args = dict(root=index_dir, report=report, mode="update")
        index, secs = write_documents(args, read_documents(source, fmt, report), f"adding {source.name}")
        _print_write_summary("added", index, report, secs, index_dir)

    _run_guarded(body)


@app.command("delete")
def delete_cmd(
    index_dir: Path = typer.Argument(..., help="Existing index directory."),
    doc_ids: List[str] = typer.Option(..., "--doc-id", help="Document id to delete (repeatable)."),
) -> None:
    """Delete documents (all their passages) from an index without rebuilding it."""

    def body() -> None:
        args = dict(root=index_dir, mode="update")
        index, secs = write_documents(args, [], "deleting", quiet=True, deletes=doc_ids)
        _print_write_summary(f"deleted {len(doc_ids)} document(s)", index, ReadReport(), secs, index_dir)

    _run_guarded(body)


# --------------------------------------------------------------------------- search
def _parse_filters(filters: list[str]) -> dict[str, str]:
    parsed = {}
    for f in filters:
        if "=" not in f:
            raise QueryError(f"bad filter {f!r}: use FIELD=VALUE, e.g. aspect=symptoms")
        k, v = f.split("=", 1)
        if not k.strip() or not v.strip():
            raise QueryError(f"bad filter {f!r}: field and value must be non-empty")
        parsed[k.strip()] = v.strip()
    return parsed


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
        console.print()


@app.command("search")
def search_cmd(
    index_dir: Path = typer.Argument(..., help="Index directory."),
    query: Optional[str] = typer.Argument(None, help="Free-text question."),
    entity: Optional[str] = typer.Option(None, "--entity", "-e", help="Entity of a structured question."),
    aspect: Optional[str] = typer.Option(None, "--aspect", "-a", help="Aspect of a structured question."),
    k: int = typer.Option(10, "-k", help="Number of passages."),
    filters: List[str] = typer.Option([], "--filter", help="FIELD=VALUE (repeatable), e.g. aspect=symptoms."),
    retriever: Retriever = typer.Option(Retriever.bm25, "--retriever", "-r"),
    expand: bool = typer.Option(True, help="Expand the aspect with its synonyms."),
    aspect_boost: float = typer.Option(0.5, help="Score bonus (×(1+b)) for passages from the section aspect asked about; 0 turns it off."),
    fusion: FusionMethod = typer.Option(FusionMethod.rrf, help="How --retriever hybrid fuses BM25 and dense: rrf or weighted."),
    template: str = typer.Option(DEFAULT_TEMPLATE, help=f"How ⟨entity, aspect⟩ becomes text for the dense encoder: {', '.join(TEMPLATES)}."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Search an index with a free-text question or an ⟨entity, aspect⟩ pair."""

    def body() -> None:
        if not (query and query.strip()) and not (entity and entity.strip()) and not (aspect and aspect.strip()):
            raise QueryError("empty query: give a question, or --entity and/or --aspect")
        q = Query("cli", text=query or None, entity=entity or None, aspect=aspect or None)
        index = Index.load(index_dir)
        hits = index.search(
            q, k=k, filters=_parse_filters(filters), retriever=retriever, expand=expand, aspect_boost=aspect_boost,
            fusion=FusionConfig(method=fusion), template=template,
        )
        terms = set(query_tokens(index.analyzer, q, expand))
        results = [result_dict(index, h, terms) for h in hits]
        if as_json:
            payload = {
                "query": {"text": q.text, "entity": q.entity, "aspect": q.aspect},
                "retriever": retriever.value,
                "filters": _parse_filters(filters),
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
    run_out: Optional[Path] = typer.Option(None, help="Write the ranking as a TREC run file."),
    cache_dir: Optional[Path] = typer.Option(None, help="Where the benchmark index is kept between runs."),
    model: str = typer.Option("minilm", help="Dense encoder (dense/hybrid): 'minilm', a Hugging Face id, or a path."),
    query_model: Optional[str] = typer.Option(None, help="Separate query encoder."),
    backend: str = typer.Option("torch", help="Encoder backend: torch | onnx | onnx-int8 | static."),
    template: str = typer.Option(DEFAULT_TEMPLATE, help=f"⟨entity, aspect⟩ → text for the encoder: {', '.join(TEMPLATES)}."),
    fusion: FusionMethod = typer.Option(FusionMethod.rrf, help="Hybrid fusion: rrf or weighted."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Evaluate a retriever on a benchmark; prints R@1/5/10, MAP, MRR@10, nDCG@10 (percent)."""
    from capr.corpus.trec import write_run
    from capr.eval.benchmarks import (
        Protocol, QueryField, dense_scorer, hybrid_scorer, lexical_scorer, load_medquad_cdv, run_benchmark,
    )

    def body() -> None:
        if benchmark != "medquad-cdv":
            raise CaprError(f"unknown benchmark {benchmark!r}; available: medquad-cdv")
        try:
            proto = Protocol(protocol)
        except ValueError:
            raise CaprError(f"unknown protocol {protocol!r}; choose rerank64 or full") from None
        try:
            qfield = QueryField(query_field)
        except ValueError:
            raise CaprError(f"unknown query field {query_field!r}; choose tuple or question") from None
        needs_dense = retriever in (Retriever.dense, Retriever.hybrid)
        enc = _encoder_config(needs_dense, model, query_model, backend, 256)
        cache = cache_dir or cache_root() / "bench" / benchmark / (_slug_of(enc) if enc else "lexical")
        with _progress() as p:
            data = load_medquad_cdv(data_dir, cache, dense=enc, progress=_WriteProgress(p, f"indexing {benchmark}"))

        def progress(items):
            with _progress(transient=True) as p:
                task = p.add_task(f"{benchmark} {proto.value} {retriever.value}", total=len(items), note="")
                for item in items:
                    yield item
                    p.advance(task)

        if retriever in (Retriever.bm25, Retriever.tfidf):
            scorer = lexical_scorer(data.index, retriever)
        else:
            dense = dense_scorer(data, qfield, template, progress)
            scorer = dense if retriever is Retriever.dense else hybrid_scorer(
                lexical_scorer(data.index, Retriever.bm25), dense, FusionConfig(method=fusion)
            )
        metrics, run = run_benchmark(data, scorer, proto, qfield, progress=progress)
        if run_out:
            run.name = f"capr-{retriever.value}-{proto.value}-{qfield.value}"
            write_run(run_out, run)
        result = {
            "benchmark": benchmark,
            "protocol": proto.value,
            "retriever": retriever.value,
            "query_field": qfield.value,
            "queries": len(data.queries),
            "metrics": metrics,
        }
        if needs_dense:
            result["encoder"] = {"model": model, "backend": backend, "template": template}
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
) -> None:
    """Serve an index over HTTP: JSON API (OpenAPI at /openapi.json) and a search page at /."""

    def body() -> None:
        from capr.service.config import ServiceConfig, load_tokens
        from capr.service.server import serve

        config = ServiceConfig(tokens=load_tokens(token_file), auth_reads=auth_reads, max_body_bytes=max_body_bytes,
                               rerankers=tuple(reranker))
        serve(index_dir, config, host=host, port=port, workers=workers, token_file=token_file, log_level=log_level)

    _run_guarded(body)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
