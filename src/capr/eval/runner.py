"""Running a passage benchmark as ``capr eval`` does, from Python: the benchmark registry, which query fields
each benchmark has, where its index is cached, which backend scores it, and the result record.

    result, run = run_eval(EvalConfig(benchmark="medquad-cdv", retriever="dense", query_field="question"))
    result["metrics"]["R@1"]
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence


from capr.errors import CaprError
from capr.eval.benchmarks import (
    BenchmarkData, BenchmarkSearcher, Protocol, QueryField, load_mediqa2019, load_medquad_cdv, load_mtsamples_capr,
    run_benchmark,
)
from capr.eval.beir import BEIR_PREFIX, beir_folder, corpus_stamp, file_stamp, load_beir
from capr.eval.devsets import load_consumer_dev, load_medquad_dev
from capr.models.encoder import EncoderConfig, cache_root, parse_backend
from capr.search import SearchProfile
from capr.records import Retriever
from capr.search.query import DEFAULT_TEMPLATE
from capr.records import Run
from capr.search.fusion import FusionConfig, FusionMethod
from capr.store import Backend, BackendOptions

def _beir_dataset(folder: str, name: str) -> Callable[..., BenchmarkData]:
    """A BEIR-layout folder under the data directory, registered by name."""

    def load(data_dir: str | Path, index_dir: str | Path, **kw: Any) -> BenchmarkData:
        return load_beir(Path(data_dir) / folder, data_dir, index_dir, name=name, **kw)

    return load


def _titles_fixed(loader: Callable[..., BenchmarkData], titled: bool) -> Callable[..., BenchmarkData]:
    """A benchmark whose titles are part of its definition (consumer-dev without, consumer-dev-titled with)."""

    def load(data_dir: str | Path, index_dir: str | Path, titled: Any = None, split: Any = None, **kw: Any) -> BenchmarkData:
        return loader(data_dir, index_dir, titled=fixed, **kw)

    fixed = titled
    return load


# name → loader(data_dir, index_dir, dense=..., progress=...) and the query fields its questions have;
# "beir:PATH" and "mediqa:PATH" name files of those layouts (FILE_BENCHMARKS below)
BENCHMARKS: dict[str, Callable[..., BenchmarkData]] = {
    "medquad-cdv": load_medquad_cdv,
    "mtsamples-capr": load_mtsamples_capr,
    "mediqa2019": load_mediqa2019,
    "mediqa2019-train": partial(load_mediqa2019, name="mediqa2019-train"),
    # dev sets (settings are chosen on these, never on the test splits above): capr.eval.devsets
    "medquad-dev": load_medquad_dev,
    "mtsamples-dev": partial(load_mtsamples_capr, split="train", max_notes=600, n_queries=600, name="mtsamples-dev"),
    # free-text dev sets: consumer questions over whole MedQuAD answers (capr.eval.devsets), and NFCorpus's dev split
    # (its text is the original release's: lower-cased, stop words removed; data/nfcorpus_dev/SOURCE.md)
    "consumer-dev": _titles_fixed(load_consumer_dev, False),
    "consumer-dev-titled": _titles_fixed(load_consumer_dev, True),
    "consumer-dev-sections": _titles_fixed(partial(load_consumer_dev, sections=True), True),
    "nfcorpus-dev": _beir_dataset("nfcorpus_dev", "nfcorpus-dev"),
    # consumer medication questions over pharmacists' answers (MedicationQA's dev half; data/medicationqa_dev/SOURCE.md)
    "medicationqa-dev": _beir_dataset("medicationqa_dev", "medicationqa-dev"),
}
BEIR_DEV_SETS = ("nfcorpus-dev", "medicationqa-dev")  # registered BEIR folders: their judgements come in splits
FREE_TEXT = (QueryField.question,)
DOCUMENT_JUDGED = ("consumer-dev", "consumer-dev-titled", "consumer-dev-sections", *BEIR_DEV_SETS)  # no candidate pools: --protocol full
QUERY_FIELDS: dict[str, tuple[QueryField, ...]] = {
    "medquad-cdv": (QueryField.tuple, QueryField.question),
    "mtsamples-capr": (QueryField.tuple,),
    "mediqa2019": (QueryField.question,),
    "mediqa2019-train": (QueryField.question,),
    "medquad-dev": (QueryField.tuple, QueryField.question),
    "mtsamples-dev": (QueryField.tuple,),
    "consumer-dev": FREE_TEXT,
    "consumer-dev-titled": FREE_TEXT,
    "consumer-dev-sections": FREE_TEXT,
    "nfcorpus-dev": FREE_TEXT,
    "medicationqa-dev": FREE_TEXT,
}


@dataclass(frozen=True)
class FileBenchmark:
    """A benchmark named by where its files are, ``PREFIX:PATH``: how to check, load and version them."""

    prefix: str
    describe: str  # for the list of known benchmarks
    load: Callable[..., BenchmarkData]  # load(path, data_dir, index_dir, dense=..., progress=..., titled=..., ...)
    check: Callable[[Path], Any]  # one clear error when PATH is not such a benchmark
    stamp: Callable[[Path], str]  # names the files' version: a changed file gets a new benchmark index
    fields: tuple[QueryField, ...]
    document_judged: bool  # judged by document, no candidate pools: --protocol full
    splits: bool  # several sets of judgements (--split)


def _existing_file(path: Path) -> Path:
    if path.is_dir():
        raise CaprError(f"{path}: is a folder; mediqa:PATH names a MEDIQA 2019 Task 3 file")
    if not path.is_file():
        raise CaprError(f"{path}: no such file")
    return path


def _load_mediqa_file(path: str, data_dir: str | Path, index_dir: str | Path, **kw: Any) -> BenchmarkData:
    return load_mediqa2019(data_dir, index_dir, name=f"{MEDIQA_PREFIX}{path}", path=path, **kw)


MEDIQA_PREFIX = "mediqa:"
FILE_BENCHMARKS = (
    FileBenchmark(BEIR_PREFIX, "beir:PATH (a BEIR folder)", load_beir, beir_folder, corpus_stamp, FREE_TEXT, True, True),
    FileBenchmark(MEDIQA_PREFIX, "mediqa:PATH (a MEDIQA 2019 Task 3 file with ReferenceScore judgements: each question "
                  "re-ranks its own answers)", _load_mediqa_file, _existing_file, file_stamp, FREE_TEXT, False, False),
)


def file_benchmark(name: str) -> tuple[FileBenchmark, Path] | None:
    """The file benchmark ``name`` spells (``beir:PATH``, ``mediqa:PATH``) and its path; None for a registry name."""
    for fb in FILE_BENCHMARKS:
        if name.startswith(fb.prefix):
            if not name[len(fb.prefix):].strip():  # Path("") is the working directory, which was then named "."
                raise CaprError(f"--benchmark {name!r} names no path: write {fb.describe}")
            return fb, Path(name[len(fb.prefix):])
    return None


def benchmark_loader(name: str) -> Callable[..., BenchmarkData]:
    """The registry's loader of ``name``, or the loader of the files a ``PREFIX:PATH`` name points to."""
    found = file_benchmark(name)
    if found is not None:
        fb, path = found
        return partial(fb.load, str(path))
    if name not in BENCHMARKS:
        raise CaprError(f"unknown benchmark {name!r}; available: {', '.join(BENCHMARKS)}, "
                        f"{', '.join(fb.describe for fb in FILE_BENCHMARKS)}")
    return BENCHMARKS[name]


