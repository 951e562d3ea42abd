"""Running the service under uvicorn (what `capr serve` calls)."""

from __future__ import annotations

import copy
import logging
import logging.config
import os
from pathlib import Path
from typing import Any

from capr.errors import CaprError
from capr.index.directory import current_generation
from capr.service.config import CONFIG_ENV, ServiceConfig, config_to_env, is_loopback

log = logging.getLogger("capr.service")


def log_config(level: str = "info") -> dict:
    """uvicorn's logging setup plus capr's logger. uvicorn's access log stays off: it would write
    query strings; the service logs method, route, status and latency itself."""
    from uvicorn.config import LOGGING_CONFIG

    cfg = copy.deepcopy(LOGGING_CONFIG)
    cfg["loggers"]["capr"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    cfg["formatters"]["default"]["fmt"] = "%(asctime)s %(levelprefix)s %(name)s: %(message)s"
    return cfg


def check_exposure(host: str, config: ServiceConfig) -> None:
    """On a non-loopback address: refuses to serve patient text without a token to whoever can reach it, unless asked
    to, and to start a server that would refuse (421) every request naming it."""
    if is_loopback(host):
        return
    if not config.auth_reads and not config.public_reads:
        raise CaprError(f"--host {host} is reachable from other machines and reads (patient text) would need no token: "
                        "add --auth-reads (reads need a token), or --public-reads to serve them openly on purpose")
    if not config.allowed_hosts:
        raise CaprError(f"--host {host} is reachable from other machines, but only requests naming localhost, 127.0.0.1 "
                        "or [::1] in their Host header would be answered: name the host names clients use with "
                        "--allowed-hosts NAME[,NAME] (* for any)")


def serve(
    index_dir: str | Path,
    config: ServiceConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    token_file: str | Path | None = None,
    log_level: str = "info",
    store: Any = None,
) -> None:
    """Serves the index directory, or ``store`` (a Milvus collection opened by the caller)."""
    import uvicorn

    if store is None:
        current_generation(Path(index_dir))  # a clear error before uvicorn starts, not inside a worker
    elif workers != 1:
        raise CaprError("--workers > 1 is for the embedded backend; with --backend milvus run one capr serve per "
                        "process/host behind a load balancer (they share the Milvus collection)")
    if workers < 1:
        raise CaprError(f"--workers must be at least 1, got {workers}")
    if not 1 <= port <= 65535:  # the socket layer would refuse it with a traceback, after the startup log
        raise CaprError(f"--port {port}: a TCP port is 1..65535")
    check_exposure(host, config)
    from capr.search.second_stage import check_reranker_spec

    for spec in config.rerankers:  # checked now (files only, no model loaded), not by each request naming it
        check_reranker_spec(spec)
    logging.config.dictConfig(log_config(log_level))
    auth = f"{len(config.tokens)} API token(s) loaded; writes need a token; reads {'need one' if config.auth_reads else 'are open'}"
    if not config.tokens:
        auth = "no API tokens: writes are disabled, reads are open"
    log.info("serving %s on http://%s:%d (%d worker(s)); %s", index_dir, host, port, workers, auth)
    if not is_loopback(host):
        log.warning("listening on %s: capr speaks plain HTTP; put a TLS-terminating proxy in front of it", host)
    if workers == 1:
        from capr.service.app import create_app

        uvicorn.run(create_app(index_dir, config, store=store), host=host, port=port, access_log=False,
                    log_config=log_config(log_level), log_level=log_level)
        return
    # Worker processes build their own app from the environment; tokens travel as they came
    # ($CAPR_API_TOKENS is inherited, the token file is re-read), never in the settings variable.
    os.environ[CONFIG_ENV] = config_to_env(Path(index_dir).resolve(), config, Path(token_file).resolve() if token_file else None)
    uvicorn.run("capr.service.app:app_from_env", factory=True, host=host, port=port, workers=workers,
                access_log=False, log_config=log_config(log_level), log_level=log_level)

