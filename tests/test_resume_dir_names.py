"""``resume=<run dir>`` takes the run directories the project writes (``=``, ``+`` and ``,`` in their names), and a
finished run asked to change a result-changing key says so and how to re-run (446911a: Hydra's "mismatched input
'='" naming no override; quoted, the run was skipped with exit 0 and the change never mentioned)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.callbacks.run_config import finished_run_changes
from cselab.io.config import hydra_quote, override_key, resume_overrides
from cselab.run.spec import copies_of, resolved_config
from tests import forked

ROOT = Path(__file__).resolve().parents[1]
#: a run directory as run_name writes it (issue 33's example), with a sweep's comma too
RUN_DIR = "outputs/simcse_minilm_l6_unsup+eval.test_tasks=-stsb-,sts12+trainer.max_steps=10"


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def test_the_project_s_own_directory_names_parse_as_resume_dir():
    overrides = resume_overrides([f"resume={RUN_DIR}", "optim.lr=1e-4"])
    assert overrides == [f"resume.dir='{RUN_DIR}'", "optim.lr=1e-4"]
    cfg = _compose(*overrides)
    assert cfg.resume.dir == RUN_DIR and cfg.hydra.run.dir == RUN_DIR
    assert resume_overrides(["resume='already quoted=1'"]) == ["resume.dir='already quoted=1'"]
    assert hydra_quote("it's") == "'it\\'s'"


def test_a_finished_run_asked_for_a_change_says_so(tmp_path):
    """run.py resume=<finished run> optim.lr=1e-4 exits 1 naming optim.lr, both values and how to re-run."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["method=simcse", "trainer.max_steps=10", "run_name=x"])
    saved = resolved_config(cfg)
    run_dir = tmp_path / RUN_DIR
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json.dumps({"config": saved, "test": {"avg": 50.0}}))
    assert finished_run_changes({"config": saved}, resolved_config(cfg), copies_of(cfg), run_dir) is None  # the same command: a plain skip

    proc = forked.run([sys.executable, str(ROOT / "run.py"), f"resume={RUN_DIR}", "method=simcse",
                           "trainer.max_steps=10", "optim.lr=1e-4"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "mismatched input" not in proc.stderr
    assert "already finished" in proc.stderr and "optim.lr: 3e-05 in the finished run, 0.0001 now" in proc.stderr
    assert "overwrite=true" in proc.stderr and "run_name=" in proc.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["results.json"]  # the refusal wrote nothing


#: a command whose name is over RUN_NAME_LIMIT (issue 40, item 8: it became ``...trainer.max_steps=30~15a349ac``)
LONG = ["method=simcse", "backbone=splade_tiny", "data.batch_size=16", "eval.test_tasks=[stsb]", "trainer.max_steps=300",
        "trainer.val_check_interval=100"]


def test_a_long_run_name_drops_whole_parts_never_characters():
    from cselab.io.config import RUN_NAME_LIMIT, job_dir_name, run_name

    name = run_name(LONG, "simcse", "splade_tiny", "unsup")
    assert len(name) <= RUN_NAME_LIMIT and "~" in name
    kept, _ = name.split("~")
    whole = {o.replace("[", "-").replace("]", "-") for o in LONG}
    assert kept.split("+")[0] == "simcse_splade_tiny_unsup"
    assert all(part in whole for part in kept.split("+")[1:]), name  # each kept key=value whole
    assert "trainer.max_steps=30" not in name.replace("trainer.max_steps=300", "")
    other = run_name([*LONG[:-1], "trainer.max_steps=301"], "simcse", "splade_tiny", "unsup")
    assert other != name  # a dropped part still tells two commands apart (the hash of the whole)
    job = job_dir_name(3, LONG, {override_key(o) for o in LONG}, "simcse", "splade_tiny", "unsup")
    assert len(job) <= RUN_NAME_LIMIT + 2 and all(p in whole for p in job[2:].split("~")[0].split("+")), job


def test_a_key_given_twice_is_named_once_with_the_value_hydra_applies():
    from cselab.io.config import job_dir_name, run_name

    assert run_name(["trainer.max_steps=10", "seed=1", "trainer.max_steps=20"], "simcse", "minilm_l6", "unsup") == \
        "simcse_minilm_l6_unsup+seed=1+trainer.max_steps=20"
    assert job_dir_name(0, ["seed=1", "seed=2"], {"seed"}, "m", "b", "s") == "0_seed=2"


def test_an_old_shortened_directory_still_resumes():
    old = "outputs/simcse_splade_tiny_unsup+data.batch_size=8+eval.test_tasks=-stsb-+loss.temperature=0.05+trainer.max_steps=30~15a349ac"
    cfg = _compose(*resume_overrides([f"resume={old}"]))
    assert cfg.resume.dir == old and cfg.hydra.run.dir == old
