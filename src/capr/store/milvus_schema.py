"""The Milvus backend's collection: its schema, the ``capr_meta`` row of settings beside it, and the conversions
between a row and a Passage (capr.store.milvus_backend reads and writes through them)."""

from __future__ import annotations

import json
import re
from typing import Any

from capr.errors import CaprError
from capr.records import Passage
from capr.store.milvus_expr import without_filter_keys

META = "capr_meta"
SCHEMA_VERSION = 2  # 2: metadata rows carry filter keys (capr.store.milvus_expr)
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


def pymilvus_module():
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


def quote(value: Any) -> str:
    """A Milvus expression string literal (double quotes; backslash and quote escaped)."""
    s = str(value)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def clip(s: str, limit: int) -> str:
    b = s.encode("utf-8")
    return s if len(b) <= limit else b[:limit].decode("utf-8", errors="ignore")


def passage_of_row(h: dict) -> Passage:
    return Passage(pid=h["pid"], doc_id=h["doc_id"], text=h["text"], aspect=h["aspect"] or None,
                   start=int(h["start_char"]), end=int(h["end_char"]),
                   sentences=[(int(a), int(b)) for a, b in (h.get("sentences") or {}).get("spans", [])],
                   title=h.get("title") or "", heading=h.get("heading") or "", metadata=without_filter_keys(h.get("metadata") or {}))


def create_collection(client: Any, name: str, dim: int | None, bm25: bool, bm25_params: dict, index_type: str,
                       tokenizer: str = "whitespace") -> None:
    pm = pymilvus_module()
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


def ensure_meta(client: Any) -> None:
    if client.has_collection(META):
        return
    pm = pymilvus_module()
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("name", pm.DataType.VARCHAR, is_primary=True, max_length=256)
    schema.add_field("config", pm.DataType.VARCHAR, max_length=MAX_TEXT)
    schema.add_field("vector", pm.DataType.FLOAT_VECTOR, dim=2)
    index_params = client.prepare_index_params()
    index_params.add_index(field_name="vector", index_type="FLAT", metric_type="L2")
    client.create_collection(META, schema=schema, index_params=index_params, consistency_level="Strong")


def write_meta(client: Any, name: str, meta: dict) -> None:
    text = json.dumps(meta, ensure_ascii=False)
    if len(text.encode("utf-8")) > MAX_TEXT:  # an enormous aspect/field list: keep what filters need
        meta = {**meta, "aspects": meta["aspects"][:500]}
        text = json.dumps(meta, ensure_ascii=False)
    client.upsert(META, [{"name": name, "config": text, "vector": [0.0, 0.0]}])


def read_meta(client: Any, name: str) -> dict | None:
    if not client.has_collection(META):
        return None
    client.load_collection(META)
    rows = client.query(META, filter=f"name == {quote(name)}", output_fields=["config"])
    if not rows:
        return None
    meta = json.loads(rows[0]["config"])
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise CaprError(f"Milvus collection {name!r} was written by capr schema {meta.get('schema_version')}; "
                        f"this capr reads schema {SCHEMA_VERSION}: rebuild it with `capr index`")
    return meta
