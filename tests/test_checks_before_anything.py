"""Every check that can fail on input runs before a run directory is made or a model loads: one line that names the
key and what to do, exit 1, no traceback, no run directory, no failed.json (issue 40, items 2, 4 and 6: typed
values and unknown tasks gave tracebacks and left a directory with failed.json; SNCSE's soft negatives, a missing
data.path and the whitening corpus failed after the model loaded, or after training; RankCSE's missing teacher wrote
no failed.json and nothing to run.log; a teacher given as a run directory needed hand quoting)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import cselab.io.config  # noqa: F401  (resolvers)
from tests import forked

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
#: a cheap run of the embedded data (nothing loads before a refusal)
BASE = ["method=simcse", "trainer.max_steps=4", "eval.test_tasks=[stsb]", f"data_dir={DATA}"]


def _run(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return forked.run([sys.executable, str(ROOT / "run.py"), *BASE, *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


#: a bad command -> a text its one line must hold (the key it names)
BAD = {
    "seed=x": "seed='x': expected an integer",
    "trainer.max_steps=abc": "trainer.max_steps='abc': expected an integer",
    "eval.test_tasks=[stsz]": "eval.test_tasks: unknown STS task 'stsz'",
    "data.path=/nonexistent/corpus.txt": "(config key data.path)",
    "method=sncse data.soft_negatives=missing.jsonl": "missing.jsonl (data.soft_negatives) are missing",
    "eval.whitening.enabled=true eval.whitening.fit_on=nli eval.whitening.file=missing_nli.csv":
        "config key eval.whitening.file",
    "method=rankcse method.teachers=/nonexistent/teacher": "method.teachers[0].path='/nonexistent/teacher'",
    "method=promptbert loss.name=cot_infonce": "choose it with the config group, loss=cot_infonce",
    "method=simcse loss.hard_negative_weight=1.0": "setting=unsup trains 2 views: use setting=sup",
    "method=simcse prompt=promptbert": "prompt=promptbert would wrap them in its template at test only",
    "trainer.val_check_interval=0": "trainer.val_check_interval=0: expected a number of steps >= 1",
    "eval.test_tasks=[]": "eval.test_tasks=[]: expected at least one task",
    "eval.test_tasks=[stsb,STS-B]": "eval.test_tasks: stsb is listed twice",
    "eval.aggregation=median": "eval.aggregation='median': expected one of all, mean, wmean",
    "eval.best_on_tie=middle": "eval.best_on_tie='middle': expected one of first, last",
    "eval.whitening.enabled=true eval.whitening.n_sentences=8 eval.whitening.k=8":
        "eval.whitening.n_sentences=8 cannot whiten k=8 dimensions",
    "eval.batch_size=0": "eval.batch_size=0: expected a number of sentences >= 1",
    "eval.transfer_mode=slow": "eval.transfer_mode='slow': no transfer.slow node",
    "eval.transfer_tasks=[mr,mr]": "mr listed twice",
    "trainer.gradient_clip_val=-1": "trainer.gradient_clip_val=-1: expected a gradient norm >= 0",
    "optim.warmup_steps=-5": "optim.warmup_steps=-5: expected a number of steps >= 0",
}


#: run-level refusals: decided before Lightning, the methods, dynamo, scikit-learn, transformers and scipy.stats load
RUN_LEVEL = ["optim.lrr=1", "seed=x", "trainer.max_steps=abc", "trainer.val_check_interval=0",
             "eval.aggregation=median", "eval.transfer_mode=slow"]
#: the commands of the one process, in order: the run-level ones first (the packages loaded after them are theirs)
COMMANDS = [*RUN_LEVEL, *(command for command in BAD if command not in RUN_LEVEL)]


#: ``python run.py <argv>`` for each command of a JSON list, one after another in ONE process (the tables' commands
#: would each pay the interpreter's, torch's and often Lightning's import, ~9 s, in a process of their own): each in
#: its own working directory ``<out>/<i>``, its stdout and stderr (the file descriptors: logging's handlers, Hydra's,
#: a traceback) in ``stdout.txt`` / ``stderr.txt`` there, its exit status as the interpreter would give it
#: (``sys.exit("cselab: ...")``: the line on stderr, 1; an uncaught exception: its traceback, 1) and the heavy
#: packages the process has loaded so far in ``codes.json``
_ONE_PROCESS = """import json, os, runpy, sys, traceback
from pathlib import Path
from hydra.core.global_hydra import GlobalHydra
run_py, out = sys.argv[1], Path(sys.argv[2])
HEAVY = ("lightning", "cselab.methods.base", "cselab.run.assemble", "torch._dynamo", "sklearn", "transformers",
         "scipy.stats")
