"""Service settings and API tokens."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import re
import stat
import threading
import time
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from capr.errors import CaprError

TOKENS_ENV = "CAPR_API_TOKENS"
MIN_TOKEN_LENGTH = 16
DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB
MAX_SWITCH_INTERVAL_MS = 1000.0  # Python's own default is 5 ms


@dataclass(frozen=True)
class ServiceConfig:
    # repr=False: a config printed in a log line or a traceback must not reveal the tokens
    tokens: tuple[str, ...] = field(default=(), repr=False)
    auth_reads: bool = False  # require a token for search, documents, cases, stats and vocabulary too
    # Host names (the Host header, port ignored) answered besides loopback ones (localhost, 127.0.0.0/8, [::1]);
    # "*" answers any. A browser page of another site whose name an attacker re-points at this machine (DNS
    # rebinding) sends that site's name: refusing unknown names keeps patient text from such pages.
    allowed_hosts: tuple[str, ...] = ()
    # Open reads of patient text on a non-loopback address, asked for in so many words (capr serve --public-reads)
    public_reads: bool = False
    # Load the query encoder, the index's recorded second stage and the synonym cache, and answer one query,
    # before /health reports ready (False: load them at the first search that needs them)
    warm_up: bool = True
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    rerankers: tuple[str, ...] = ()  # re-ranker specs a request may name (each loads a model from disk)
    rerank_depth: int | None = None  # candidates passed to a re-ranker; None: the index's profile, as `capr search`
    watch_index: bool = True  # pick up generations committed by other processes (capr add, other workers)
    write_wait_s: float = 30.0  # how long a write waits for another process's writer before 503
    cases_model: str | None = None  # cross-encoder from `capr train cases` for POST /cases (needs an index with
    # vectors); None: the dense scorer on an index with vectors, else BM25, as `capr cases` without --model
    # Back-off for clients that keep sending bad tokens (per client address, per process): after
    # auth_fail_limit failed token checks within auth_fail_window_s, every authenticated request from
    # that address gets 429 with Retry-After for auth_backoff_s, doubled on each further failure (at most
    # auth_backoff_max_s), a try while blocked included (whatever its token). A valid token after a block
    # clears the record. auth_fail_limit = 0 turns it off.
    # Searches computed at once per worker process; more requests wait for a slot without holding a thread.
    # Searches are CPU-bound under one GIL: running 40 at once (the thread pool's size) gains no throughput and
    # makes a write — which must take the GIL back after each of its file operations — wait behind all of them.
    # bench/bench_nrt.py on 2 cores: 1 slot gave writes p50 58–132 ms and search p99 0.65–0.8 s under 50 clients,
    # 2 slots 305–568 ms and 1.8–2.2 s. More cores: more workers (--workers). 0: one per CPU core.
    search_concurrency: int = 1
    # The interpreter's thread switch interval while serving (sys.setswitchinterval; 0: leave Python's 5 ms).
    # A commit does a few dozen file operations, each giving up the GIL; with searches running, taking it back
    # waits up to one interval each, so a shorter interval is what keeps a write fast during a search load.
    switch_interval_ms: float = 0.2
    auth_fail_limit: int = 5
    auth_fail_window_s: float = 60.0
    auth_backoff_s: float = 1.0
    auth_backoff_max_s: float = 300.0

    def __post_init__(self) -> None:
        if self.max_body_bytes <= 0:
            raise CaprError(f"max_body_bytes must be positive, got {self.max_body_bytes}")
        if self.auth_fail_limit < 0 or self.auth_fail_window_s <= 0 or self.auth_backoff_s <= 0 \
                or self.auth_backoff_max_s < self.auth_backoff_s:
            raise CaprError("auth back-off: auth_fail_limit must be >= 0, the window and back-off positive, "
                            "and auth_backoff_max_s >= auth_backoff_s")
        if self.search_concurrency < 0 or self.switch_interval_ms < 0:
            raise CaprError("search_concurrency and switch_interval_ms must be >= 0")
        # NaN passes the test above and became an interval of 292,000 years (the server died in take_gil); a huge
        # one wraps to 0 in the interpreter or stalls every other thread for that long
        if not 0 <= self.switch_interval_ms <= MAX_SWITCH_INTERVAL_MS:
            raise CaprError(f"switch_interval_ms must be between 0 and {MAX_SWITCH_INTERVAL_MS:g}, "
                            f"got {self.switch_interval_ms:g}")
        if self.auth_reads and not self.tokens:
            raise CaprError(f"reads require a token (--auth-reads) but no tokens are configured; set {TOKENS_ENV} or --token-file")
        if self.auth_reads and self.public_reads:
            raise CaprError("--auth-reads and --public-reads contradict each other: reads either need a token or are open")
        for name in self.allowed_hosts:
            if name != "*" and (name != name.strip() or host_name(name) is None):
                raise CaprError(f"--allowed-hosts: {name!r} is not a host name (e.g. capr.example.org, 10.0.0.5 or *)")

    def public_dict(self) -> dict[str, Any]:
        """Everything but the tokens (for passing settings to worker processes)."""
        d = asdict(self)
        d.pop("tokens")
        d["rerankers"] = list(self.rerankers)
        d["allowed_hosts"] = list(self.allowed_hosts)
        return d

    @classmethod
    def from_public_dict(cls, d: dict[str, Any], tokens: tuple[str, ...]) -> "ServiceConfig":
        return cls(tokens=tokens, **{**d, "rerankers": tuple(d.get("rerankers", ())),
                                     "allowed_hosts": tuple(d.get("allowed_hosts", ()))})


LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1), bracketed or not."""
    host = host.strip("[]").lower().rstrip(".")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_REG_NAME = re.compile(r"[a-z0-9._~!$&'()*+,;=%-]+")  # RFC 3986 reg-name (dotted IPv4 addresses included)
