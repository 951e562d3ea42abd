"""The package's layering (issue 15): what serves a query (retrieve/, index/, store/) and the models it loads
(models/) never import training, the CLI, the service or evaluation, so a search process loads none of them and a
change there cannot break search. Checked on the source with `ast`, imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import capr

SRC = Path(capr.__file__).parent
LOWER = ("retrieve", "index", "store", "models")
UPPER = ("capr.train", "capr.adapt", "capr.cli", "capr.service", "capr.eval", "capr.search")  # capr.search: the pipeline sits above


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file; `from capr import train` counts as capr.train."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = list(path.relative_to(root.parent).with_suffix("").parts)[: -node.level]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return out


def violations(root: Path) -> list[str]:
    bad = []
    for layer in LOWER:
        for path in sorted((root / layer).rglob("*.py")):
            for line, module in imported_modules(path, root):
                if any(module == up or module.startswith(up + ".") for up in UPPER):
                    bad.append(f"{path.relative_to(root.parent)}:{line} imports {module}")
    return bad


def test_lower_layers_never_import_training_cli_service_or_eval():
    assert all((SRC / layer).is_dir() for layer in LOWER)
    assert violations(SRC) == []


def test_the_check_sees_every_import_form(tmp_path):
    """The walker must catch the forms a violation could take, or the test above proves nothing."""
    pkg = tmp_path / "capr"
    (pkg / "models").mkdir(parents=True)
    for layer in LOWER[:-1]:
        (pkg / layer).mkdir()
    (pkg / "models" / "ok.py").write_text("from capr.models.card import read_card\nimport capr.errors\n")
    (pkg / "models" / "lazy.py").write_text("def f():\n    from capr.train.models import PolyEncoderModel\n")
    (pkg / "retrieve" / "plain.py").write_text("import capr.service.app\n")
    (pkg / "index" / "package.py").write_text("from capr import eval, records\n")
    (pkg / "store" / "relative.py").write_text("from ..cli import app\n")
    found = violations(pkg)
    assert [v.split(" imports ")[1] for v in found] == ["capr.service.app", "capr.eval", "capr.cli", "capr.cli.app",
                                                         "capr.train.models",
                                                         "capr.train.models.PolyEncoderModel"], found
