"""The `capr` command line."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator, List, Optional

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
from capr.index.index import query_tokens
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
def index_source(
    source: Path,
    out_dir: Path,
    fmt: Format,
    segmenter: SegmenterConfig,
    analyzer: AnalyzerConfig,
    skip_bad: bool,
    quiet: bool = False,
) -> tuple[Index, ReadReport, float]:
    report = ReadReport(skip_bad=skip_bad)
    t0 = time.time()
    docs = read_documents(source, fmt, report)
    with IndexWriter(out_dir, segmenter=segmenter, analyzer=analyzer, report=report) as writer:
        if quiet:
            for doc in docs:
                writer.add(doc)
        else:
            with _progress() as progress:
                task = progress.add_task(f"indexing {source.name}", total=None, note="")
                for doc in docs:
                    writer.add(doc)
                    progress.update(task, advance=1, note=f"{writer.n_passages} passages")
                progress.update(task, note=f"{writer.n_passages} passages; writing index")
    return Index.load(out_dir), report, time.time() - t0


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
) -> None:
    """Read SOURCE, split it into passages and build a persistent BM25/TF-IDF index."""

    def body() -> None:
        if overlap < 0 or max_tokens < 0:
            raise CaprError("--max-tokens and --overlap must be >= 0")
        seg = SegmenterConfig(max_tokens=max_tokens, overlap=overlap, include_title=title)
        ana = AnalyzerConfig(language=language, lowercase=lowercase, stopwords=stopwords, stem=stem)
        index, report, secs = index_source(source, out_dir, fmt, seg, ana, skip_bad)
        c = index.counts
        err.print(
            f"indexed [bold]{c['documents']}[/] documents → [bold]{c['passages']}[/] passages "
            f"({c['vocabulary']} terms) in {secs:.1f}s into {escape(str(out_dir))}; {report.summary()}"
        )
        for e in report.skipped[:50]:
            err.print(f"  [yellow]skipped[/] {escape(str(e))}")
        if len(report.skipped) > 50:
            err.print(f"  … and {len(report.skipped) - 50} more")

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
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Search an index with a free-text question or an ⟨entity, aspect⟩ pair."""

    def body() -> None:
        if not (query and query.strip()) and not (entity and entity.strip()) and not (aspect and aspect.strip()):
            raise QueryError("empty query: give a question, or --entity and/or --aspect")
        q = Query("cli", text=query or None, entity=entity or None, aspect=aspect or None)
        index = Index.load(index_dir)
        hits = index.search(q, k=k, filters=_parse_filters(filters), retriever=retriever, expand=expand, aspect_boost=aspect_boost)
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
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Evaluate a retriever on a benchmark; prints R@1/5/10, MAP, MRR@10, nDCG@10 (percent)."""
    from capr.corpus.trec import write_run
    from capr.eval.benchmarks import Protocol, QueryField, lexical_scorer, load_medquad_cdv, run_benchmark

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
        cache = cache_dir or _cache_root() / "bench" / benchmark
        data = load_medquad_cdv(data_dir, cache)

        def progress(queries):
            with _progress(transient=True) as p:
                task = p.add_task(f"{benchmark} {proto.value} {retriever.value}", total=len(queries), note="")
                for q in queries:
                    yield q
                    p.advance(task)

        metrics, run = run_benchmark(data, lexical_scorer(data.index, retriever), proto, qfield, progress=progress)
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


def _cache_root() -> Path:
    return Path(os.environ.get("CAPR_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "capr")


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
        target = (cache_dir or _cache_root()) / "demo-index"
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
