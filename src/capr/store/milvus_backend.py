"""The Milvus backend: capr's passages, metadata and vectors in a Milvus collection.

capr still does what makes its results capr's — segmentation, the analyzer (stopwords, stemming), the
encoders, and the whole search pipeline (``capr.search.Searcher``: query construction, the aspect prior,
fusion, re-ranking, evidence) — and Milvus stores and searches, through the Store primitives:

- dense: a ``FLOAT_VECTOR`` searched by inner product (vectors are L2-normalised: cosine). The default
  index is ``FLAT`` (exact, same results as the embedded backend); HNSW/IVF for very large collections.
- lexical: where the server has the BM25 function (Milvus ≥ 2.5, Milvus Lite ≥ 2.5) a ``lex`` text field
  holds the passage *already analysed by capr* (tokens joined by spaces) and Milvus' BM25 function turns
  it into a sparse vector with a whitespace tokenizer. So the terms, and therefore the scores, are capr's
  BM25 (k1, b, Lucene idf); Milvus' scores are divided by (k1 + 1) to be on capr's scale. Servers without
  it (Milvus 2.3) hold dense vectors only and lexical searches are refused with the reason.
- filters: Milvus boolean expressions on ``aspect``, ``doc_id``, ``title``, ``heading`` and, for any
  other field, the document metadata JSON (``metadata["specialty"] == "Neurology"``).
- hybrid: capr's fusion (RRF or weighted) over the engine's BM25 and dense top lists, so the hybrid
  results contract is the embedded one (Milvus' own ``hybrid_search`` + RRFRanker would rank ties and
  missing entries differently, and gives no weighted min-max fusion).

Per collection, capr's settings (analyzer, segmenter, BM25 parameters, encoder) and the known fields and
aspects are kept in one row of the ``capr_meta`` collection next to it. Rows carry an insertion sequence
number (``seq``) so that ties break in insertion order, as they do in the embedded index.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from capr._version import __version__
from capr.corpus.report import ReadReport, admit_document
from capr.corpus.segment import SegmenterConfig, segment
from capr.errors import CaprError, QueryError
from capr.filters import FilterClause, as_clauses, bound_kind_error, known_field, named_values, text_bound
from capr.text.analyzer import Analyzer, AnalyzerConfig
from capr.text.bm25 import BM25Params
from capr.index.segment import passage_index_text
from capr.records import Retriever
from capr.text.aspects import check_aspect, filter_aspect, no_aspect_message
from capr.records import DEFAULT_MAX_DOC_CHARS, Document, Passage, Section
from capr.store.milvus_filters import filter_keys, kind_counts, milvus_expr, without_filter_keys
from capr.store.protocol import Backend, Capability

if TYPE_CHECKING:
    from capr.models.encoder import EncoderConfig

META = "capr_meta"
SCHEMA_VERSION = 2  # 2: metadata rows carry filter keys (capr.store.milvus_filters)
MAX_TEXT = 65535  # Milvus VARCHAR limit (bytes)
MAX_KEY = 1024
MAX_SHORT = 4096
BUILTIN = ("aspect", "doc_id", "title", "heading", "pid")
INSERT_BATCH = 500
EXISTS_BATCH = 500
OUTPUT = ["pid", "doc_id", "text", "aspect", "title", "heading", "start_char", "end_char", "sentences", "metadata", "seq"]
DENSE_INDEXES = ("FLAT", "HNSW", "IVF_FLAT", "AUTOINDEX")
# Searches read with Session consistency: this client sees its own writes at once, and nobody waits for the
# next time tick (Strong costs ~200 ms per search on Milvus 2.3). Writes' own checks (does this doc_id
# exist? how many passages?) read Strong; a Strong read also moves the server's serviceable time past
# every acknowledged write, so a later search from another process sees them too.
READ_CONSISTENCY = "Session"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")


def _pymilvus():
    try:
        import pymilvus
    except ImportError:
        raise CaprError("the Milvus backend needs pymilvus: pip install 'capr[milvus]'") from None
    return pymilvus


def check_uri(uri: str) -> str:
    """A Milvus Lite file (``*.db``) or a server URL; anything else is refused before connecting."""
    u = uri.strip()
    if u.endswith(".db") and "://" not in u:
        return u
    m = re.match(r"^(https?|tcp|grpc)://([^/:\s]+)(:(\d{1,5}))?/?$", u)
    if not m or (m.group(4) and not 0 < int(m.group(4)) < 65536):
        raise CaprError(
            f"bad Milvus URI {uri!r}: use a Milvus Lite file ending in .db (e.g. ./capr.db) or a server URL "
            "such as http://localhost:19530 (https:// for TLS)"
        )
    return u


def check_collection_name(name: str) -> str:
    if not _NAME_RE.match(name) or name == META:
        raise CaprError(f"bad Milvus collection name {name!r}: letters, digits and underscores, starting with a "
                        f"letter or underscore (and not {META!r})")
    return name


def _quote(value: Any) -> str:
    """A Milvus expression string literal (double quotes; backslash and quote escaped)."""
    s = str(value)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _clip(s: str, limit: int) -> str:
    b = s.encode("utf-8")
    return s if len(b) <= limit else b[:limit].decode("utf-8", errors="ignore")


class MilvusStore:
    backend = Backend.milvus

    def __init__(self, client: Any, uri: str, name: str, meta: dict[str, Any]) -> None:
        self.client = client
        self.uri = uri
        self.name = name
        self.meta = meta
        self.analyzer = Analyzer(AnalyzerConfig.from_dict(meta["analyzer"]))
        self.segmenter = SegmenterConfig(**meta["segmenter"])
        self.bm25 = BM25Params(**meta["bm25"])
        self._encoder = None
        self._seen: dict[int, dict] = {}  # seq → the row a recent search returned (passages() reads it back)

    @property
    def bm25_params(self) -> BM25Params:
        return self.bm25

    @property
    def capabilities(self) -> frozenset[Capability]:
        caps = set()
        if self.has_lexical:
            caps.add(Capability.bm25)
        if self.has_dense:
            caps.add(Capability.dense)
        return frozenset(caps)

    # -- connection -------------------------------------------------------------------------
    @staticmethod
    def connect(uri: str, token: str | None = None, timeout: float = 15.0, **options: Any) -> Any:
        """A MilvusClient, or a CaprError naming the URI and the reason. TLS: an https:// URI, or
        ``secure=True`` with ``server_pem_path``/``ca_pem_path`` for a private CA."""
        uri = check_uri(uri)
        pm = _pymilvus()
        kwargs = {k: v for k, v in options.items() if v is not None}
        try:
            return pm.MilvusClient(uri=uri, token=token or "", timeout=timeout, **kwargs)
        except pm.MilvusException as e:
            raise CaprError(f"cannot connect to Milvus at {uri}: {e.message}") from None
        except Exception as e:  # noqa: BLE001 - grpc/timeout errors are not MilvusException
            raise CaprError(f"cannot connect to Milvus at {uri}: {type(e).__name__}: {e}") from None

    @classmethod
    def open(cls, uri: str, name: str, token: str | None = None, **options: Any) -> "MilvusStore":
        client = cls.connect(uri, token, **options)
        check_collection_name(name)
        meta = _read_meta(client, name)
        if meta is None or not client.has_collection(name):
            have = [c for c in client.list_collections() if c != META]
            raise CaprError(f"no capr collection {name!r} on Milvus at {uri}"
                            + (f"; collections there: {', '.join(sorted(have))}" if have else "; it has none")
                            + " (create one with `capr index SOURCE --out NAME --backend milvus --uri URI`)")
        client.load_collection(name)
        return cls(client, uri, name, meta)

    @classmethod
    def exists(cls, uri: str, name: str, token: str | None = None, **options: Any) -> bool:
        """Whether a capr collection ``name`` is on the Milvus at ``uri`` (one of an older schema too)."""
        client = cls.connect(uri, token, **options)
        try:
            return client.has_collection(check_collection_name(name)) and _read_meta(client, name) is not None
        except CaprError:
            return True  # a capr collection this capr cannot read
        finally:
            client.close()

    @classmethod
    def create(cls, uri: str, name: str, token: str | None = None, segmenter: SegmenterConfig | None = None,
               analyzer: AnalyzerConfig | None = None, bm25: BM25Params | None = None,
               dense: "EncoderConfig | None" = None, lexical: str = "auto", index_type: str = "FLAT",
               **options: Any) -> "MilvusStore":
        """Creates (replacing) collection ``name``. ``lexical``: ``auto`` (BM25 when the server has it),
        ``bm25`` (required) or ``none``."""
        if lexical not in ("auto", "bm25", "none"):
            raise CaprError(f"lexical must be auto, bm25 or none, not {lexical!r}")
        if index_type not in DENSE_INDEXES:
            raise CaprError(f"unknown Milvus vector index {index_type!r}; choose {', '.join(DENSE_INDEXES)}")
        check_collection_name(name)
        client = cls.connect(uri, token, **options)
        dim = None
        if dense is not None:
            from capr.models.encoder import Encoder

            enc = Encoder(dense)
            dim = int(enc.encode_queries(["dimension probe"]).shape[1])
        meta = {
            "schema_version": SCHEMA_VERSION, "capr_version": __version__,
            "analyzer": (analyzer or AnalyzerConfig()).to_dict(), "segmenter": asdict(segmenter or SegmenterConfig()),
            "bm25": asdict(bm25 or BM25Params()), "dense": {"encoder": dense.to_dict(), "dim": dim} if dense else None,
            "index_type": index_type, "lexical": None, "fields": sorted(BUILTIN), "aspects": [],
            "next_seq": 0, "documents": 0,
        }
        _ensure_meta(client)
        if client.has_collection(name):
            client.drop_collection(name)
        want_bm25 = lexical in ("auto", "bm25")
        if want_bm25:
            # the probe's expected failure on old servers is not an error to log (pymilvus logs it itself)
            logging.disable(logging.ERROR)
            try:
                try:
                    _create_collection(client, name, dim, bm25=True, bm25_params=meta["bm25"], index_type=index_type)
                except Exception as e:  # noqa: BLE001
                    if "tokenizer" not in str(e):
                        raise
                    # Some builds (milvus-lite 3.x) lack the whitespace tokenizer; "standard" (Unicode word
                    # boundaries) leaves capr's tokens — lower-case runs of word characters — whole as well.
                    if client.has_collection(name):
                        client.drop_collection(name)
                    _create_collection(client, name, dim, bm25=True, bm25_params=meta["bm25"], index_type=index_type,
                                       tokenizer="standard")
                meta["lexical"] = "bm25"
            except Exception as e:  # noqa: BLE001 - servers before 2.5 reject the function or the sparse type
                if lexical == "bm25":
                    raise CaprError(f"Milvus at {uri} cannot hold a BM25 function (needs Milvus >= 2.5): {e}") from None
                if client.has_collection(name):
                    client.drop_collection(name)
            finally:
                logging.disable(logging.NOTSET)
        if meta["lexical"] is None:
            _create_collection(client, name, dim, bm25=False, bm25_params=meta["bm25"], index_type=index_type)
        _write_meta(client, name, meta)
        store = cls(client, uri, name, meta)
        if dense is not None:
            store._encoder = enc
        return store

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing a dead connection is not an error worth raising
            pass

    # -- properties ---------------------------------------------------------------------------
    @property
    def has_dense(self) -> bool:
        return bool(self.meta.get("dense"))

    def dense_manifest(self) -> dict[str, Any]:
        return dict(self.meta.get("dense") or {})

    def includes_titles(self) -> bool:
        return bool(self.segmenter.include_title)

    @property
    def has_lexical(self) -> bool:
        return self.meta.get("lexical") == "bm25"

    def encoder(self):
        if not self.has_dense:
            raise QueryError(f"Milvus collection {self.name!r} has no vectors; create it with `capr index` (without --lexical-only)")
        if self._encoder is None:
            from capr.models.encoder import Encoder, EncoderConfig

            self._encoder = Encoder(EncoderConfig.from_dict(self.meta["dense"]["encoder"]))
        return self._encoder

    def counts(self) -> dict[str, int]:
        res = self.client.query(self.name, filter="", output_fields=["count(*)"], consistency_level="Strong")
        return {"documents": int(self.meta.get("documents", 0)), "passages": int(res[0]["count(*)"])}

    def aspects(self) -> list[str]:
        return list(self.meta.get("aspects", []))

    # -- writing ------------------------------------------------------------------------------
    def _existing(self, doc_ids: list[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(doc_ids), EXISTS_BATCH):
            chunk = doc_ids[i : i + EXISTS_BATCH]
            expr = f"doc_id in [{', '.join(_quote(d) for d in chunk)}]"
            for row in self.client.query(self.name, filter=expr, output_fields=["doc_id"], limit=16384,
                                         consistency_level="Strong"):
                found.add(row["doc_id"])
        return found

    def has_document(self, doc_id: str) -> bool:
        return bool(self._existing([doc_id]))

    def _rows(self, doc: Document, passages: list[Passage], vectors: np.ndarray | None, seq0: int) -> list[dict]:
        rows = []
        meta_json = {k: v for k, v in doc.metadata.items() if isinstance(v, (str, int, float, bool)) or v is None}
        meta_json.update(filter_keys(meta_json))
        for i, p in enumerate(passages):
            row = {
                "pid": _clip(p.pid, MAX_KEY), "doc_id": _clip(p.doc_id, MAX_KEY), "text": _clip(p.text, MAX_TEXT),
                "aspect": _clip(p.aspect or "", MAX_SHORT), "title": _clip(p.title or "", MAX_SHORT),
                "heading": _clip(p.heading or "", MAX_SHORT), "start_char": int(p.start), "end_char": int(p.end),
                "sentences": {"spans": [list(s) for s in p.sentences]}, "metadata": meta_json, "seq": seq0 + i,
            }
            if self.has_lexical:
                row["lex"] = _clip(" ".join(self.analyzer(passage_index_text(p, self.segmenter.include_title))), MAX_TEXT)
            row["vector"] = vectors[i].tolist() if vectors is not None else [1.0, 0.0]
            rows.append(row)
        return rows

    def add(self, documents: Iterable[Document], progress: Any = None, batch_docs: int = 1000,
            vectors_of: Callable[[list[Passage]], np.ndarray] | None = None, report: Any = None,
            max_doc_chars: int = DEFAULT_MAX_DOC_CHARS) -> int:
        """Segments and (with vectors) encodes documents in batches and inserts their passages. A document
        whose id is already there is replaced (its old passages deleted first). Not transactional: a writer
        that dies part-way leaves the batches it inserted (re-running the add replaces them).
        ``vectors_of`` supplies vectors computed elsewhere (e.g. by a Ray embedding job, or an embedded
        index being copied) instead of encoding here."""
        total = 0
        seen: set[str] = set()
        batch: list[Document] = []
        report = report if report is not None else ReadReport()  # no report to skip into: a bad document fails
        for doc in documents:
            if admit_document(doc, report, max_doc_chars, seen) is None:
                continue
            seen.add(doc.doc_id)
            batch.append(doc)
            if len(batch) >= batch_docs:
                total += self._add_batch(batch, progress, vectors_of)
                batch = []
        if batch:
            total += self._add_batch(batch, progress, vectors_of)
        return total

    def _add_batch(self, docs: list[Document], progress: Any,
                   vectors_of: Callable[[list[Passage]], np.ndarray] | None = None) -> int:
        pieces = [(d, segment(d, self.segmenter)) for d in docs]
        pieces = [(d, ps) for d, ps in pieces if ps]
        if not pieces:
            return 0
        ids = [d.doc_id for d, _ in pieces]
        existing = self._existing(ids)
        if existing:
            self.client.delete(self.name, filter=f"doc_id in [{', '.join(_quote(d) for d in existing)}]")
        vectors = None
        if self.has_dense and vectors_of is not None:
            vectors = np.asarray(vectors_of([p for _, ps in pieces for p in ps]), dtype=np.float32)
        elif self.has_dense:
            enc = self.encoder()
            # a model trained with document context reads each passage with its title, as in the embedded index
            texts = [enc.passage_text(p, passage_index_text(p, self.segmenter.include_title)) for _, ps in pieces for p in ps]
            vectors = enc.encode_passages(texts)
        rows: list[dict] = []
        seq = int(self.meta["next_seq"])
        fields, aspects = set(self.meta["fields"]), set(self.meta["aspects"])
        for d, ps in pieces:
            vec = vectors[len(rows) : len(rows) + len(ps)] if vectors is not None else None
            rows.extend(self._rows(d, ps, vec, seq + len(rows)))
            fields.update(k for k, v in d.metadata.items() if isinstance(v, (str, int, float, bool)))
            aspects.update(p.aspect for p in ps if p.aspect)
        for i in range(0, len(rows), INSERT_BATCH):
            self.client.insert(self.name, rows[i : i + INSERT_BATCH])
            if progress is not None:
                progress(min(INSERT_BATCH, len(rows) - i))
        self.meta.update(next_seq=seq + len(rows), fields=sorted(fields), aspects=sorted(aspects),
                         documents=int(self.meta.get("documents", 0)) + len(set(ids) - existing))
        _write_meta(self.client, self.name, self.meta)
        return len(rows)

    def delete(self, doc_ids: Iterable[str]) -> int:
        ids = list(dict.fromkeys(doc_ids))
        existing = self._existing(ids)
        missing = [d for d in ids if d not in existing]
        if missing:
            raise QueryError(f"no document with id {missing[0]!r}")
        self.client.delete(self.name, filter=f"doc_id in [{', '.join(_quote(d) for d in ids)}]")
        self.meta["documents"] = max(0, int(self.meta.get("documents", 0)) - len(ids))
        _write_meta(self.client, self.name, self.meta)
        return len(ids)

    # -- reading ------------------------------------------------------------------------------
    def passage_by_pid(self, pid: str) -> Passage:
        rows = self.client.query(self.name, filter=f"pid == {_quote(pid)}", output_fields=OUTPUT)
        if not rows:
            raise QueryError(f"no passage with id {pid!r}")
        return _passage(rows[0])

    def has_passage(self, pid: str) -> bool:
        return bool(self.client.query(self.name, filter=f"pid == {_quote(pid)}", output_fields=["seq"]))

    def document_passages(self, doc_id: str) -> list[Passage]:
        rows = self.client.query(self.name, filter=f"doc_id == {_quote(doc_id)}", output_fields=OUTPUT, limit=16384)
        if not rows:
            raise QueryError(f"no document with id {doc_id!r}")
        return [_passage(r) for r in sorted(rows, key=lambda r: r["start_char"])]

    def document(self, doc_id: str) -> Document:
        """Rebuilt from its passages: text between passages is not stored (no ``documents`` capability)."""
        passages = self.document_passages(doc_id)
        chars = [" "] * max(p.end for p in passages)
        for p in passages:
            chars[p.start : p.start + len(p.text)] = p.text
        sections = [Section(heading=p.heading, aspect=p.aspect or "", start=p.start, end=p.end) for p in passages]
        first = passages[0]
        return Document(doc_id=doc_id, title=first.title, text="".join(chars), metadata=first.metadata, sections=sections)

    def stats(self) -> dict[str, int]:
        return self.counts()

    def live_count(self) -> int:
        return self.counts()["passages"]

    def row_count(self) -> int:
        return int(self.meta["next_seq"])

    def generation_info(self) -> dict[str, Any]:
        return {"generation": f"milvus:{self.name}", "created": None, "segments": 0}

    def fields(self) -> list[str]:
        return list(self.meta["fields"])

    def has_aspect(self, aspect: str) -> bool:
        return aspect in self.meta.get("aspects", [])

    def term_idf(self, terms: Iterable[str]) -> dict[str, float]:
        # Milvus does not expose collection statistics: every term weighs the same (no collection_stats)
        return {t: 1.0 for t in terms}

    def keys_of(self, pids: list[str]) -> np.ndarray:
        seq: dict[str, int] = {}
        for i in range(0, len(pids), EXISTS_BATCH):
            chunk = pids[i : i + EXISTS_BATCH]
            for row in self.client.query(self.name, filter=f"pid in [{', '.join(_quote(p) for p in chunk)}]",
                                         output_fields=["pid", "seq"], limit=16384):
                seq[row["pid"]] = int(row["seq"])
        missing = [p for p in pids if p not in seq]
        if missing:
            raise QueryError(f"no passage with id {missing[0]!r}")
        return np.asarray([seq[p] for p in pids], dtype=np.int64)

    def _rows_of(self, keys: np.ndarray) -> list[dict]:
        want = [int(k) for k in keys if int(k) not in self._seen]
        for i in range(0, len(want), EXISTS_BATCH):
            for row in self.client.query(self.name, filter=f"seq in [{', '.join(map(str, want[i : i + EXISTS_BATCH]))}]",
                                         output_fields=OUTPUT, limit=16384):
                self._remember([row])
        return [self._seen[int(k)] for k in keys]

    def _remember(self, rows: list[dict]) -> None:
        if len(self._seen) > 50_000:
            self._seen.clear()
        for r in rows:
            self._seen[int(r["seq"])] = r

    def passages(self, keys: np.ndarray) -> list[Passage]:
        return [_passage(r) for r in self._rows_of(keys)]

    def aspect_flags(self, keys: np.ndarray, aspect: str) -> np.ndarray:
        return np.asarray([r["aspect"] == aspect for r in self._rows_of(keys)], dtype=bool)

    # -- filters ------------------------------------------------------------------------------
    def compile_filter(self, filters: Any) -> str:
        """:meth:`filter_expr`, after refusing, as the embedded index does, a value that a ``!=``, ``not in`` or
        many-valued ``in`` names and no passage has (one count per such value; that of an ``=`` is refused when the
        search comes back empty: :meth:`explain_empty`) and a text range bound on a field of dates or numbers."""
        for c in (known_field(c, self.meta["fields"]) for c in as_clauses(filters)):
            if text_bound(c) and c.field not in BUILTIN:
                self._check_bound(c)
            elif c.op in ("!=", "not in") or len(c.values) > 1:
                self._check_held(c)
        return self.filter_expr(filters)

    def _check_bound(self, clause: FilterClause) -> None:
        """A text range bound on a field of dates only (or numbers only) is refused, as the embedded index does."""
        def count(expr: str) -> int:
            return int(self.client.query(self.name, filter=expr, output_fields=["count(*)"])[0]["count(*)"])

        n = {what: count(expr) for what, expr in kind_counts(clause.field).items()}
        kind = None if not n["present"] else "dates" if n["dates"] == n["present"] else \
            "numbers" if n["numbers"] == n["present"] else None
        example = ""
        if kind == "dates":
            row = self.client.query(self.name, filter=kind_counts(clause.field)["dates"], output_fields=["metadata"], limit=1)
            example = str(row[0]["metadata"].get(clause.field, "")) if row else ""
        if (error := bound_kind_error(clause, kind, example)) is not None:
            raise error

    def filter_expr(self, filters: Any) -> str:
        """A Milvus expression for a {field: value} dict or range/set clauses (capr.filters)."""
        clauses = [known_field(c, self.meta["fields"]) for c in as_clauses(filters)]
        return milvus_expr(self._normalized(clauses), BUILTIN)

    def _normalized(self, clauses: list[FilterClause]) -> list[FilterClause]:
        """Aspect values as the corpus aspects they select (capr.search.query.filter_aspect), as the embedded index reads them."""
        if not any(c.field == "aspect" for c in clauses):
            return clauses
        counts = self.aspect_counts()
        analyzer = self.analyzer if counts else None  # no aspects recorded: none for a value to read as

        def norm(v: object) -> str:
            return filter_aspect(v, counts, analyzer)

        return [FilterClause(c.field, c.op, tuple(norm(v) for v in c.value) if c.op in ("in", "not in")
                             else norm(c.value)) if c.field == "aspect" else c for c in clauses]

    def explain_empty(self, filters: Any) -> None:
        """The embedded backend's error for a filter value no passage has, found only when a filtered
        search comes back empty (one count per value of an ``=`` or ``in`` clause then, nothing extra on the
        common path)."""
        for c in (known_field(c, self.meta["fields"]) for c in as_clauses(filters)):
            if c.op in ("=", "in"):
                self._check_held(c)

    def _check_held(self, clause: FilterClause) -> None:
        for w in named_values(clause):
            eq = FilterClause(clause.field, "=", w)
            res = self.client.query(self.name, filter=milvus_expr(self._normalized([eq]), BUILTIN), output_fields=["count(*)"])
            if int(res[0]["count(*)"]) == 0:
                shown = f"{clause.field}={w!r}"
                if clause.field == "aspect":
                    raise QueryError(no_aspect_message(w, shown, self.aspect_counts()))
                raise QueryError(f"no passage has {shown}")

    def aspect_counts(self) -> dict[str, int | None]:
        """Aspects with passage counts unknown (None): capr's meta row keeps the list, not the counts."""
        return {a: None for a in self.aspects()}

    def check_aspect(self, aspect: str) -> None:
        check_aspect(aspect, self.aspect_counts())

    # -- search primitives --------------------------------------------------------------------
    def _ranked(self, res: Any, lexical: bool) -> tuple[np.ndarray, np.ndarray]:
        hits = [{**h["entity"], "_score": float(h["distance"])} for h in res[0]]
        if lexical:
            scale = 1.0 / (self.bm25.k1 + 1.0)  # Lucene's (k1 + 1) numerator: capr's BM25 omits it
            for h in hits:
                # BM25 scores are positive; milvus-lite 3.x reports them negated, as a distance
                h["_score"] = abs(h["_score"]) * scale
            hits = [h for h in hits if h["_score"] > 0]
        self._remember(hits)
        return (np.asarray([h["seq"] for h in hits], dtype=np.int64),
                np.asarray([h["_score"] for h in hits], dtype=np.float32))

    def lexical_top(self, terms: list[str], k: int, flt: str = "", method: Any = Retriever.bm25) -> tuple[np.ndarray, np.ndarray]:
        if Retriever(method) is not Retriever.bm25:
            raise QueryError("tfidf is only available on the embedded backend; use bm25, dense or hybrid")
        if not self.has_lexical:
            raise QueryError(f"Milvus collection {self.name!r} has no BM25 field (the server has no BM25 function: "
                             "Milvus >= 2.5 needed); use --retriever dense")
        if not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        res = self.client.search(self.name, data=[" ".join(terms)], anns_field="sparse", limit=k, filter=flt or "",
                                 output_fields=OUTPUT, consistency_level=READ_CONSISTENCY,
                                 search_params={"metric_type": "BM25", "params": {"drop_ratio_search": 0.0}})
        return self._ranked(res, lexical=True)

    def restrict(self, flt: str, keys: np.ndarray) -> str:
        """The filter expression narrowed to the given passages."""
        return f"({flt}) and {self._restricted(keys)}" if flt else self._restricted(keys)

    def passing(self, flt: str, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64)
        found: set[int] = set()
        for i in range(0, len(keys), EXISTS_BATCH):
            chunk = keys[i : i + EXISTS_BATCH]
            found.update(int(r["seq"]) for r in self.client.query(self.name, filter=self.restrict(flt, chunk),
                                                                   output_fields=["seq"], limit=16384))
        return np.asarray([int(k) in found for k in keys], dtype=bool)

    def _restricted(self, keys: np.ndarray) -> str:
        return f"seq in [{', '.join(str(int(k)) for k in keys)}]"

    def _scores_at(self, keys: np.ndarray, ranked: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        got = dict(zip(ranked[0].tolist(), ranked[1].tolist()))
        return np.asarray([got.get(int(k), 0.0) for k in keys], dtype=np.float32)

    def lexical_scores(self, terms: list[str], keys: np.ndarray | None, method: Any = Retriever.bm25) -> np.ndarray:
        """BM25 of each given passage (0 where it scores nothing): a search restricted to them (``seq in [...]``)."""
        if keys is None:
            raise QueryError("Milvus scores candidates, not every passage (no exhaustive capability)")
        return self._scores_at(keys, self.lexical_top(terms, len(keys), self._restricted(keys), method))

    def top(self, scores: np.ndarray, k: int, flt: Any = None) -> tuple[np.ndarray, np.ndarray]:
        raise QueryError("Milvus returns top lists itself (no exhaustive capability)")

    def document_rows(self, mask: np.ndarray) -> np.ndarray:
        raise QueryError("Milvus has no row masks (no exhaustive capability)")

    def dense_top(self, qvec: np.ndarray, k: int, flt: str = "") -> tuple[np.ndarray, np.ndarray]:
        params = {"metric_type": "IP", "params": {"ef": max(128, k)} if self.meta.get("index_type") == "HNSW" else {}}
        res = self.client.search(self.name, data=[np.asarray(qvec, dtype=np.float32).tolist()], anns_field="vector",
                                 limit=k, filter=flt or "", output_fields=OUTPUT, search_params=params,
                                 consistency_level=READ_CONSISTENCY)
        return self._ranked(res, lexical=False)

    def dense_scores(self, qvec: np.ndarray, keys: np.ndarray) -> np.ndarray:
        return self._scores_at(keys, self.dense_top(qvec, len(keys), self._restricted(keys)))


# ------------------------------------------------------------------------------ schema and meta
def _passage(h: dict) -> Passage:
    return Passage(pid=h["pid"], doc_id=h["doc_id"], text=h["text"], aspect=h["aspect"] or None,
                   start=int(h["start_char"]), end=int(h["end_char"]),
                   sentences=[(int(a), int(b)) for a, b in (h.get("sentences") or {}).get("spans", [])],
                   title=h.get("title") or "", heading=h.get("heading") or "", metadata=without_filter_keys(h.get("metadata") or {}))


def _create_collection(client: Any, name: str, dim: int | None, bm25: bool, bm25_params: dict, index_type: str,
                       tokenizer: str = "whitespace") -> None:
    pm = _pymilvus()
    DataType = pm.DataType
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pid", DataType.VARCHAR, is_primary=True, max_length=MAX_KEY)
    schema.add_field("doc_id", DataType.VARCHAR, max_length=MAX_KEY)
    schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT)
    schema.add_field("aspect", DataType.VARCHAR, max_length=MAX_SHORT)
    schema.add_field("title", DataType.VARCHAR, max_length=MAX_SHORT)
    schema.add_field("heading", DataType.VARCHAR, max_length=MAX_SHORT)
    schema.add_field("start_char", DataType.INT64)
    schema.add_field("end_char", DataType.INT64)
    schema.add_field("seq", DataType.INT64)
    schema.add_field("sentences", DataType.JSON)  # {"spans": [[start, end], ...]}: Milvus 2.3 JSON must be an object
    schema.add_field("metadata", DataType.JSON)
    # Without vectors a collection still needs a vector field: a constant 2-d placeholder.
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim or 2)
    index_params = client.prepare_index_params()
    vparams = {"M": 32, "efConstruction": 200} if index_type == "HNSW" else {"nlist": 1024} if index_type == "IVF_FLAT" else {}
    index_params.add_index(field_name="vector", index_type=index_type, metric_type="IP", params=vparams)
    if bm25:
        # capr analyses the text itself; Milvus only splits capr's tokens on whitespace and counts them.
        schema.add_field("lex", DataType.VARCHAR, max_length=MAX_TEXT, enable_analyzer=True,
                         analyzer_params={"tokenizer": tokenizer})
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(pm.Function(name="bm25", function_type=pm.FunctionType.BM25,
                                        input_field_names=["lex"], output_field_names=["sparse"]))
        index_params.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                               params={"bm25_k1": bm25_params["k1"], "bm25_b": bm25_params["b"]})
    client.create_collection(name, schema=schema, index_params=index_params, consistency_level="Strong")