def check_benchmark(name: str) -> None:
    """Refuses a passage benchmark this runner does not know, naming the similar-case benchmarks `capr eval` runs
    beside them (a ``PREFIX:PATH``'s error is about its path, said when it is read)."""
    if file_benchmark(name) is not None:
        return
    from capr.cases.bench import CaseBenchmark

    try:
        benchmark_loader(name)
    except CaprError as e:
        raise CaprError(f"{e}; similar-case benchmarks (with --index): {', '.join(b.value for b in CaseBenchmark)}, "
                        "mcqa:PATH (MedQA-, MedMCQA- or HEAD-QA-style questions)") from None


def query_fields(name: str) -> tuple[QueryField, ...]:
    found = file_benchmark(name)
    return found[0].fields if found else QUERY_FIELDS[name]
_FIELD_HINT = {QueryField.tuple: "⟨entity, aspect⟩ queries only", QueryField.question: "free-text questions only"}


def check_eval_options(limit: int | None, seed: int, rerank_depth: int | None, rerank_share: float | None,
                       thetas: tuple[float, float] = (0.8, 0.4), dense_k: int | None = None) -> None:
    """One clear error naming the first `capr eval` number out of range, before any benchmark is read. Such values
    ran: --rerank-depth 0 fell back to the default depth and a negative one re-ranked nothing (reported as the
    re-ranker's numbers), a negative --seed drew the same subset as its absolute value, a NaN θ opened no span."""
    from capr.train.args import OptionRange as R
    from capr.train.args import check_options

    check_options([("--limit", limit, R.count), ("--seed", seed, R.seed), ("--rerank-depth", rerank_depth, R.count),
                   ("--rerank-share", rerank_share, R.share), ("--theta-open", thetas[0], R.share),
                   ("--theta-close", thetas[1], R.share), ("--dense-k", dense_k, R.count)])
    if thetas[1] > thetas[0]:  # capr.cdv.spans.BoundaryConfig: a span closes below the score it opened at
        raise CaprError(f"--theta-close ({thetas[1]:g}) must not exceed --theta-open ({thetas[0]:g})")


