"""The package's layering (issue 15): what serves a query (text/, index/, store/) and the models it loads
(models/) never import training, the CLI, the service or evaluation, so a search process loads none of them and a
change there cannot break search. Checked on the source with `ast`, imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import capr

SRC = Path(capr.__file__).parent
LOWER = ("text", "index", "store", "models")
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
    (pkg / "text" / "plain.py").write_text("import capr.service.app\n")
    (pkg / "index" / "package.py").write_text("from capr import eval, records\n")
    (pkg / "store" / "relative.py").write_text("from ..cli import app\n")
    found = violations(pkg)
    assert [v.split(" imports ")[1] for v in found] == ["capr.service.app", "capr.eval", "capr.cli", "capr.cli.app",
                                                         "capr.train.models",
                                                         "capr.train.models.PolyEncoderModel"], found


# Every module's floor, lowest first: a module imports only modules of its own floor or below (imports inside
# functions count; `if TYPE_CHECKING:` blocks do not, as they never run, but the cycle check counts them). Each
# folder is one floor, with no module of it listed apart; the package's root modules are the ground
# (errors, records, the filter language) and the fronts (its public names and commands).
LAYERS: list[tuple[str, ...]] = [
    ("capr._version", "capr.errors"),
    ("capr.text",),  # analyzer, sentences, de-identification, negation, the aspect vocabulary, the BM25 formula
    ("capr.records", "capr.filters", "capr.rank_metrics"),  # the typed records every floor shares, the filter
    # language, and the rank metrics every floor that scores a ranking computes
    ("capr.corpus",),  # readers and segmentation
    ("capr.models",),
    ("capr.index",),  # the embedded engine
    ("capr.labels",),
    ("capr.store",),
    ("capr.search",),  # the one pipeline
    ("capr.train",),
    ("capr.cdv",),
    ("capr.cases",),
    ("capr.eval",),
    ("capr.adapt",),
    ("capr.service",),
    ("capr.cli", "capr.demo"),
    ("capr", "capr.__main__", "capr.reproduce"),
]


def module_imports(root: Path, type_only_count: bool = False) -> dict[str, set[str]]:
    """Each module of the package (dotted name) → the package's modules it imports at run time (and, with
    ``type_only_count``, under ``if TYPE_CHECKING:`` too)."""
    files = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def owner(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                     for stmt in block.body for n in ast.walk(stmt)}
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in type_only and not type_only_count:
                continue
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                subs = [f"{source}.{a.name}" for a in node.names]
                found |= {s for s in subs if s in files}  # `from pkg import module` imports the module
                if any(s not in files for s in subs):
                    found.add(source)
        graph[module] = {m for m in (owner(n) for n in found if n.split(".")[0] == root.name) if m and m != module}
    return graph


def layer_of(module: str) -> int | None:
    best, rank = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    return rank


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles_even_counting_type_only_imports():
    assert import_cycles(module_imports(SRC, type_only_count=True)) == []


def test_every_module_has_a_layer_and_imports_only_downward():
    graph = module_imports(SRC)
    assert [m for m in graph if layer_of(m) is None] == []
    upward = [f"{m} (layer {layer_of(m)}) imports {d} (layer {layer_of(d)})"
              for m, deps in sorted(graph.items()) for d in sorted(deps) if layer_of(d) > layer_of(m)]
    assert upward == []


def test_the_cycle_and_layer_checks_see_what_they_must(tmp_path):
    """A planted cycle through a function-level import is found; a type-only import is no run-time import, but
    the cycle check counts it; a folder is one floor."""
    pkg = tmp_path / "capr"
    (pkg / "store").mkdir(parents=True)
    (pkg / "search").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("def open_store():\n    from capr.store.embedded import Embedded\n")
    (pkg / "store" / "embedded.py").write_text("from capr.search.query import parse\n")
    (pkg / "search" / "__init__.py").write_text("")
    (pkg / "search" / "query.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                             "    from capr.search.searcher import S\nfrom capr.store import open_store\n")
    (pkg / "search" / "searcher.py").write_text("from capr.search import query\n")
    graph = module_imports(pkg)
    assert graph["capr.search.query"] == {"capr.store"} and graph["capr.search.searcher"] == {"capr.search.query"}
    assert import_cycles(graph) == [["capr.search.query", "capr.store", "capr.store.embedded"]]
    typed = module_imports(pkg, type_only_count=True)
    assert typed["capr.search.query"] == {"capr.store", "capr.search.searcher"}
    assert import_cycles(typed) == [["capr.search.query", "capr.search.searcher", "capr.store", "capr.store.embedded"]]
    assert layer_of("capr.store.protocol") == layer_of("capr.store.embedded") > layer_of("capr.index.index")


def test_every_folder_is_one_floor():
    """No module is given a floor apart from its folder's (the exceptions the layering once needed)."""
    folders = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    named = [p for floor in LAYERS for p in floor]
    assert [p for p in named if p.count(".") > 1] == []
    assert sorted(f for f in folders if f"capr.{f}" not in named) == []


def test_the_library_never_imports_the_measurement_code():
    """bench/ and experiments/ sit on top of capr (they import it; it imports neither), so a benchmark or a sweep
    can change without touching what users run."""
    bad = [f"{path.relative_to(SRC.parent)}:{line} imports {module}" for path in sorted(SRC.rglob("*.py"))
           for line, module in imported_modules(path, SRC) if module.split(".")[0] in ("bench", "experiments")]
    assert bad == []


def test_the_embedded_store_is_an_explicit_adapter_and_the_index_has_no_store_front():
    """Every read of the Store protocol is written out on EmbeddedStore (no forwarding through __getattr__, which
    would let callers reach any Index internal through a store), and the user-facing checks and messages live on
    the adapter, not on Index (storage and scoring primitives)."""
    from capr.index.index import Index
    from capr.store.embedded import EmbeddedStore
    from capr.store.milvus_backend import MilvusStore
    from capr.store.protocol import Store

    assert "__getattr__" not in vars(EmbeddedStore)
    members = [n for n in dir(Store) if not n.startswith("_")] + list(Store.__annotations__)
    instance_attributes = {"name"}  # set in __init__
    assert [n for n in members if n not in vars(EmbeddedStore) and n not in instance_attributes] == []
    assert [n for n in members if not hasattr(MilvusStore, n) and n not in ("name", "analyzer", "bm25_params")] == []
    front = ("compile_filter", "filter_mask", "check_aspect", "explain_empty", "capabilities", "backend")
    assert [n for n in front if hasattr(Index, n)] == []
