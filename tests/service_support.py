"""Shared by the service and browser tests: a demo index and a real uvicorn server on a free port."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path

import httpx

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def build_demo_index(demo_dir: Path, out: Path) -> Path:
    from capr.corpus import Format, read_documents
    from capr.index import build_index

    build_index(read_documents(demo_dir, Format.text), out).close()
    return out


def copy_index(template: Path, dest: Path) -> Path:
    shutil.copytree(template, dest)
    return dest


class LiveServer:
    """uvicorn serving an app in a background thread, on a socket bound before it starts (no port race).
    ``ready``: return from ``with`` once /health no longer says ``starting`` (models loaded)."""

    def __init__(self, app, ready: bool = True) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.ready = ready

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        deadline = time.monotonic() + 300
        while self.ready and httpx.get(self.url + "/health").json()["status"] == "starting":
            if time.monotonic() > deadline:
                raise RuntimeError("the service did not get ready in 300 s")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def build_dense_demo_index(demo_dir: Path, out: Path, second_stage: str | None = None, documents: int = 6) -> Path:
    """The first ``documents`` of the demo corpus with MiniLM vectors; ``second_stage``: a re-ranker spec the index
    records, as `capr adapt` records the one its gate keeps (searches that name none use it)."""
    from itertools import islice

    from capr.corpus import Format, read_documents
    from capr.index import IndexWriter
    from capr.models import EncoderConfig

    writer = IndexWriter(out, dense=EncoderConfig())
    if second_stage:
        writer.dense_info["reranker"] = {"spec": second_stage, "depth": 20}
    with writer as w:
        for doc in islice(read_documents(demo_dir, Format.text), documents):
            w.add(doc)
    return out