@dataclass
class EvalConfig:
    benchmark: str = "medquad-cdv"
    data_dir: Path = Path("../shared/data")
    retriever: Retriever = Retriever.bm25
    protocol: Protocol | None = None  # None: full for benchmarks judged by document, else rerank64
    query_field: QueryField | None = None  # None: the benchmark's first (tuple where it has them)
    model: str = "minilm"
    query_model: str | None = None
    encoder_backend: str = "torch"
    template: str = DEFAULT_TEMPLATE
    fusion: FusionMethod = FusionMethod.rrf
    reranker: str | None = None
    rerank_depth: int | None = None  # None: 64 under the papers' protocol, `capr search`'s default with --pipeline default
    cache_dir: Path | None = None
    backend: BackendOptions = field(default_factory=BackendOptions)
    collection: str | None = None  # Milvus collection of the benchmark's passages
    # "default": exactly what `capr search` with default options returns (the same Searcher and SearchOptions()),
    # instead of the papers' protocol of scoring every candidate with one retriever
    pipeline: str = "protocol"
    # the benchmark index reads each passage with its document title in front, as `capr index` does: None = with
    # --pipeline default (what a user's index holds), not under the papers' protocol (passage text only)
    titles: bool | None = None
    rerank_share: float | None = None  # --pipeline default with a re-ranker: None = capr search's default
    entity_synonyms: bool = True  # --pipeline default: as capr search's --entity-synonyms/--no-entity-synonyms
    cdv: Path | None = None  # rank with this CDV model instead of the retriever
    boundaries: str = "fixed"  # free: also score CDV free-boundary spans against the gold passages
    thetas: tuple[float, float] = (0.8, 0.4)
    split: str | None = None  # a BEIR benchmark's judgements: qrels/<split>.tsv (default: test, else dev)
    limit: int | None = None  # a fixed random subset of this many queries (seeded by `seed`), as the case benchmarks
    seed: int = 0

    def __post_init__(self) -> None:
        benchmark_loader(self.benchmark)  # an unknown name: the error lists the known ones
        check_eval_options(self.limit, self.seed, self.rerank_depth, self.rerank_share, self.thetas)
        found = file_benchmark(self.benchmark)
        if found is not None:
            found[0].check(found[1])
        if self.split is not None and not self.is_beir:
            raise CaprError(f"--split is for BEIR benchmarks; {self.benchmark} has one set of judgements")
        self.retriever = Retriever(self.retriever)
        if self.protocol is None:
            judged_by_document = found[0].document_judged if found else self.benchmark in DOCUMENT_JUDGED
            self.protocol = Protocol.full if judged_by_document else Protocol.rerank64
        if self.query_field is None:
            self.query_field = query_fields(self.benchmark)[0]
        try:
            self.protocol = Protocol(self.protocol)
        except ValueError:
            raise CaprError(f"unknown protocol {self.protocol!r}; choose rerank64 or full") from None
        try:
            self.query_field = QueryField(self.query_field)
        except ValueError:
            raise CaprError(f"unknown query field {self.query_field!r}; choose tuple or question") from None
        self.fusion = FusionMethod(self.fusion)
        allowed = query_fields(self.benchmark)
        if self.query_field not in allowed:
            raise CaprError(f"{self.benchmark} has {_FIELD_HINT[allowed[0]]}; use --query-field {allowed[0].value}")
        if self.backend.backend is Backend.milvus and self.retriever is Retriever.tfidf:
            raise CaprError("tfidf is only available on the embedded backend")
        if self.pipeline not in ("protocol", "default"):
            raise CaprError(f"unknown --pipeline {self.pipeline!r}; choose protocol or default")
        if self.pipeline == "default" and self.cdv is not None:
            raise CaprError("--pipeline default is capr search's pipeline: no --cdv")
        if self.boundaries not in ("fixed", "free"):
            raise CaprError(f"unknown --boundaries {self.boundaries!r}; choose fixed or free")
        if self.boundaries == "free" and self.cdv is None:
            raise CaprError("--boundaries free needs a CDV model: add --cdv DIR")
        if self.cdv is not None and self.backend.backend is not Backend.embedded:
            raise CaprError("--cdv needs the embedded index (--backend embedded)")

    @property
    def is_beir(self) -> bool:
        """A benchmark in BEIR's layout: its judgements come in splits."""
        found = file_benchmark(self.benchmark)
        return found[0].splits if found else self.benchmark in BEIR_DEV_SETS

    @property
    def effective_rerank_depth(self) -> int:
        """--rerank-depth, else 64 under the papers' protocol and `capr search`'s (the profile's) with --pipeline default."""
        return self.rerank_depth or (self.profile().rerank_depth if self.pipeline == "default" else 64)

    @property
    def titled(self) -> bool:
        return self.titles if self.titles is not None else self.pipeline == "default"

    @property
    def needs_dense(self) -> bool:
        """The benchmark's index carries vectors: for a dense retriever, and for the default pipeline (which is
        what `capr index` builds by default: BM25 + dense)."""
        if self.cdv is not None:
            return False
        return self.pipeline == "default" or self.retriever in (Retriever.dense, Retriever.hybrid)

    def model_index_dense(self) -> dict[str, Any] | None:
        """``--model`` names an index (e.g. from `capr adapt`): what it records of its vectors."""
        from capr.index import load_index
        from capr.index.directory import is_index_dir

        if not (self.model and is_index_dir(Path(self.model))):
            return None
        dense = load_index(self.model).dense_manifest()
        if not dense:
            raise CaprError(f"{self.model}: the index has no vectors, so it names no encoder to evaluate")
        return dense

    def profile(self) -> SearchProfile:
        """--pipeline default: the search profile `capr search` uses — on an index given as --model, the one that
        index records (its fusion, its second stage) — with --reranker over it."""
        recorded = self.model_index_dense() if self.pipeline == "default" and self.needs_dense else None
        return SearchProfile.from_manifest(recorded).with_reranker(self.reranker)

    @property
    def effective_reranker(self) -> str | None:
        """The second stage evaluated: --reranker (``none``: none), else, for --pipeline default on an index given
        as --model, the one that index records (what `capr search` on it uses)."""
        return self.profile().reranker

    def warnings(self) -> list[str]:
        """What makes this evaluation say less than it seems to: a second stage used outside the reading it was
        chosen for. `capr adapt` gates its ensemble inside `capr search`'s default pipeline — after a hybrid first
        stage with its own model, passages read with their titles, fused with the first stage's rank at the
        ensemble's share — so under the papers' protocol (passage text alone, its order alone, after another first
        stage) its numbers do not tell how it serves search."""
        spec = self.effective_reranker
        if not spec or self.pipeline == "default":
            return []
        from capr.search.second_stage import parse_reranker_spec

        members = parse_reranker_spec(spec)
        if len(members) < 2:
            return []
        return [f"re-ranker {spec!r} is an ensemble, which capr adapt chooses (and capr search runs) inside the default "
                "pipeline: after the hybrid first stage, passages read with their titles, fused with the first stage's "
                "rank at the ensemble's share; here it re-orders another first stage alone, on passage text"
                + ("" if self.titled else " without titles") + " — use --pipeline default (with --model IDX) to measure "
                "what capr search does"]

    def search_options(self) -> Any:
        """--pipeline default: `capr search`'s options; on an index given as --model, with the fusion it records
        (what `capr search` on that index uses)."""
        from capr.search import SearchOptions

        return SearchOptions.from_mapping({"entity_synonyms": self.entity_synonyms, "rerank_share": self.rerank_share},
                                          recorded=self.profile())

    def encoder(self) -> EncoderConfig | None:
        if not self.needs_dense:
            return None
        dense = self.model_index_dense()
        if dense is not None:  # evaluate with the encoder the index was built with
            return EncoderConfig.from_dict(dense["encoder"])
        return EncoderConfig(model=self.model, query_model=self.query_model, backend=parse_backend(self.encoder_backend),
                             max_length=256)

    def index_dir(self) -> Path:
        """Where the benchmark's index is kept between runs: one folder per benchmark and encoder."""
        enc = self.encoder()
        folder = (encoder_slug(enc) if enc else "lexical") + ("-titled" if self.titled else "")
        benchmark = self.benchmark
        found = file_benchmark(benchmark)
        if found is not None:  # one folder per version of the files (a changed file: a new index)
            fb, path = found
            benchmark = (f"{fb.prefix.rstrip(':')}-{re.sub(r'[^A-Za-z0-9_.-]', '_', path.resolve().name)}-"
                         f"{fb.stamp(path)}")
        # a cache folder, the default or one given, holds each benchmark's index in its own sub-folder: two
        # benchmarks, or two versions of one corpus file, never find each other's index there
        return (self.cache_dir or cache_root() / "bench") / benchmark / folder

    def collection_name(self) -> str:
        enc = self.encoder()
        return self.collection or re.sub(r"[^A-Za-z0-9_]", "_",
                                         f"capr_bench_{self.benchmark}_{encoder_slug(enc) if enc else 'lexical'}"
                                         + ("_titled" if self.titled else ""))


