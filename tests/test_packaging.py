"""Packaging: pyproject.toml declares what the code imports, requirements.txt pins inside those ranges, the
console commands resolve, and optional extras stay optional."""

from __future__ import annotations

import ast
import importlib
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "cselab"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

#: import name -> distribution name, where they differ
DIST_OF = {"hydra": "hydra-core", "yaml": "pyyaml", "sentence_transformers": "sentence-transformers",
           "huggingface_hub": "huggingface-hub", "sklearn": "scikit-learn"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(items) -> dict[str, Requirement]:
    return {_norm(r.name): r for r in map(Requirement, items)}


def _imports(path: Path) -> set[str]:
    """Top-level modules imported anywhere in ``path`` (module level and inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_third_party_import_is_declared():
    """A module of src/cselab imports only the stdlib, cselab, the runtime dependencies and the extras."""
    runtime = _requirements(PYPROJECT["dependencies"])
    extras = {_norm(r.name) for group in PYPROJECT["optional-dependencies"].values() for r in map(Requirement, group)}
    undeclared = {}
    for path in SRC.rglob("*.py"):
        for name in _imports(path) - set(sys.stdlib_module_names) - {"cselab", "__future__"}:
            dist = _norm(DIST_OF.get(name, name))
            if dist not in runtime and dist not in extras:
                undeclared.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_optional_extras_are_not_imported_at_module_level_by_the_core():
    """wandb / mteb are extras: no module imports them at import time (only inside the function using them),
    except cselab.evaluation.mteb, the MTEB integration itself."""
    for path in SRC.rglob("*.py"):
        if path == SRC / "evaluation" / "mteb.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                top.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                top.add(node.module.split(".")[0])
        assert not top & {"wandb", "mteb"}, f"{path} imports an optional extra at module level"


def test_requirements_pin_the_lower_bounds_of_the_ranges():
    """requirements.txt (what CI tests) pins each declared package at the lower bound of its range."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"requirements.txt: {line!r} is not an exact pin"
            pins[_norm(req.name)] = spec.version
    declared = [*PYPROJECT["dependencies"], *(r for extra, group in PYPROJECT["optional-dependencies"].items()
                                             if extra != "all" for r in group)]
    for req in map(Requirement, declared):
        name = _norm(req.name)
        assert name in pins, f"{req.name} is declared in pyproject.toml but not pinned in requirements.txt"
        assert req.specifier.contains(pins[name]), f"{req.name}=={pins[name]} is outside {req.specifier}"
        lower = [s.version for s in req.specifier if s.operator == ">="]
        assert lower == [pins[name]], f"{req.name}: lower bound {lower} is not the tested {pins[name]}"


def test_console_scripts_resolve_to_callables():
    for name, target in PYPROJECT["scripts"].items():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), name


def test_cselab_command_lists_and_dispatches(capsys):
    from cselab.cli import COMMANDS, EXTRAS, main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    assert main([]) == 2
    assert main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err
    for module, _ in COMMANDS.values():
        try:
            assert callable(importlib.import_module(module).main)
        except ModuleNotFoundError as err:  # only an optional extra may be missing (pip install -e .[dev])
            assert err.name.split(".")[0] in EXTRAS, f"{module}: {err}"
    # a command gets the rest of the arguments (the report refuses a missing directory with argparse's 2)
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "/no/such/dir"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("command", ["data", "tiny-decoders", "mteb", "transfer", "export"])
def test_command_help_is_whole_and_lists_sub_commands(command, capsys):
    """Issue #40: `cselab data --help` omitted `soft-negatives`; the `tiny-decoders` help stopped at "decoders with a"
    (the first line of a wrapped docstring).  Each help ends its description."""
    from cselab.cli import main

    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and "cselab" in out.splitlines()[0]
    description = out.split("\n\n")[1]
    assert not description.rstrip().endswith((" a", " the", " with", ",")), description
    if command == "data":
        assert "cselab data soft-negatives" in out