_PORT = re.compile(r"(:[0-9]*)?")


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def host_name(header: str) -> str | None:
    """The name of a Host header without its port: ``[::1]:8000`` → ``::1``, ``Localhost.:80`` → ``localhost``;
    None when the header is not a name with an optional port (``localhost:80@evil``, ``[::1]x``)."""
    header = header.strip().lower()
    if header.startswith("["):  # an IPv6 literal
        literal, closed, port = header[1:].partition("]")
        return literal if closed and _ipv6(literal) and _PORT.fullmatch(port) else None
    if header.count(":") > 1:  # an IPv6 address without brackets (and so without a port)
        return header if _ipv6(header) else None
    name, colon, port = header.partition(":")
    name = name.rstrip(".")
    return name if _REG_NAME.fullmatch(name) and _PORT.fullmatch(colon + port) else None


ANSWERED = "answers to localhost, 127.0.0.1 and [::1] (capr serve --allowed-hosts NAME adds names)"


class HostPolicy:
    """Which Host headers the service answers: loopback names always, the configured ones besides ("*": any name).
    A request must name a host: one without a Host header, or whose header is more than a name and a port, is not
    answered whatever the policy."""

    def __init__(self, allowed: tuple[str, ...] = ()) -> None:
        self.any = "*" in allowed
        self.names = frozenset(filter(None, (host_name(a) for a in allowed if a != "*")))

    def refusal(self, header: str | None) -> str | None:
        """Why a request with this Host header is not answered (None: it is)."""
        if header is None:
            return f"the request has no Host header: this server {ANSWERED}"
        name = host_name(header)
        if name is None:
            return f"the Host header {header[:100]!r} is not a host name with an optional port: this server {ANSWERED}"
        if self.any or name in self.names or is_loopback(name):
            return None
        return f"this server does not answer to the host name {header[:100]!r}: it {ANSWERED}"


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


class AuthThrottle:
    """Failed-token bookkeeping per client address, with exponential back-off.

    Before this, a client could try tokens as fast as the server answered (1,700 refused requests in
    5 s). A blocked address gets 429 whatever token it sends (blocking is decided before the token is
    looked at, so a blocked client cannot tell a valid guess from an invalid one), and each try doubles
    the block, so a client hammering through its block is held off longer and longer (Retry-After says
    how long, to the second). A valid token after the block clears the record.
    State is bounded: at most ``max_clients`` addresses are kept (least recently seen dropped first).
    Thread-safe: sync routes run in a thread pool."""

    def __init__(self, limit: int, window_s: float, backoff_s: float, backoff_max_s: float,
                 clock: Callable[[], float] = time.monotonic, max_clients: int = 10_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.clock = clock
        self.max_clients = max_clients
        # address -> (recent failure times, blocks so far, blocked until)
        self._clients: OrderedDict[str, tuple[deque[float], int, float]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: ServiceConfig) -> "AuthThrottle":
        return cls(config.auth_fail_limit, config.auth_fail_window_s, config.auth_backoff_s, config.auth_backoff_max_s)

    def retry_after(self, client: str) -> float:
        """Seconds this client must still wait (0: it may try)."""
        if not self.limit:
            return 0.0
        with self._lock:
            entry = self._clients.get(client)
            return max(0.0, entry[2] - self.clock()) if entry else 0.0

    def failed(self, client: str) -> float:
        """Records a failed token check; returns the back-off it starts (0: none yet)."""
        if not self.limit:
            return 0.0
        now = self.clock()
        with self._lock:
            fails, blocks, until = self._clients.pop(client, (deque(), 0, 0.0))
            if blocks and now - until >= self.window_s:
                blocks = 0  # quiet for a whole window after its last block: start afresh
            fails.append(now)
            while fails and fails[0] <= now - self.window_s:
                fails.popleft()
            backoff = 0.0
            # the first block after `limit` failures in the window; after that, every further failure
            # (within a window of the last block, or during the block) blocks again from now, twice as
            # long: 1, 2, 4 ... s
            if len(fails) >= self.limit or blocks:
                backoff = min(self.backoff_s * 2 ** blocks, self.backoff_max_s)
                blocks, until = blocks + 1, max(until, now + backoff)
                fails.clear()
            self._clients[client] = (fails, blocks, until)
            while len(self._clients) > self.max_clients:
                self._clients.popitem(last=False)
            return max(0.0, until - now) if backoff else 0.0

    def succeeded(self, client: str) -> None:
        if self.limit:
            with self._lock:
                self._clients.pop(client, None)


CONFIG_ENV = "CAPR_SERVICE_CONFIG"  # settings handed to uvicorn worker processes (never tokens)


def config_to_env(index_dir: str | Path, config: ServiceConfig, token_file: str | Path | None) -> str:
    return json.dumps({"index_dir": str(index_dir), "token_file": str(token_file) if token_file else None,
                       "config": config.public_dict()})


__all__ = ["AuthThrottle", "CONFIG_ENV", "DEFAULT_MAX_BODY_BYTES", "HostPolicy", "MIN_TOKEN_LENGTH", "ServiceConfig", "TOKENS_ENV",
           "TokenSet", "config_to_env", "host_name", "is_loopback", "load_tokens"]