def check_run_out(path: Path, benchmark: str, data_dir: Path, index_dir: Path | None = None,
                  compare: Path | None = None, cache_dir: Path | None = None) -> None:
    """Refuses, before the evaluation (the run file is written only once it is over), a ``--run-out`` that cannot be
    written or that is one of the evaluation's inputs: written over the benchmark's queries, corpus or judgements, or
    over the --compare run, it replaced them with the run."""
    from capr.cases.data import MCQA_PREFIX
    from capr.corpus.beir import beir_file

    where = f"{path}: cannot write the run file (--run-out)"
    if path.is_dir() or not path.parent.is_dir():
        raise CaprError(f"{where}: " + ("it is a folder" if path.is_dir() else f"no such folder {path.parent}"))
    inputs: list[tuple[str, Path | None]] = [("the run given to --compare", compare)]
    found = file_benchmark(benchmark)
    if found is not None and found[0].prefix == BEIR_PREFIX:
        folder = found[1]
        inputs += [(f"a file of {benchmark}", beir_file(folder, stem)) for stem in ("corpus", "queries")]
        inputs.append((f"a file of {benchmark}", folder / "qrels"))
    elif found is not None or benchmark.startswith(MCQA_PREFIX):
        file = found[1] if found else Path(benchmark[len(MCQA_PREFIX):])
        inputs.append((f"the file of {benchmark}", file if file.is_file() else None))  # not a file: refused as such
    else:
        inputs.append(("a file of the benchmark data (--data-dir)", data_dir))
    inputs += [("a file of the case index (--index)", index_dir), ("a file of the benchmark cache (--cache-dir)", cache_dir)]
    target = path.resolve()
    for what, given in inputs:
        if given is None or not given.exists():
            continue
        given = given.resolve()
        if target == given or (given.is_dir() and given in target.parents and target.exists()):
            raise CaprError(f"{where}: it is {what}")


