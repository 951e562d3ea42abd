"""Real Milvus servers for the tests, on 127.0.0.1 only, started and stopped here (see
capr/store/local_servers.py). Both run from .venv-milvus (`make milvus-venv`, a dependency of `make test`)."""

from __future__ import annotations

import pytest

from capr.store.local_servers import LocalServer, milvus_python, start_server

from conftest import REPO


def start_or_skip(kind: str, workdir) -> LocalServer:
    py = milvus_python(REPO)
    if py is None:
        pytest.skip("no .venv-milvus with the Milvus servers: run `make milvus-venv` (make test does)")
    try:
        return start_server(kind, workdir, python=py, timeout=180)
    except RuntimeError as e:
        pytest.skip(f"the Milvus {kind} server could not start here: {str(e)[:800]}")
