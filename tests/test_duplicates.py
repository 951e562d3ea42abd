"""No repeated logic in the library: six or more statements that appear again elsewhere in src/ (after whitespace,
comments and docstrings are set aside) are one piece of code written twice, which then drift apart. Imports,
signatures and data tables are not logic and are not compared."""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from collections import defaultdict
from pathlib import Path

import capr

SRC = Path(capr.__file__).parent
WINDOW = 6  # statements in a run that may not appear twice


def logic_lines(source: str) -> list[tuple[int, str]]:
    """(line, normalised text) of every line that belongs to a statement of code: not an import, a signature, a
    docstring, a comment, a blank line or a line of a literal data table."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            skip.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body_start = node.body[0].lineno
            skip.update(range(node.lineno, body_start))
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                skip.update(range(first.lineno, first.end_lineno + 1))
        elif isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)) and node.end_lineno - node.lineno >= 3 and all(
                isinstance(e, ast.Constant) or (isinstance(e, (ast.Tuple, ast.List)) and all(isinstance(x, ast.Constant) for x in e.elts))
                for e in (node.values if isinstance(node, ast.Dict) else node.elts)):
            skip.update(range(node.lineno, node.end_lineno + 1))
    module_doc = tree.body[0] if tree.body else None
    if isinstance(module_doc, ast.Expr) and isinstance(module_doc.value, ast.Constant):
        skip.update(range(module_doc.lineno, module_doc.end_lineno + 1))
    comments = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT and tok.line.strip().startswith("#")}
    out = []
    for i, line in enumerate(source.splitlines(), 1):
        text = " ".join(line.split("#")[0].split()) if "#" in line and i not in comments else " ".join(line.split())
        if i in skip or i in comments or not text or text in (")", "]", "}", "):", "else:", "try:", "finally:"):
            continue
        out.append((i, text))
    return out


def repeated_runs(root: Path, window: int = WINDOW) -> list[str]:
    """Each run of ``window`` logic lines that appears at two places (two files, or twice in one file)."""
    seen: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        lines = logic_lines(path.read_text(encoding="utf-8"))
        for k in range(len(lines) - window + 1):
            key = hashlib.blake2b("\n".join(t for _, t in lines[k:k + window]).encode(), digest_size=12).hexdigest()
            seen[key].append((str(path.relative_to(root.parent)), lines[k][0]))
    pairs = set()
    for places in seen.values():
        if len(places) > 1:
            (a, la), (b, lb) = places[0], places[1]
            if a != b or abs(la - lb) >= window:
                pairs.add(f"{a}:{la} repeats at {b}:{lb}")
    return sorted(pairs)


def test_the_library_writes_no_logic_twice():
    assert repeated_runs(SRC) == []


def test_the_check_finds_a_copied_function_but_not_shared_imports(tmp_path):
    pkg = tmp_path / "capr"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = x{i - 1} + {i}" for i in range(1, 8))
    imports = "\n".join(f"import mod{i}" for i in range(8))
    (pkg / "a.py").write_text(f'{imports}\n\n\ndef f(x0):\n    """One."""\n{body}\n    return x7\n')
    (pkg / "b.py").write_text(f'{imports}\n\n\ndef g(x0):\n    """Two."""\n{body}\n    return x7\n')
    (pkg / "c.py").write_text(f"{imports}\n")
    found = repeated_runs(pkg)
    assert found and all(p.startswith("capr/a.py:") and "capr/b.py:" in p for p in found), found