def check_run_ids(data: BenchmarkData, path: Path) -> None:
    """Refuses, before the evaluation, a benchmark whose run a TREC file at ``path`` cannot carry: a query or
    document id holding whitespace (capr.eval.runs.check_trec_id)."""
    from capr.eval.runs import check_trec_id

    for q in data.queries:
        check_trec_id(path, "query id", q.qid)
    ranked = data.extra.get("document_of_row") or data.index.pid_rows()  # documents, else passages
    for pid in dict.fromkeys(ranked):
        check_trec_id(path, "document id", pid)


def reading_warnings(data: BenchmarkData) -> list[str]:
    """What reading the benchmark's files found and let pass (e.g. a judgement repeated with the same grade)."""
    return list(data.extra.get("warnings") or ())


def unsearchable_warnings(data: BenchmarkData) -> list[str]:
    """What the evaluation says of the queries the pipeline could not search (each scored as returning nothing)."""
    skipped: dict[str, str] = data.extra.get("unsearchable") or {}
    if not skipped:
        return []
    shown = "; ".join(f"{qid!r}: {reason}" for qid, reason in list(skipped.items())[:3])
    more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return [f"{len(skipped)} of {len(data.queries)} queries cannot be searched and count as returning nothing "
            f"({shown}{more})"]