codes = {}
for i, argv in enumerate(json.loads((out / "commands.json").read_text())):
    cwd = out / str(i)
    cwd.mkdir()
    os.chdir(cwd)
    saved = os.dup(1), os.dup(2)
    with open(cwd / "stdout.txt", "w") as o, open(cwd / "stderr.txt", "w") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
        try:
            sys.argv = [run_py, *argv]
            runpy.run_path(run_py, run_name="__main__")
            code = 0
        except SystemExit as end:
            code = 1 if isinstance(end.code, str) else (end.code or 0)
            if isinstance(end.code, str):
                print(end.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            GlobalHydra.instance().clear()
    codes[i] = [code, sorted(m for m in HEAVY if m in sys.modules)]
(out / "codes.json").write_text(json.dumps(codes))
"""


@pytest.fixture(scope="session")
def refused(tmp_path_factory) -> dict[str, tuple[int, str, Path, list[str]]]:
    """Each :data:`RUN_LEVEL` command, then each other :data:`BAD` one, run as ``python run.py`` in one process
    (:data:`_ONE_PROCESS`, once a session for every pytest-xdist worker: a file lock in the session's temporary
    root) -> (exit status, stdout + stderr, its working directory, the heavy packages loaded after it: the
    run-level commands come first, so theirs are their own)."""
    from filelock import FileLock  # (a dependency of torch)

    from tests.conftest import session_root

    root = session_root(tmp_path_factory) / "bad_commands"
    with FileLock(str(root) + ".lock"):
        if not (root / "codes.json").exists():
            root.mkdir(exist_ok=True)
            (root / "commands.json").write_text(json.dumps([[*BASE, *command.split()] for command in COMMANDS]))
            subprocess.run([sys.executable, "-c", _ONE_PROCESS, str(ROOT / "run.py"), str(root)], check=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=1200)
    codes = json.loads((root / "codes.json").read_text())
    return {command: (codes[str(i)][0], (root / str(i) / "stdout.txt").read_text() + (root / str(i) / "stderr.txt")
                      .read_text(), root / str(i), codes[str(i)][1]) for i, command in enumerate(COMMANDS)}


@pytest.mark.xdist_group("refused")  # one worker runs the rows: no other waits on the fixture's lock
@pytest.mark.parametrize("command", list(BAD))
def test_a_bad_input_is_one_line_before_any_directory_or_model(refused, command):
    code, output, cwd, _ = refused[command]
    assert code == 1, output[-3000:]
    lines = output.strip().splitlines()
    assert lines and lines[-1].startswith("cselab: ") and BAD[command] in lines[-1], output[-3000:]
    assert "Traceback" not in output and "Seed set to" not in output  # nothing built
    assert not (cwd / "outputs").exists()  # no run directory, so no failed.json either


@pytest.mark.xdist_group("refused")  # one worker runs the rows: no other waits on the fixture's lock
@pytest.mark.parametrize("command", RUN_LEVEL)
def test_a_run_level_refusal_comes_before_lightning_and_the_methods_load(refused, command):
    """A mistyped key and a bad run-level value (seed, trainer, eval) are refused before Lightning, the methods,
    dynamo, scikit-learn, transformers and scipy.stats are imported (on an idle 2-core machine: Lightning alone is
    about 9 s of a run's start-up, 5 s of it torchmetrics, which imports transformers and scipy.signal; dynamo and
    scikit-learn 2 s each, scipy.stats and transformers 1 s each; such a
    refusal took 8.9 s with the last two, 5.3 s without).  The method's own checks import its class, a
    LightningModule: a refusal of a ``method.*`` value or an input file comes after Lightning has loaded."""
    code, output, _, loaded = refused[command]
    assert code == 1 and output.strip().splitlines()[-1].startswith("cselab: "), output[-3000:]
    assert loaded == [], output[-3000:]


def test_an_unwritable_output_folder_is_named(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT))
    try:
        import run as run_py
    finally:
        sys.path.remove(str(ROOT))
    from cselab.io.files import unwritable_folder

    outputs = tmp_path / "outputs"
    outputs.mkdir()
    assert unwritable_folder(outputs / "mine" / "deeper") is None
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == outputs else real_access(p, mode))
    assert unwritable_folder(outputs / "mine") == outputs  # the nearest existing folder, read-only
    assert "hydra.run.dir=<folder>" in run_py.unwritable_message(outputs)
    assert run_py.output_folder(["method=simcse"]) == "outputs"
    assert run_py.output_folder(["-m", "seed=1,2"]) == "multirun"
    assert run_py.output_folder(["resume.dir='outputs/a=1'"]) == "outputs/a=1"


def test_whitening_by_default_fits_on_what_the_embedded_data_has(tmp_path):
    from cselab.run.inputs import check_inputs
    from cselab.run.spec import RunSpec

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[*BASE, "eval.whitening.enabled=true"])
    assert cfg.eval.whitening.fit_on == "target"  # the test tasks' own sentences: the STS files every run reads
    spec = RunSpec.from_config(cfg)
    assert spec.inputs.whitening_corpus is None
    check_inputs(spec.inputs)  # nothing missing with the embedded data


def _fake_run_dir(parent: Path) -> Path:
    """A directory named as the project names runs (``=``, ``+``, ``,``, ``~``) holding a checkpoint that is not
    one: it passes the check of the teacher's path and fails when the teacher loads, after the run started."""
    teacher = parent / "outputs" / "simcse_splade_tiny_unsup+data.batch_size=16+eval.test_tasks=-stsb-,sts12~15a349ac"
    (teacher / "checkpoints").mkdir(parents=True)
    (teacher / "checkpoints" / "best-step4.ckpt").write_bytes(b"not a checkpoint")
    return teacher


def test_a_rankcse_run_whose_teacher_fails_writes_failed_json_and_its_cause_in_run_log(tmp_path):
    teacher = _fake_run_dir(tmp_path)
    proc = _run(tmp_path, "method=rankcse", "backbone=splade_tiny", "data.batch_size=8", "run_name=student",
                f"method.teachers={teacher.relative_to(tmp_path)}")  # unquoted: = + , ~ in the name
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "LexerNoViableAltException" not in proc.stderr and "mismatched input" not in proc.stderr
    run_dir = tmp_path / "outputs" / "student"
    failed = json.loads((run_dir / "failed.json").read_text())  # the teacher cannot be read: a failed run
    log = (run_dir / "run.log").read_text()
    assert "RankCSE teacher 0: outputs/simcse_splade_tiny_unsup+" in log and "best-step4.ckpt" in log  # logged
    assert f"the run failed ({failed['error']}: {failed['message']}" in log  # the cause
    saved = (run_dir / ".hydra" / "config.yaml").read_text()
    assert "15a349ac" in saved  # the teacher is saved with the run


def test_teachers_given_as_run_directories_parse_unquoted(tmp_path):
    from cselab.io.config import teacher_overrides

    name = "outputs/simcse_splade_tiny_unsup+data.batch_size=16+eval.test_tasks=-stsb-,sts12~15a349ac"
    for given, weights in ((f"method.teachers={name}", [1.0]),
                           (f"method.teachers=[{{path:{name},weight:0.5}},{{path:/x/y,weight:0.5}}]", [0.5, 0.5]),
                           (f"method.teachers.0.path={name}", [1.0])):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=["method=rankcse", *teacher_overrides([given])])
        assert cfg.method.teachers[0].path == name and [t.weight for t in cfg.method.teachers] == weights


def test_the_teachers_used_are_recorded(tmp_path):
    from cselab.run.teachers import teacher_record

    teacher = _fake_run_dir(tmp_path)
    record = teacher_record([{"path": str(teacher), "weight": 1.0}])
    assert record == [{"path": str(teacher), "weight": 1.0,
                       "loads": str((teacher / "checkpoints" / "best-step4.ckpt").resolve())}]


def test_a_backbone_not_here_offline_is_one_line_naming_the_alternatives_and_keeps_its_record(tmp_path):
    """Weights neither on disk nor in the cache, offline: one line (no traceback) that names the offline
    alternatives; the run directory keeps failed.json and run.log (the error comes after the run was claimed)."""
    proc = _run(tmp_path, "backbone.name_or_path=someorg/somemodel", "run_name=nobackbone")
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cselab: backbone 'someorg/somemodel'") and "backbone=minilm_l6" in last, proc.stderr[-3000:]
    assert "backbone=splade_tiny" in last and "Traceback" not in proc.stderr
    failed = json.loads((tmp_path / "outputs" / "nobackbone" / "failed.json").read_text())
    assert failed["error"] == "BackboneUnavailableError"
    assert "Offline alternatives" in (tmp_path / "outputs" / "nobackbone" / "run.log").read_text()
