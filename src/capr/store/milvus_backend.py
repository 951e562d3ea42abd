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

import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from capr._version import __version__
from capr.corpus.passages import Admission, Admitted, passage_index_text
from capr.corpus.report import ReadReport
from capr.corpus.segment import SegmenterConfig
from capr.errors import CaprError, QueryError
from capr.records import DEFAULT_MAX_DOC_CHARS, Document, Passage, Retriever, Section
from capr.store import milvus_filters
from capr.store.milvus_schema import (BUILTIN, DENSE_INDEXES, EXISTS_BATCH, INSERT_BATCH, MAX_KEY, MAX_SHORT, MAX_TEXT, META,
                                      OUTPUT, READ_CONSISTENCY, SCHEMA_VERSION, check_collection_name, check_uri, clip,
                                      create_collection, ensure_meta, passage_of_row, pymilvus_module, quote,
                                      read_meta, write_meta)
from capr.store.protocol import Backend, Capability
from capr.text.analyzer import Analyzer, AnalyzerConfig
from capr.text.aspects import check_aspect
from capr.text.bm25 import BM25Params

if TYPE_CHECKING:
    from capr.models.encoder import EncoderConfig

__all__ = ["MilvusStore", "check_collection_name", "check_uri"]


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
        pm = pymilvus_module()
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
        meta = read_meta(client, name)
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
            return client.has_collection(check_collection_name(name)) and read_meta(client, name) is not None
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
        ensure_meta(client)
        if client.has_collection(name):
            client.drop_collection(name)
        want_bm25 = lexical in ("auto", "bm25")
        if want_bm25:
            # the probe's expected failure on old servers is not an error to log (pymilvus logs it itself)
            logging.disable(logging.ERROR)
            try:
                try:
                    create_collection(client, name, dim, bm25=True, bm25_params=meta["bm25"], index_type=index_type)
                except Exception as e:  # noqa: BLE001
                    if "tokenizer" not in str(e):
                        raise
                    # Some builds (milvus-lite 3.x) lack the whitespace tokenizer; "standard" (Unicode word
                    # boundaries) leaves capr's tokens — lower-case runs of word characters — whole as well.
                    if client.has_collection(name):
                        client.drop_collection(name)
                    create_collection(client, name, dim, bm25=True, bm25_params=meta["bm25"], index_type=index_type,
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
            create_collection(client, name, dim, bm25=False, bm25_params=meta["bm25"], index_type=index_type)
        write_meta(client, name, meta)
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
            expr = f"doc_id in [{', '.join(quote(d) for d in chunk)}]"
            for row in self.client.query(self.name, filter=expr, output_fields=["doc_id"], limit=16384,
                                         consistency_level="Strong"):
                found.add(row["doc_id"])
        return found

    def has_document(self, doc_id: str) -> bool:
        return bool(self._existing([doc_id]))

    def _rows(self, doc: Document, passages: list[Passage], vectors: np.ndarray | None, seq0: int) -> list[dict]:
        rows = []
        meta_json = {k: v for k, v in doc.metadata.items() if isinstance(v, (str, int, float, bool)) or v is None}
        meta_json.update(milvus_filters.filter_keys(meta_json))
        for i, p in enumerate(passages):
            row = {
                "pid": clip(p.pid, MAX_KEY), "doc_id": clip(p.doc_id, MAX_KEY), "text": clip(p.text, MAX_TEXT),
                "aspect": clip(p.aspect or "", MAX_SHORT), "title": clip(p.title or "", MAX_SHORT),
                "heading": clip(p.heading or "", MAX_SHORT), "start_char": int(p.start), "end_char": int(p.end),
                "sentences": {"spans": [list(s) for s in p.sentences]}, "metadata": meta_json, "seq": seq0 + i,
            }
            if self.has_lexical:
                row["lex"] = clip(" ".join(self.analyzer(passage_index_text(p, self.segmenter.include_title))), MAX_TEXT)
            row["vector"] = vectors[i].tolist() if vectors is not None else [1.0, 0.0]
            rows.append(row)
        return rows

    def add(self, documents: Iterable[Document], progress: Any = None, batch_docs: int = 1000,
            vectors_of: Callable[[list[Passage]], np.ndarray] | None = None, report: Any = None,
            max_doc_chars: int = DEFAULT_MAX_DOC_CHARS) -> int:
        """Inserts the passages of the documents the admission (capr.corpus.passages, the embedded index's) admits,
        in batches, encoding them when the collection has vectors. A document whose id is already there is replaced
        (its old passages deleted first). Not transactional: a writer that dies part-way leaves the batches it
        inserted (re-running the add replaces them). ``vectors_of`` supplies vectors computed elsewhere (e.g. by a
        Ray embedding job, or an embedded index being copied) instead of encoding here."""
        admission = Admission(self.segmenter, report if report is not None else ReadReport(), max_doc_chars)
        total = 0
        batch: list[Admitted] = []
        for admitted in admission.admit_all(documents):
            batch.append(admitted)
            if len(batch) >= batch_docs:
                total += self._add_batch(batch, progress, vectors_of)
                batch = []
        if batch:
            total += self._add_batch(batch, progress, vectors_of)
        return total

    def _vectors(self, passages: list[Passage], vectors_of: Callable[[list[Passage]], np.ndarray] | None) -> np.ndarray | None:
        if not self.has_dense:
            return None
        if vectors_of is not None:
            return np.asarray(vectors_of(passages), dtype=np.float32)
        enc = self.encoder()
        # a model trained with document context reads each passage with its title, as in the embedded index
        return enc.encode_passages([enc.passage_text(p, passage_index_text(p, self.segmenter.include_title))
                                    for p in passages])

    def _add_batch(self, batch: list[Admitted], progress: Any,
                   vectors_of: Callable[[list[Passage]], np.ndarray] | None = None) -> int:
        ids = [a.document.doc_id for a in batch]
        existing = self._existing(ids)
        if existing:
            self.client.delete(self.name, filter=f"doc_id in [{', '.join(quote(d) for d in existing)}]")
        vectors = self._vectors([p for a in batch for p in a.passages], vectors_of)
        rows: list[dict] = []
        seq = int(self.meta["next_seq"])
        fields, aspects = set(self.meta["fields"]), set(self.meta["aspects"])
        for a in batch:
            d, ps = a.document, a.passages
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
        write_meta(self.client, self.name, self.meta)
        return len(rows)

    def delete(self, doc_ids: Iterable[str]) -> int:
        ids = list(dict.fromkeys(doc_ids))
        existing = self._existing(ids)
        missing = [d for d in ids if d not in existing]
        if missing:
            raise QueryError(f"no document with id {missing[0]!r}")
        self.client.delete(self.name, filter=f"doc_id in [{', '.join(quote(d) for d in ids)}]")
        self.meta["documents"] = max(0, int(self.meta.get("documents", 0)) - len(ids))
        write_meta(self.client, self.name, self.meta)
        return len(ids)

    # -- reading ------------------------------------------------------------------------------
    def passage_by_pid(self, pid: str) -> Passage:
        rows = self.client.query(self.name, filter=f"pid == {quote(pid)}", output_fields=OUTPUT)
        if not rows:
            raise QueryError(f"no passage with id {pid!r}")
        return passage_of_row(rows[0])

    def has_passage(self, pid: str) -> bool:
        return bool(self.client.query(self.name, filter=f"pid == {quote(pid)}", output_fields=["seq"]))

    def document_passages(self, doc_id: str) -> list[Passage]:
        rows = self.client.query(self.name, filter=f"doc_id == {quote(doc_id)}", output_fields=OUTPUT, limit=16384)
        if not rows:
            raise QueryError(f"no document with id {doc_id!r}")
        return [passage_of_row(r) for r in sorted(rows, key=lambda r: r["start_char"])]

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
            for row in self.client.query(self.name, filter=f"pid in [{', '.join(quote(p) for p in chunk)}]",
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
        return [passage_of_row(r) for r in self._rows_of(keys)]

    def aspect_flags(self, keys: np.ndarray, aspect: str) -> np.ndarray:
        return np.asarray([r["aspect"] == aspect for r in self._rows_of(keys)], dtype=bool)

    # -- filters ------------------------------------------------------------------------------
    def compile_filter(self, filters: Any) -> str:
        """:meth:`filter_expr`, after the checks the embedded index makes of a filter (milvus_filters.check_clauses)."""
        counts = self.aspect_counts()
        milvus_filters.check_clauses(self._count, self._example, filters, self.meta["fields"], counts,
                                     self.analyzer if counts else None)
        return self.filter_expr(filters)

    def filter_expr(self, filters: Any) -> str:
        """A Milvus expression for a {field: value} dict or range/set clauses (capr.filters)."""
        counts = self.aspect_counts()
        return milvus_filters.compile_expr(filters, self.meta["fields"], counts, self.analyzer if counts else None)

    def explain_empty(self, filters: Any) -> None:
        """The embedded backend's error for a filter value no passage has (see milvus_filters.explain_empty)."""
        counts = self.aspect_counts()
        milvus_filters.explain_empty(self._count, filters, self.meta["fields"], counts, self.analyzer if counts else None)

    def _count(self, expr: str) -> int:
        return int(self.client.query(self.name, filter=expr, output_fields=["count(*)"])[0]["count(*)"])

    def _example(self, field: str, expr: str) -> str:
        row = self.client.query(self.name, filter=expr, output_fields=["metadata"], limit=1)
        return str(row[0]["metadata"].get(field, "")) if row else ""

    def aspect_counts(self) -> dict[str, int | None]:
        """Aspects with passage counts unknown (None): capr's meta row keeps the list, not the counts."""
        return {a: None for a in self.aspects()}

    def check_aspect(self, aspect: str) -> None:
        check_aspect(aspect, self.aspect_counts)

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
        return milvus_filters.restrict(flt, keys)

    def passing(self, flt: str, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64)
        found: set[int] = set()
        for i in range(0, len(keys), EXISTS_BATCH):
            chunk = keys[i : i + EXISTS_BATCH]
            found.update(int(r["seq"]) for r in self.client.query(self.name, filter=self.restrict(flt, chunk),
                                                                   output_fields=["seq"], limit=16384))
        return np.asarray([int(k) in found for k in keys], dtype=bool)

    def _scores_at(self, keys: np.ndarray, ranked: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        got = dict(zip(ranked[0].tolist(), ranked[1].tolist()))
        return np.asarray([got.get(int(k), 0.0) for k in keys], dtype=np.float32)

    def lexical_scores(self, terms: list[str], keys: np.ndarray | None, method: Any = Retriever.bm25) -> np.ndarray:
        """BM25 of each given passage (0 where it scores nothing): a search restricted to them (``seq in [...]``)."""
        if keys is None:
            raise QueryError("Milvus scores candidates, not every passage (no exhaustive capability)")
        return self._scores_at(keys, self.lexical_top(terms, len(keys), milvus_filters.restricted(keys), method))

    def top(self, scores: np.ndarray, k: int, flt: Any = None) -> tuple[np.ndarray, np.ndarray]:
        raise QueryError("Milvus returns top lists itself (no exhaustive capability)")

    def document_rows(self, mask: np.ndarray) -> np.ndarray:
        raise QueryError("Milvus has no row masks (no exhaustive capability)")

    def titles(self, keys: np.ndarray) -> list[str]:
        return [p.title or "" for p in self.passages(keys)]

    def document_keys(self, keys: np.ndarray) -> np.ndarray:
        raise QueryError("Milvus has no row masks (no exhaustive capability)")

    def term_rows(self, term: str) -> np.ndarray:
        raise QueryError("Milvus has no row masks (no exhaustive capability)")

    def dense_top(self, qvec: np.ndarray, k: int, flt: str = "") -> tuple[np.ndarray, np.ndarray]:
        params = {"metric_type": "IP", "params": {"ef": max(128, k)} if self.meta.get("index_type") == "HNSW" else {}}
        res = self.client.search(self.name, data=[np.asarray(qvec, dtype=np.float32).tolist()], anns_field="vector",
                                 limit=k, filter=flt or "", output_fields=OUTPUT, search_params=params,
                                 consistency_level=READ_CONSISTENCY)
        return self._ranked(res, lexical=False)

    def dense_scores(self, qvec: np.ndarray, keys: np.ndarray) -> np.ndarray:
        return self._scores_at(keys, self.dense_top(qvec, len(keys), milvus_filters.restricted(keys)))
