"""Imports flow one way: every ``cselab`` module belongs to a layer, and no module imports from a higher one.

The layers, bottom first (:data:`LAYERS`); a module imports only from its own layer or lower ones:

0. ``io/`` -- files and atomic writes, console/log output, tables, config resolvers, model targets: no model, no data.
1. ``parts`` -- ``data/``, ``model/`` (the embedding model), ``representations/``, ``losses/`` (the shared losses):
   the pieces a model and its inputs are made of.
2. ``evaluation/`` -- scoring any ``encode(sentences) -> Tensor`` (STS, transfer, CxC, MTEB adapter, ``results.json``).
3. ``methods/`` -- the shared training machinery and one folder per method; ``cselab.load``; the package facade.
4. ``pipeline`` -- ``run/`` (one training run, a Hydra job: spec, lock, resume, signals, checkpoints, loggers,
   sweeps) and ``callbacks/``.
5. ``apps`` -- what uses trained models and runs: ``report/``, ``analysis/``, ``export/`` (folder, model card, Hub).
6. ``cli/`` -- ``cselab.cli.*`` and every ``__main__``: argparse front ends, imported by nothing in the library.

Each layer is folders (:data:`LAYERS`); the package's top level holds only ``__init__.py`` and ``__main__.py``
(:func:`test_top_level_holds_at_most_four_modules`).

A library module has no ``if __name__ == "__main__":`` block importing the CLI back (that was a circle: the
``python -m`` spellings are ``python -m cselab COMMAND``, ``src/cselab/__main__.py``).  The parse is static (``ast``), so a function-level import counts like a top one.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: layer name -> module prefixes, bottom first (a module takes the layer of its longest matching prefix;
#: ``cselab`` itself matches only the package's ``__init__``)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("io", ("cselab.io",)),
    ("parts", ("cselab.data", "cselab.model", "cselab.representations", "cselab.losses")),
    ("evaluation", ("cselab.evaluation",)),
    ("methods", ("cselab.methods", "cselab")),  # "cselab": the package facade (cselab.load)
    ("pipeline", ("cselab.run", "cselab.callbacks")),
    ("apps", ("cselab.report", "cselab.analysis", "cselab.export")),
    ("cli", ("cselab.cli",)),
]

#: (importing module, imported module) pairs allowed to point up for now, each with its reason.  An entry that
#: no longer matches an import fails the test, so it goes with the import it excused.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of ``module`` (``cselab.cli.*`` and every ``__main__``: the top)."""
    if module.endswith(".__main__") or module == "cselab.cli" or module.startswith("cselab.cli."):
        return len(LAYERS) - 1
    best, found = -1, None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # "cselab" names the package facade only: a new cselab.x module must be declared
            below = prefix != "cselab" and module.startswith(prefix + ".")
            if (module == prefix or below) and len(prefix) > best:
                best, found = len(prefix), index
    if found is None:
        raise AssertionError(f"{module}: no layer declared for it in tests/test_layers.py LAYERS")
    return found


def _is_module(name: str) -> bool:
    base = SRC.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _main_block(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` at a module's top level."""
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and len(test.comparators) == 1
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__")


def imports(path: Path) -> list[tuple[int, str, str, bool]]:
    """``(line, imported cselab module, source text, inside the __main__ block)`` for each import of ``path``."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    lines = text.splitlines()
    in_main = {id(n) for top in tree.body if _main_block(top) for n in ast.walk(top)}
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base for a in node.names]
        for target in dict.fromkeys(targets):
            if target == "cselab" or target.startswith("cselab."):
                found.append((node.lineno, target, lines[node.lineno - 1].strip(), id(node) in in_main))
    return found


def upward_imports() -> tuple[list[str], set[tuple[str, str]]]:
    """The offending imports (``path:line: source -> target (layer -> layer): text``) and the allow-list
    entries that matched."""
    offending, used = [], set()
    for path in sorted(SRC.rglob("*.py")):
        source = module_name(path)
        mine = layer_of(source)
        for line, target, text, in_main in imports(path):
            where = f"{path.relative_to(SRC.parent)}:{line}"
            if in_main and mine < len(LAYERS) - 1:
                offending.append(f"{where}: a library module's __main__ block imports {target}: a circle with the "
                                 f"CLI (the python -m spelling is `python -m cselab COMMAND`): {text}")
                continue
            theirs = layer_of(target)
            if theirs <= mine:
                continue
            key = (source, target)
            if key in ALLOWED_UPWARD:
                used.add(key)
                continue
            offending.append(f"{where}: {source} ({LAYERS[mine][0]}) -> {target} ({LAYERS[theirs][0]}): {text}")
    return offending, used


def test_every_module_has_a_layer():
    for path in SRC.rglob("*.py"):
        layer_of(module_name(path))


def test_no_module_imports_from_a_higher_layer():
    offending, _ = upward_imports()
    assert not offending, "imports pointing up a layer (tests/test_layers.py):\n" + "\n".join(offending)


def test_allowed_upward_imports_still_exist():
    _, used = upward_imports()
    stale = set(ALLOWED_UPWARD) - used
    assert not stale, f"ALLOWED_UPWARD entries no longer needed, remove them: {sorted(stale)}"


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    """The parse catches a function-level upward import, a relative one and a library ``__main__`` shim."""
    pkg = tmp_path / "cselab"
    (pkg / "io").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "report").mkdir()
    (pkg / "report" / "__init__.py").write_text("")
    (pkg / "report" / "results.py").write_text("X = 1\n")
    (pkg / "io" / "__init__.py").write_text(
        "def f():\n    from cselab.report.results import X\n    return X\n"
        "from ..report import results\n"
        "if __name__ == '__main__':\n    from cselab.cli.files import main\n")
    monkeypatch.setitem(globals(), "SRC", tmp_path)
    offending, _ = upward_imports()
    assert len(offending) == 3, offending
    assert sum("cselab.io (io) -> cselab.report.results (apps)" in o for o in offending) == 2, offending
    assert any("__main__ block imports cselab.cli.files" in o for o in offending), offending


def test_command_lines_live_in_the_cli_package():
    """argparse front ends are ``cselab.cli.*`` modules (``python -m cselab COMMAND`` runs them)."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if layer_of(module_name(path)) == len(LAYERS) - 1:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names:
                offenders.append(f"{path.relative_to(SRC.parent)}:{node.lineno}")
    assert not offenders, f"argparse outside cselab.cli (move the command line to src/cselab/cli/): {offenders}"


def test_top_level_holds_at_most_four_modules():
    """The folders show the layers: a module belongs in its layer's folder, not loose at the top."""
    loose = sorted(p.name for p in (SRC / "cselab").glob("*.py"))
    assert len(loose) <= 4, f"loose top-level modules (move each into its layer's folder): {loose}"


def import_cycles() -> list[list[str]]:
    """The strongly connected components (more than one module) of the import graph, function-level imports
    included (Tarjan)."""
    graph = {module_name(p): {t for _, t, _, _ in imports(p) if t != module_name(p)} for p in SRC.rglob("*.py")}
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

    for v in list(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_import_graph_has_no_cycles():
    """No circle of imports, even through a function-level import (a package ``__init__`` that re-exports from a
    module importing the package was one)."""
    assert import_cycles() == [], "import cycles (break each: move the shared name down a module):\n" + "\n".join(
        " <-> ".join(c) for c in import_cycles())
