"""Real Milvus servers on 127.0.0.1 for tests and benchmarks (never for production).

- ``standalone``: the Milvus 2.3.5 standalone binary shipped in the PyPI package ``milvus==2.3.5``
  (embedded etcd, local storage). Its config template leaves every ``ip:`` empty, which makes each
  component advertise the host's first network address; here each one is set to 127.0.0.1 and the
  proxy gets an explicit port, so clients and components talk over loopback only.
- ``lite``: ``milvus-lite==2.5.1`` serving gRPC on 127.0.0.1:PORT (BM25 function, hybrid search).

Both packages pin things capr's own environment does not want (milvus-lite imports pkg_resources, so
``setuptools<70``), so they live in their own virtualenv (``.venv-milvus``, made by ``make milvus-venv``).
This file is run *by that environment's python* as a script, and imported by capr's tests and bench
for :func:`start_server`; it therefore imports nothing from capr at module level.

    python local_servers.py standalone DATA_DIR PORT     # runs until SIGTERM/SIGINT or stdin closes
    python local_servers.py lite DB_FILE PORT
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

READY = "CAPR-MILVUS-READY"


# --------------------------------------------------------------------------- server side (.venv-milvus)
def _loopback_template(dst: Path, etcd_config: Path) -> Path:
    import milvus

    src = Path(milvus.__file__).parent / "data" / "config.yaml.template"
    lines = []
    for line in src.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("ip:"):  # advertised address of a component: loopback, not the host's
            line = line[: len(line) - len(line.lstrip())] + "ip: 127.0.0.1"
        lines.append(line)
        if line == "etcd:":
            # The embedded etcd otherwise listens on etcd's defaults (2379/2380, every interface), so a
            # second server on the machine fails with "address already in use": give it its own
            # loopback ports through an etcd config file.
            lines += ["  config:", f"    path: {etcd_config}"]
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dst


def _etcd_config(path: Path, client_port: int, peer_port: int) -> Path:
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    path.write_text("\n".join([
        "name: capr-etcd", f"listen-client-urls: {client}", f"advertise-client-urls: {client}",
        f"listen-peer-urls: {peer}", f"initial-advertise-peer-urls: {peer}", f"initial-cluster: capr-etcd={peer}",
    ]) + "\n", encoding="utf-8")
    return path


def _serve_standalone(data_dir: str, port: int) -> None:
    import milvus
    from milvus import MilvusServer, MilvusServerConfig

    data = Path(data_dir).absolute()
    data.mkdir(parents=True, exist_ok=True)
    etcd_client, etcd_peer = free_port(), free_port()
    etcd = _etcd_config(data / "etcd.yaml", etcd_client, etcd_peer)
    template = _loopback_template(data / "milvus.yaml.template", etcd)
    # ports in the constructor's configs (not .set): that is where port resolution looks first
    config = MilvusServerConfig(template=str(template), data_dir=str(data), proxy_port=port, etcd_port=etcd_client)
    # the package sets its glog config path only when it uses its own template
    config.glog_conf_file = str(Path(milvus.__file__).parent / "data" / "glog.conf")
    server = MilvusServer(config)
    server.start()  # waits for /healthz
    _wait_for_stop(server.stop)


def _serve_lite(db_file: str, port: int) -> None:
    from milvus_lite.server import Server

    server = Server(db_file, f"127.0.0.1:{port}")
    if not server.init() or not server.start():
        raise SystemExit("milvus-lite server did not start")
    _wait_port(port, 60)
    _wait_for_stop(server.stop)


def _wait_for_stop(stop) -> None:
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())

    def stdin_watch() -> None:  # the parent died or closed our stdin: stop too (no orphaned servers)
        sys.stdin.read()
        done.set()

    threading.Thread(target=stdin_watch, daemon=True).start()
    print(READY, flush=True)
    done.wait()
    stop()


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


# --------------------------------------------------------------------------- client side (capr's env)
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def milvus_python(repo_root: str | Path | None = None) -> Path | None:
    """The python of the servers' virtualenv: $CAPR_MILVUS_PYTHON, else REPO/.venv-milvus/bin/python."""
    env = os.environ.get("CAPR_MILVUS_PYTHON")
    if env:
        return Path(env)
    root = Path(repo_root) if repo_root else Path(__file__).resolve().parents[3]
    py = root / ".venv-milvus" / "bin" / "python"
    return py if py.exists() else None


@dataclass
class LocalServer:
    kind: str
    uri: str
    proc: subprocess.Popen
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_server(kind: str, workdir: str | Path, python: str | Path | None = None, timeout: float = 180,
                 nice: int = 0) -> LocalServer:
    """Starts a ``standalone`` or ``lite`` server on a free 127.0.0.1 port; returns once it serves.
    Raises RuntimeError naming the reason (and the log) when it cannot start."""
    if kind not in ("standalone", "lite"):
        raise ValueError(f"kind must be 'standalone' or 'lite', not {kind!r}")
    py = Path(python) if python else milvus_python()
    if py is None or not py.exists():
        raise RuntimeError("no .venv-milvus (run `make milvus-venv`) and no $CAPR_MILVUS_PYTHON")
    workdir = Path(workdir).absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    target = workdir / ("milvus-data" if kind == "standalone" else "capr-lite.db")
    log = workdir / f"{kind}.log"
    cmd = [str(py), str(Path(__file__).resolve()), kind, str(target), str(port)]
    if nice:
        cmd = ["nice", "-n", str(nice), *cmd]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fh,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    server = LocalServer(kind, f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + timeout
    ready = threading.Event()

    def read_stdout() -> None:
        for raw in proc.stdout:  # type: ignore[union-attr]
            if READY in raw.decode(errors="replace"):
                ready.set()

    threading.Thread(target=read_stdout, daemon=True).start()
    while not ready.wait(0.2):
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited with {proc.returncode}" if proc.returncode is not None else f"not ready after {timeout:.0f} s"
            server.stop()
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"Milvus {kind} server {why} (log {log}):\n{tail}")
    return server


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("standalone", "lite"):
        raise SystemExit(__doc__)
    kind, target, port_s = sys.argv[1:]
    (_serve_standalone if kind == "standalone" else _serve_lite)(target, int(port_s))
