"""capr serve: the HTTP service."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from capr.cli.common import BACKEND_HELP, TLS_CA_OPTION, TOKEN_HELP, URI_OPTION, _run_guarded, app, backend_options
from capr.errors import CaprError
from capr.store.protocol import Capability


@app.command("serve")
def serve_cmd(
    index_dir: Path = typer.Option(..., "--index", "-i", help="Index directory to serve."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (loopback by default)."),
    port: int = typer.Option(8000, help="TCP port."),
    token_file: Optional[Path] = typer.Option(None, help="API tokens, one per line (besides $CAPR_API_TOKENS, comma separated)."),
    auth_reads: bool = typer.Option(False, "--auth-reads", help="Require a token for reads too (writes always need one)."),
    public_reads: bool = typer.Option(False, "--public-reads", help="Serve reads (patient text) without a token on a "
                                      "non-loopback --host, on purpose (otherwise refused there: use --auth-reads)."),
    allowed_hosts: List[str] = typer.Option([], "--allowed-hosts", help="Host names the server answers to besides localhost, "
                                            "127.0.0.1 and [::1] (repeatable or comma separated; * for any): others get 421. "
                                            "Needed with a non-loopback --host."),
    max_body_bytes: int = typer.Option(1 << 20, help="Largest request body accepted (larger: 413)."),
    reranker: List[str] = typer.Option([], "--reranker", help="Re-ranker spec a search may name, e.g. cross:DIR (repeatable)."),
    workers: int = typer.Option(1, help="uvicorn worker processes (each holds its own snapshot of the index)."),
    log_level: str = typer.Option("info", help="debug | info | warning | error."),
    backend: str = typer.Option("embedded", "--backend", help=BACKEND_HELP + " --index is then the collection name."),
    uri: Optional[str] = URI_OPTION,
    milvus_token: Optional[str] = typer.Option(None, "--milvus-token", envvar="CAPR_MILVUS_TOKEN", help=TOKEN_HELP),
    tls_ca: Optional[Path] = TLS_CA_OPTION,
    cases_model: Optional[Path] = typer.Option(None, "--cases-model", help="Cross-encoder from `capr train cases`: POST /cases "
                                               "scores the similar-case pipeline with it (index needs vectors); default: what `capr cases` runs (dense "
                                               "with vectors, else BM25)."),
    search_concurrency: int = typer.Option(1, "--search-concurrency", help="Searches computed at once per worker "
                                           "(0: one per CPU core); the others wait their turn without a thread."),
    switch_interval_ms: float = typer.Option(0.2, "--switch-interval-ms", help="Python's thread switch interval while "
                                             "serving (0: Python's 5 ms); short keeps writes fast during search load."),
) -> None:
    """Serve an index over HTTP: JSON API (OpenAPI at /openapi.json) and a search page at /."""

    def body() -> None:
        from capr.service.config import ServiceConfig, load_tokens
        from capr.service.server import serve

        opts = backend_options(backend, uri, milvus_token, tls_ca)
        store = opts.open(index_dir)
        hosts = tuple(h.strip() for spec in allowed_hosts for h in spec.split(",") if h.strip())
        config = ServiceConfig(tokens=load_tokens(token_file), auth_reads=auth_reads, public_reads=public_reads,
                               allowed_hosts=hosts, max_body_bytes=max_body_bytes,
                               rerankers=tuple(reranker), cases_model=str(cases_model) if cases_model else None,
                               search_concurrency=search_concurrency, switch_interval_ms=switch_interval_ms)
        if cases_model and Capability.postings not in store.capabilities:
            raise CaprError(f"--cases-model needs the '{Capability.postings.value}' capability (capr's term matrix), "
                            f"which the {opts.backend.value} backend does not have")
        # a store with generations is served by snapshot (each worker re-opens the directory and follows its
        # commits); any other store is served as it is, one process
        held = None if Capability.generations in store.capabilities else store
        if held is None:  # a damaged index file is refused now, not by the first search that reads it
            store.check_files()
        serve(index_dir, config, host=host, port=port, workers=workers, token_file=token_file, log_level=log_level,
              store=held)

    _run_guarded(body)