def test_library_modules_do_not_import_the_cli():
    """Only ``cselab.cli.*``, the ``__main__`` shims and a module's own ``if __name__ == "__main__":`` block
    import the CLI (tests/test_layers.py checks every other edge)."""
    from tests.test_layers import imports

    for path in SRC.rglob("*.py"):
        if path.parent.name == "cli" or path.name == "__main__.py":
            continue
        bad = [f"{line}: {text}" for line, target, text, in_main in imports(path)
               if target.startswith("cselab.cli") and not in_main]
        assert not bad, f"{path} imports the CLI: {bad}"


#: every ``python -m`` spelling the README documents -> the ``cselab`` command it equals
PYTHON_M = {"cselab.cli": None, "cselab": None}


@pytest.mark.parametrize("module", sorted(PYTHON_M))
def test_python_m_spellings_run_the_cli(module, monkeypatch, capsys):
    """``python -m MODULE --help`` (run by runpy, as ``python -m`` does) prints what ``cselab COMMAND --help``
    prints: the shim calls the command's ``main``."""
    import importlib.util
    import runpy
    import warnings

    from cselab.cli import EXTRAS, main

    spec = importlib.util.find_spec(module)
    script = importlib.util.find_spec(f"{module}.__main__").origin if spec.submodule_search_locations else spec.origin

    def run(call):
        monkeypatch.setattr(sys, "argv", [script, "--help"])  # the same program name both ways
        try:
            code = call()
        except SystemExit as exit_:
            code = exit_.code
        return code, capsys.readouterr().out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported before (by the tests)
        try:
            shim = run(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))
        except ModuleNotFoundError as err:  # only an optional extra may be missing (pip install -e .[dev])
            assert err.name.split(".")[0] in EXTRAS, f"{module}: {err}"
            return
    command = PYTHON_M[module]
    direct = run(lambda: main([command, "--help"] if command else ["--help"]))
    assert shim[0] in (0, None) and direct[0] in (0, None)
    assert "usage:" in shim[1]
    assert shim[1] == direct[1]


def test_wandb_logger_without_wandb_installed_falls_back_to_csv(tmp_path, monkeypatch, caplog):
    import importlib.util

    from cselab.run import loggers

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with caplog.at_level(logging.WARNING, logger="cselab.run.loggers"):
        built = loggers.build_loggers(csv=True, wandb={"project": "p"}, output_dir=str(tmp_path), tags=["t"])
    from lightning.pytorch.loggers import CSVLogger

    assert len(built) == 1 and isinstance(built[0], CSVLogger)
    assert "pip install 'cselab[wandb]'" in caplog.text


def test_a_command_whose_extra_is_missing_says_what_to_install(monkeypatch, capsys):
    from cselab import cli

    real = cli.importlib.import_module

    def missing(name, *args):  # only the command's module: the libraries' own lazy imports still work
        if name.startswith("cselab.cli."):
            raise ModuleNotFoundError("No module named 'sentence_transformers'", name="sentence_transformers")
        return real(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", missing)
    assert cli.main(["export", "x.ckpt", "out"]) == 2
    assert "pip install 'cselab[export]'" in capsys.readouterr().err


def test_xdist_groups_run_on_one_worker(tmp_path):
    """``make test`` runs ``--dist loadgroup`` so that the tests marked ``xdist_group`` (the inductor rows sharing a
    compile cache, the refusal rows sharing one process) run one after another on one worker.  pytest 9.2's
    structured node ids drop the group silently (pytest-xdist#1386): the rows then spread over the workers and each
    compiles the same graphs (requirements.txt pins pytest 9.1)."""
    (tmp_path / "test_groups.py").write_text(
        "import os, time, pytest\n"
        "@pytest.mark.xdist_group('g')\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_grouped(i):\n"
        "    time.sleep(0.05)\n"
        "    print('WORKER', os.environ['PYTEST_XDIST_WORKER'])\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_free(i):\n"
        "    time.sleep(0.05)\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "test_groups.py", "-n", "2", "--dist", "loadgroup", "-v",
                           "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    grouped = [line.split()[0] for line in proc.stdout.splitlines() if "test_grouped" in line and "PASSED" in line]
    assert len(grouped) == 6 and len(set(grouped)) == 1, proc.stdout[-3000:]
