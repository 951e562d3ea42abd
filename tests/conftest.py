from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("CAPR_DATA_DIR", REPO.parent / "shared" / "data"))


def need_data(*parts: str) -> Path:
    """Path inside ../shared/data, or skip the test cleanly when the data is absent."""
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Models exported/distilled and embeddings cached by tests live in a fresh folder per run,
    so no test depends on what an earlier run left behind (subprocesses inherit it)."""
    path = tmp_path_factory.mktemp("capr-cache")
    old = os.environ.get("CAPR_CACHE")
    os.environ["CAPR_CACHE"] = str(path)
    os.environ["HF_HUB_OFFLINE"] = "1"
    yield path
    if old is None:
        os.environ.pop("CAPR_CACHE", None)
    else:
        os.environ["CAPR_CACHE"] = old


@pytest.fixture(scope="session", autouse=True)
def _testclient_host_is_local():
    """Starlette's TestClient sends `Host: testserver`; in tests it stands for a loopback name (the service answers
    only those unless told otherwise). Tests with a real server and other Host names check the refusal."""
    from capr.service import config

    names = config.LOOPBACK_NAMES
    config.LOOPBACK_NAMES = names | {"testserver"}
    yield
    config.LOOPBACK_NAMES = names


@pytest.fixture
def data_dir() -> Path:
    return need_data()


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


def strict_json(text: str) -> list:
    """Every JSON document of a command's standard output (one, or one per line), parsed strictly: NaN, Infinity and
    -Infinity, which Python's json module writes and reads but no JSON parser must accept, are an AssertionError."""
    try:
        return [json.loads(text, parse_constant=_not_json)]
    except ValueError as e:
        if "is not JSON" in str(e):
            raise AssertionError(f"not JSON ({e}): {text[:2000]}") from None
    try:
        return [json.loads(line, parse_constant=_not_json) for line in text.splitlines() if line.strip()]
    except ValueError as e:
        raise AssertionError(f"not JSON ({e}): {text[:2000]}") from None


def _check_json_output(args: tuple[str, ...], proc: subprocess.CompletedProcess) -> None:
    """Every `--json` output of the suite's commands is strict JSON (issue 52: no NaN or Infinity, ever)."""
    if "--json" in args and proc.stdout.strip():
        strict_json(proc.stdout)


def capr_cli(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """Runs the real console entry point in a subprocess."""
    proc = subprocess.run([sys.executable, "-m", "capr", *args], capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"capr {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    _check_json_output(args, proc)
    return proc


def capr_in_process(runner: CliRunner, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`capr ARGS` through the same Typer app in this process, read as :func:`capr_cli` reads the real command: exit
    code, standard output and standard error. A subprocess costs a second or two of imports, and a refused option
    needs none of what a process adds; an exception the command leaves unhandled is written to stderr as the real
    command's traceback would be, so a check for "Traceback" still catches it. Where the test is about the process,
    run one case as the real command with :func:`capr_cli`."""
    from capr.cli import app, expand_variadic

    result = runner.invoke(app, expand_variadic(list(args)))  # as main() reads the real command line
    stderr = result.stderr
    if result.exc_info is not None and not isinstance(result.exc_info[1], SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    proc = subprocess.CompletedProcess(["capr", *args], result.exit_code, result.stdout, stderr)
    if check and proc.returncode != 0:
        raise AssertionError(f"capr {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    _check_json_output(args, proc)
    return proc


def capr_real_or_in_process(runner: CliRunner, real: bool, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`capr ARGS` as the real command when ``real`` (one case of a parametrised check), else in process."""
    return capr_cli(*args, check=check) if real else capr_in_process(runner, *args, check=check)


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    from capr.cli import demo_corpus_dir

    return demo_corpus_dir()


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def index_of_documents(tmp_path_factory, name: str, docs: list[dict], dense=None):
    """A real index (on disk, under pytest's temporary folders) of documents given as JSON records."""
    from capr.corpus import read_documents
    from capr.index import build_index

    src = write_jsonl(tmp_path_factory.mktemp(name) / "docs.jsonl", docs)
    return build_index(read_documents(src), tmp_path_factory.mktemp(f"{name}-idx") / "idx", dense=dense)


def one_line_error(proc, *needles: str) -> None:
    """A failed command: non-zero exit, the reason on stderr, and no Python traceback."""
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Error:" not in proc.stderr.replace("error:", ""), proc.stderr
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)