def encoder_slug(enc: EncoderConfig) -> str:
    return "dense-" + hashlib.sha1(json.dumps(enc.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def load_benchmark(config: EvalConfig, progress: Any = None) -> BenchmarkData:
    extra = {"split": config.split} if config.is_beir else {}
    data = benchmark_loader(config.benchmark)(config.data_dir, config.index_dir(), dense=config.encoder(),
                                              progress=progress, titled=config.titled, **extra)
    return limit_queries(data, config) if config.limit is not None else data


def limit_queries(data: BenchmarkData, config: EvalConfig) -> BenchmarkData:
    """``data`` with a fixed random subset of ``config.limit`` queries (and their judgements), in file order: the
    same limit and seed give the same queries, as `capr eval --limit` gives the case benchmarks. Each query keeps
    the candidates and ranking it has in the whole evaluation."""
    from capr.cases.data import subsample

    if config.limit is None or config.limit >= len(data.queries):
        return data
    extra = dict(data.extra)
    if config.protocol is Protocol.rerank64 and not extra.get("pools"):
        # the pools are shuffled in turn by one seeded generator: drawn for the subset alone, a query would get
        # another pool order (and ties another ranking) than in the whole evaluation
        from capr.eval.benchmarks import rerank64_pools

        extra["pools"] = rerank64_pools(data, config.query_field)
    queries = subsample(data.queries, config.limit, config.seed)
    kept = {q.qid for q in queries}
    return BenchmarkData(data.name, data.index, queries, [q for q in data.qrels if q.qid in kept], extra)


def benchmark_scorer(data: BenchmarkData, config: EvalConfig, progress: Any = None, store_progress: Any = None,
                     cdv_store: Any = None):
    """The candidate scorer of ``config``: the Searcher over the embedded index, or over the benchmark's passages
    loaded into another backend, or CDV; with the re-ranker on top."""
    from capr.eval.benchmarks import benchmark_store, cdv_scorer, default_scorer, rerank_scorer, store_scorer

    fusion = FusionConfig(method=config.fusion)
    if config.pipeline == "default":
        store = None
        if config.backend.backend is Backend.milvus:
            store = benchmark_store(data, config.backend.uri, config.collection_name(), token=config.backend.token,
                                    progress=store_progress, **config.backend.milvus_options())
        reranker = None
        if config.effective_reranker:  # inside the Searcher, exactly as `capr search --reranker` runs it
            from capr.search.second_stage import load_reranker

            reranker = load_reranker(config.effective_reranker)
        scorer = default_scorer(data, config.query_field, store, options=config.search_options(), reranker=reranker,
                                rerank_depth=config.effective_rerank_depth)
    elif cdv_store is not None:
        scorer = cdv_scorer(data, cdv_store, config.query_field)
    elif config.backend.backend is Backend.milvus:
        if not config.backend.uri:
            raise CaprError("--backend milvus needs --uri: a Milvus Lite file (*.db) or http(s)://host:19530")
        store = benchmark_store(data, config.backend.uri, config.collection_name(), token=config.backend.token,
                                progress=store_progress, **config.backend.milvus_options())
        scorer = store_scorer(data, store, config.retriever, config.query_field, config.template, config.protocol, fusion)
    else:
        scorer = BenchmarkSearcher(data, config.query_field).scorer(config.retriever, config.template, fusion, progress)
    if config.effective_reranker and config.pipeline != "default":
        from capr.search.second_stage import load_reranker

        scorer = rerank_scorer(data, scorer, load_reranker(config.effective_reranker), config.effective_rerank_depth)
    return scorer


def compare_coverage(other: Run, data: BenchmarkData, where: str = "the compared run") -> list[str]:
    """Whether ``other`` is a run of ``data``'s queries (capr.eval.judge.run_coverage): none of them in it is an
    error (a run of another benchmark or split would be compared as scoring 0 everywhere, with a p-value); some
    missing is a warning (each counts 0 for it)."""
    from capr.eval.judge import run_coverage

    return run_coverage(other, data.qrels, where, data.name, "--compare needs a run of the same benchmark and split")


def compare_runs(run: Run, other: Run, data: BenchmarkData, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Each metric of ``run`` and ``other`` (e.g. a TREC run file read back) on ``data``'s judgements, per query,
    with the two-sided paired randomisation test (capr.eval.judge.compare_scored); ``other`` must rank some of the
    judged queries (:func:`compare_coverage`)."""
    from capr.eval.judge import compare_scored
    from capr.eval.metrics import METRICS

    compare_coverage(other, data)
    return compare_scored(run, other, data.qrels, names or data.extra.get("metrics", METRICS))


def run_eval(config: EvalConfig, data: BenchmarkData | None = None, progress: Any = None, index_progress: Any = None,
             store_progress: Any = None, cdv_store: Any = None) -> tuple[dict[str, Any], Run]:
    """Metrics (and the run) of ``config``'s pipeline on its benchmark, as the record ``capr eval --json`` prints.
    ``cdv_store``: the benchmark index's CDV vectors under ``config.cdv`` (CDVStore.open)."""
    data = limit_queries(data or load_benchmark(config, index_progress), config)
    scorer = benchmark_scorer(data, config, progress, store_progress, cdv_store)
    t_start = time.time()
    metrics, run = run_benchmark(data, scorer, config.protocol, config.query_field, progress=progress)
    name = "default" if config.pipeline == "default" else config.retriever.value
    run.name = f"capr-{name}-{config.protocol.value}-{config.query_field.value}"
    seconds = round(time.time() - t_start, 1)
    result: dict[str, Any] = {
        "benchmark": config.benchmark,
        "protocol": config.protocol.value,
        "retriever": "cdv" if config.cdv is not None else "default" if config.pipeline == "default" else config.retriever.value,
        "query_field": config.query_field.value,
        "queries": len(data.queries),
        "metrics": metrics,
        "seconds": seconds,
    }
    if config.limit is not None:  # a subset of the queries: said, so that its numbers are not read as the benchmark's
        result["limit"], result["seed"] = config.limit, config.seed
    if config.backend.backend is not Backend.embedded:  # the embedded JSON keeps its keys (scripts compare them)
        result["index_backend"] = config.backend.backend.value
    if config.titled:  # the index read titles, as `capr index` does (the papers' protocol does not)
        result["titles"] = True
    if config.pipeline == "default" and not config.entity_synonyms:
        result["entity_synonyms"] = False
    if config.effective_reranker:
        result["reranker"] = {"spec": config.effective_reranker, "depth": config.effective_rerank_depth}
        if config.pipeline == "default":
            from capr.search.second_stage import spec_share

            result["reranker"]["share"] = spec_share(config.effective_reranker, config.search_options().rerank_share)
    warnings = config.warnings() + reading_warnings(data) + unsearchable_warnings(data)
    if warnings:
        result["warnings"] = warnings
    if config.cdv is not None:
        result["cdv"] = str(config.cdv)
    if config.boundaries == "free":
        from capr.cdv.spans import BoundaryConfig
        from capr.eval.benchmarks import boundary_eval

        result["boundaries"] = boundary_eval(data, cdv_store, config.query_field, BoundaryConfig(*config.thetas),
                                             progress=progress)
    if config.needs_dense:
        result["encoder"] = {"model": config.model, "backend": config.encoder_backend, "template": config.template}
        if config.retriever is Retriever.hybrid:
            result["fusion"] = config.fusion.value
        recorded = config.search_options().fusion if config.pipeline == "default" else None
        if recorded is not None:  # the fusion the index given as --model records
            result["fusion"] = {"method": recorded.method.value, "weights": list(recorded.weights)}
    return result, run


__all__ = ["BENCHMARKS", "EvalConfig", "QUERY_FIELDS", "benchmark_loader", "benchmark_scorer", "check_benchmark",
           "compare_runs", "encoder_slug",
           "limit_queries", "load_benchmark", "run_eval", "check_eval_options", "check_run_out"]
