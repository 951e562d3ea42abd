"""The `capr` command line: one module per command group, each only parsing options and rendering."""

from __future__ import annotations

import sys

# isort: off
# the command groups register themselves on import; this order is the order of `capr --help`
from capr.cli import index_cmds, search_cmds, eval_cmds, train_cmds, adapt_cmd, cases_cmds, serve_cmd  # noqa: F401
# isort: on
from capr.cli.common import app, split_backend, terminate_cleanly  # noqa: F401 - the app, and what tests and scripts import
from capr.demo import demo_corpus_dir  # noqa: F401

_VARIADIC = ("--options",)


def expand_variadic(argv: list[str]) -> list[str]:
    """`--options A B C` → `--options A --options B --options C` (up to the next token starting with "-")."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        out.append(tok)
        i += 1
        if tok in _VARIADIC:
            first = True
            while i < len(argv) and (first or not argv[i].startswith("-")):
                if not first:
                    out.append(tok)
                out.append(argv[i])
                i += 1
                first = False
    return out


def main() -> None:
    import signal

    # Past a file-size limit (ulimit -f) the kernel kills the process with SIGXFSZ; ignored, the write
    # fails with EFBIG instead and the index writer reports it in one line, like a full disk.
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    terminate_cleanly()
    app(args=expand_variadic(sys.argv[1:]), prog_name="capr")


if __name__ == "__main__":
    main()