def _ensure_meta(client: Any) -> None:
    if client.has_collection(META):
        return
    pm = _pymilvus()
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("name", pm.DataType.VARCHAR, is_primary=True, max_length=256)
    schema.add_field("config", pm.DataType.VARCHAR, max_length=MAX_TEXT)
    schema.add_field("vector", pm.DataType.FLOAT_VECTOR, dim=2)
    index_params = client.prepare_index_params()
    index_params.add_index(field_name="vector", index_type="FLAT", metric_type="L2")
    client.create_collection(META, schema=schema, index_params=index_params, consistency_level="Strong")


def _write_meta(client: Any, name: str, meta: dict) -> None:
    text = json.dumps(meta, ensure_ascii=False)
    if len(text.encode("utf-8")) > MAX_TEXT:  # an enormous aspect/field list: keep what filters need
        meta = {**meta, "aspects": meta["aspects"][:500]}
        text = json.dumps(meta, ensure_ascii=False)
    client.upsert(META, [{"name": name, "config": text, "vector": [0.0, 0.0]}])


def _read_meta(client: Any, name: str) -> dict | None:
    if not client.has_collection(META):
        return None
    client.load_collection(META)
    rows = client.query(META, filter=f"name == {_quote(name)}", output_fields=["config"])
    if not rows:
        return None
    meta = json.loads(rows[0]["config"])
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise CaprError(f"Milvus collection {name!r} was written by capr schema {meta.get('schema_version')}; "
                        f"this capr reads schema {SCHEMA_VERSION}: rebuild it with `capr index`")
    return meta

