"""Service settings and API tokens."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from capr.errors import CaprError

TOKENS_ENV = "CAPR_API_TOKENS"
MIN_TOKEN_LENGTH = 16
DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB


@dataclass(frozen=True)
class ServiceConfig:
    # repr=False: a config printed in a log line or a traceback must not reveal the tokens
    tokens: tuple[str, ...] = field(default=(), repr=False)
    auth_reads: bool = False  # require a token for search, documents, cases, stats and vocabulary too
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    rerankers: tuple[str, ...] = ()  # re-ranker specs a request may name (each loads a model from disk)
    rerank_depth: int = 50  # candidates passed to a re-ranker
    watch_index: bool = True  # pick up generations committed by other processes (capr add, other workers)
    write_wait_s: float = 30.0  # how long a write waits for another process's writer before 503
    cases_model: str | None = None  # cross-encoder from `capr train cases`: POST /cases runs the similar-case
    # pipeline (needs an index with vectors); None keeps the lexical baseline

    def __post_init__(self) -> None:
        if self.max_body_bytes <= 0:
            raise CaprError(f"max_body_bytes must be positive, got {self.max_body_bytes}")
        if self.auth_reads and not self.tokens:
            raise CaprError(f"reads require a token (--auth-reads) but no tokens are configured; set {TOKENS_ENV} or --token-file")

    def public_dict(self) -> dict[str, Any]:
        """Everything but the tokens (for passing settings to worker processes)."""
        d = asdict(self)
        d.pop("tokens")
        d["rerankers"] = list(self.rerankers)
        return d

    @classmethod
    def from_public_dict(cls, d: dict[str, Any], tokens: tuple[str, ...]) -> "ServiceConfig":
        return cls(tokens=tokens, **{**d, "rerankers": tuple(d.get("rerankers", ()))})


def _parse_tokens(raw: list[str], where: str) -> list[str]:
    tokens = []
    for i, t in enumerate(raw, 1):
        t = t.strip()
        if not t or t.startswith("#"):
            continue
        if len(t) < MIN_TOKEN_LENGTH or any(c.isspace() for c in t):
            # the token itself is never echoed, only where it came from
            raise CaprError(f"{where}: token {i} is shorter than {MIN_TOKEN_LENGTH} characters or contains whitespace")
        tokens.append(t)
    return tokens


def load_tokens(token_file: str | Path | None = None, environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """API tokens from ``$CAPR_API_TOKENS`` (comma separated) and/or a file (one per line, # comments)."""
    env = os.environ if environ is None else environ
    tokens = _parse_tokens(env.get(TOKENS_ENV, "").split(","), f"${TOKENS_ENV}")
    if token_file is not None:
        path = Path(token_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise CaprError(f"cannot read token file {path}: {e.strerror or e}") from None
        if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            import logging

            logging.getLogger("capr.service").warning("token file %s is readable by other users; chmod 600 it", path)
        tokens += _parse_tokens(text.splitlines(), str(path))
    return tuple(dict.fromkeys(tokens))


class TokenSet:
    """Constant-time token check: compares SHA-256 digests, so neither a token's content nor its
    length leaks through timing, and the plain tokens need not be kept."""

    def __init__(self, tokens: tuple[str, ...]) -> None:
        self._digests = [hashlib.sha256(t.encode("utf-8")).digest() for t in tokens]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def __repr__(self) -> str:
        return f"TokenSet({len(self._digests)} tokens)"

    def matches(self, token: str) -> bool:
        d = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        ok = False
        for ref in self._digests:  # no early exit: every comparison runs
            ok |= hmac.compare_digest(d, ref)
        return ok


CONFIG_ENV = "CAPR_SERVICE_CONFIG"  # settings handed to uvicorn worker processes (never tokens)


def config_to_env(index_dir: str | Path, config: ServiceConfig, token_file: str | Path | None) -> str:
    return json.dumps({"index_dir": str(index_dir), "token_file": str(token_file) if token_file else None,
                       "config": config.public_dict()})


__all__ = ["CONFIG_ENV", "DEFAULT_MAX_BODY_BYTES", "MIN_TOKEN_LENGTH", "ServiceConfig", "TOKENS_ENV", "TokenSet",
           "config_to_env", "load_tokens"]
