"""capr index / add / delete / stats: writing an index and reporting on a corpus."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from capr.cli.common import (
    BACKEND_HELP,
    BACKEND_OPTION,
    MAX_DOC_HELP,
    TLS_CA_OPTION,
    TOKEN_OPTION,
    URI_OPTION,
    WAIT_OPTION,
    _encoder_config,
    _print_write_summary,
    _run_guarded,
    app,
    backend_options,
    err,
    out,
    write_to_store,
    write_json,
)
from capr.corpus import Format, ReadReport, read_documents
from capr.corpus.files import source_fingerprint
from capr.index.analysis import usable_cpus
from capr.corpus.segment import SegmenterConfig, segment
from capr.errors import CaprError
from capr.index import AnalyzerConfig
from capr.records import DEFAULT_MAX_DOC_CHARS


@app.command("index")
def index_cmd(
    source: Path = typer.Argument(..., help="File or directory to index."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Index directory (created; an existing index is replaced, "
                                 "atomically, only with --replace)."),
    replace: bool = typer.Option(False, "--replace", help="Replace the index already at --out (its documents are "
                                 "dropped); without it an existing index is refused (`capr add` adds to one)."),
    fmt: Format = typer.Option(Format.auto, "--format", "-f", help="Input format."),
    max_tokens: int = typer.Option(200, help="Split sections into passages of at most this many words (0: never)."),
    overlap: int = typer.Option(0, help="Words of trailing sentences repeated at the start of the next passage."),
    language: str = typer.Option("english", help="Analyzer language (stopwords, stemming)."),
    lowercase: bool = typer.Option(True, help="Fold case."),
    stopwords: bool = typer.Option(True, help="Remove stopwords."),
    stem: bool = typer.Option(True, help="Snowball stemming."),
    fold_accents: bool = typer.Option(True, "--fold-accents/--keep-accents", help="Read Latin letters without their "
                                      "accents, so that 'meniere' finds 'Ménière' (--keep-accents: 'e' and 'é' differ)."),
    title: bool = typer.Option(True, help="Index each passage together with its document title."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip malformed files/records and report them."),
    dense: bool = typer.Option(True, "--dense/--lexical-only", help="Encode passages for dense and hybrid search "
                               "(the default: `capr search` then fuses BM25 and dense); --lexical-only: BM25/TF-IDF only, "
                               "much faster to build."),
    model: str = typer.Option("minilm", help="Encoder: 'minilm' (bundled), any Hugging Face id, or a local path."),
    query_model: Optional[str] = typer.Option(None, help="Separate query encoder (MedCPT-style); default: --model."),
    encoder_backend: Optional[str] = typer.Option(None, "--encoder-backend", help="Encoder: torch (default) | onnx | onnx-int8 | static (model2vec, distilled locally)."),
    max_length: int = typer.Option(256, help="Encoder max tokens per passage."),
    backend: str = typer.Option("embedded", "--backend", help=BACKEND_HELP + " --out is then the collection name."),
    uri: Optional[str] = URI_OPTION,
    token: Optional[str] = TOKEN_OPTION,
    tls_ca: Optional[Path] = TLS_CA_OPTION,
    milvus_index: str = typer.Option("FLAT", "--milvus-index", help="Milvus vector index: FLAT (exact, default) | HNSW | IVF_FLAT | AUTOINDEX."),
    max_doc_chars: int = typer.Option(DEFAULT_MAX_DOC_CHARS, "--max-doc-chars", help=MAX_DOC_HELP),
    wait: float = WAIT_OPTION,
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue an interrupted build of the same SOURCE "
                                "and settings into OUT from the segments it finished (a build killed part-way); "
                                "--no-resume starts over."),
) -> None:
    """Read SOURCE, split it into passages and build a persistent index: BM25/TF-IDF and dense vectors (MiniLM)
    unless --lexical-only. A build killed part-way (out of memory, a reboot) continues when run again."""

    def body() -> None:
        if overlap < 0 or max_tokens < 0:
            raise CaprError("--max-tokens and --overlap must be >= 0")
        opts = backend_options(backend, uri, token, tls_ca, encoder_backend)
        opts.index_type = milvus_index
        opts.lock_wait_s = wait
        if not replace and (held := opts.existing_documents(out_dir)) is not None:
            raise CaprError(f"{out_dir} is an index already ({held} documents); add --replace to replace it "
                            f"(`capr add {out_dir} SOURCE` adds documents to it)")
        seg = SegmenterConfig(max_tokens=max_tokens, overlap=overlap, include_title=title)
        ana = AnalyzerConfig(language=language, lowercase=lowercase, stopwords=stopwords, stem=stem,
                             fold_accents=fold_accents)
        enc = _encoder_config(dense, model, query_model, opts.encoder_backend, max_length)
        build_key = {"source": source_fingerprint(source), "format": fmt.value} if Path(source).exists() else None
        store = opts.create(out_dir, segmenter=seg, analyzer=ana, dense=enc, build_key=build_key, resume=resume,
                            analysis_process=usable_cpus() > 1)
        report = ReadReport(skip_bad=skip_bad, max_doc_chars=max_doc_chars)
        # no documents: an error, before the commit that would replace OUT with an empty index
        docs = read_documents(source, fmt, report, require_documents=True)
        secs = write_to_store(store, docs, f"indexing {source.name}", report, max_doc_chars=max_doc_chars, source=source)
        _print_write_summary(f"indexed {store.stats()['documents']} documents", store, report, secs)
        _prepare_entity_synonyms()

    _run_guarded(body)


def _prepare_entity_synonyms() -> None:
    """The entity synonym table is built by the first `capr index` on a machine, not by a user's first
    ⟨entity, aspect⟩ search. The index is written by then: a table that cannot be built is a note, not a failure."""
    from capr.labels.lexicon import prepare_search_tables

    try:
        prepare_search_tables()  # the entity synonyms and the question-reading lexicon
    except (ImportError, OSError, ValueError) as e:
        err.print(f"[yellow]note: the entity synonym table was not built ({type(e).__name__}: {escape(str(e))})[/]")


@app.command("add")
def add_cmd(
    index_dir: Path = typer.Argument(..., help="Existing index directory."),
    source: Path = typer.Argument(..., help="File or directory with documents to add (same id = replace)."),
    fmt: Format = typer.Option(Format.auto, "--format", "-f"),
    skip_bad: bool = typer.Option(False, "--skip-bad"),
    backend: str = BACKEND_OPTION,
    uri: Optional[str] = URI_OPTION,
    token: Optional[str] = TOKEN_OPTION,
    tls_ca: Optional[Path] = TLS_CA_OPTION,
    max_doc_chars: int = typer.Option(DEFAULT_MAX_DOC_CHARS, "--max-doc-chars", help=MAX_DOC_HELP),
    wait: float = WAIT_OPTION,
) -> None:
    """Add documents to an index without rebuilding it; a document with an existing id replaces it."""

    def body() -> None:
        report = ReadReport(skip_bad=skip_bad, max_doc_chars=max_doc_chars)
        store = backend_options(backend, uri, token, tls_ca, lock_wait_s=wait).open(index_dir)
        # nothing to add is said as an error, and no generation is written for it
        docs = read_documents(source, fmt, report, require_documents=True)
        before = store.stats()["documents"]
        seen: set[str] = set()

        def counted(documents):
            for d in documents:
                seen.add(d.doc_id)
                yield d

        secs = write_to_store(store, counted(docs), f"adding {source.name}", report, max_doc_chars=max_doc_chars)
        # counted by the writer against the generation it updated: `before` is older when this add waited for
        # another process's write (whose documents are not this add's)
        written = getattr(store, "last_added", None)
        if written is not None:
            added, replaced = written["documents"], written["replaced"]
        else:
            added = len(seen)
            replaced = added - (store.stats()["documents"] - before)
        _print_write_summary(f"added {added} document(s) ({added - replaced} new, {replaced} replacing the same id)",
                             store, report, secs)

    _run_guarded(body)


@app.command("delete")
def delete_cmd(
    index_dir: Path = typer.Argument(..., help="Existing index directory."),
    doc_ids: List[str] = typer.Option(..., "--doc-id", help="Document id to delete (repeatable)."),
    backend: str = BACKEND_OPTION,
    uri: Optional[str] = URI_OPTION,
    token: Optional[str] = TOKEN_OPTION,
    tls_ca: Optional[Path] = TLS_CA_OPTION,
    wait: float = WAIT_OPTION,
) -> None:
    """Delete documents (all their passages) from an index without rebuilding it."""

    def body() -> None:
        store = backend_options(backend, uri, token, tls_ca, lock_wait_s=wait).open(index_dir)
        t0 = time.time()
        # the store's count: an id given twice (--doc-id d1 --doc-id d1) deletes one document
        n = store.delete(doc_ids)
        _print_write_summary(f"deleted {n} document(s)", store, ReadReport(), time.time() - t0)

    _run_guarded(body)


@app.command("compact")
def compact_cmd(
    index_dir: Path = typer.Argument(..., help="Existing index directory."),
    wait: float = WAIT_OPTION,
) -> None:
    """Merge all segments of an index into one, dropping deleted passages; search results do not change
    (commits already merge small segments as they go; this is for a final, single-segment index)."""

    def body() -> None:
        from rich.markup import escape

        from capr.cli.common import err
        from capr.store.embedded import EmbeddedStore

        store = EmbeddedStore(Path(index_dir), lock_wait_s=wait)
        t0 = time.time()
        try:
            s = store.compact(progress=lambda what: err.print(f"  {escape(what)}"))
        finally:
            store.close()
        err.print(f"compacted {escape(str(index_dir))}: {s['segments_before']} segment(s), {s['rows_before']} rows → "
                  f"{s['segments_after']} segment(s), {s['rows_after']} rows ({s['documents']} documents, "
                  f"{s['passages']} passages) in {time.time() - t0:.1f}s")

    _run_guarded(body)


@app.command("stats")
def stats_cmd(
    source: Path = typer.Argument(..., help="File or directory."),
    fmt: Format = typer.Option(Format.auto, "--format", "-f"),
    top: int = typer.Option(30, help="How many aspects to list."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Segmentation report: documents, sections, passages and the most frequent aspects."""

    def body() -> None:
        from capr.index.directory import is_index_dir
        from capr.train.args import OptionRange, check_option

        check_option("--top", top, OptionRange.count)  # 0 or a negative one printed an empty table
        if Path(source).is_dir() and is_index_dir(Path(source)):
            raise CaprError(f"{source}: this is an index; capr stats reports on a corpus (the SOURCE you index)")
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
            write_json(result, indent=None, ensure_ascii=True)
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
