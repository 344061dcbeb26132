"""cselab entry point: compose the Hydra config, then train and evaluate one run (or a -m sweep of them).

    python run.py                                         # PromptBERT unsup on the embedded MiniLM + wiki sample
    python run.py method=baseline method.pooler=avg  # evaluate a raw backbone
    python run.py -m method=simcse,promptbert backbone=roberta_base

Runs live in ``outputs/<run_name>`` (sweeps in ``multirun/<run_name>/<job>``), a name derived from the command's
overrides: re-running the same command resumes an interrupted run from ``checkpoints/last.ckpt`` and skips a
finished one (logged once).  In a -m sweep a failing job writes ``failed.json`` in its directory and the sweep
goes on with the next job; at its end the sweep prints a summary of its jobs and exits 1 if one failed
(``cselab.run.sweep``).  A single run that fails writes ``failed.json`` and its cause in ``run.log`` and re-raises
(non-zero exit).  A refused command -- a config error or a bad input file (a key named in the message, a ``+key``
that no code reads), a run directory in use by another process or already finished, ``resume=`` with changed
values -- is one line on stderr, exit 1, decided before anything is written: an existing run directory stays byte
for byte as it was (``.hydra/`` and ``run.log`` are written only when the run proceeds,
``cselab.run.record.RunRecord``) and a new one is not left behind.  SIGTERM / Ctrl-C in training save
``last.ckpt`` and exit 128 + the signal with the command that resumes (``cselab.run.signals``).
"""

import contextlib
import logging
import shlex
import shutil
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict

from cselab.io.config import (  # (registers the resolvers)
    MOVED_KEYS,
    backbone_path_overrides,
    moved_key_error,
    resume_overrides,
    teacher_overrides,
    variant_name,
)
from cselab.io.files import unwritable_folder
from cselab.io.logs import one_line_per_event
from cselab.methods.checks import MOVED_MODULE_KEYS
from cselab.run.sweep import exit_status

log = logging.getLogger("cselab")


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    # (none of these imports Lightning: it loads after the refusals, and a refused command answers in seconds)
    from cselab.methods.checks import ConfigError
    from cselab.run.config_keys import check_added_keys
    from cselab.run.failure import record_failure
    from cselab.run.flow import Run
    from cselab.run.lock import RunDirInUse, hold_run_dir, release_run_dir
    from cselab.run.record import RunRecord
    from cselab.run.resume import RunFinished
    from cselab.run.signals import StoppedBySignal
    from cselab.run.spec import RunSpec

    one_line_per_event()  # Hydra has configured the job's logging: third-party records go through it, once

    hydra_cfg = HydraConfig.get()
    output_dir = hydra_cfg.runtime.output_dir
    record = RunRecord(output_dir)  # .hydra/ and run.log held back: a refused command writes nothing
    fresh = fresh_run_dir(output_dir)  # Hydra made it for this command: empty
    if cfg.get("variant") is None:  # the W&B variant tag: this job's overrides that change the model
        with open_dict(cfg):
            cfg.variant = variant_name(list(hydra_cfg.overrides.task))
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if multirun and cfg.get("group") is None:  # the W&B group of an ad-hoc sweep: the sweep's name
        with open_dict(cfg):
            cfg.group = cfg.run_name
    try:
        try:  # every refusal, decided before anything is written into the run directory
            if multirun and cfg.resume.get("dir"):
                raise ConfigError("resume=... continues one run; to continue a -m sweep, re-run the sweep's command")
            check_added_keys(cfg, list(hydra_cfg.overrides.task), hydra_cfg.runtime.choices.keys())  # +optim.lrr
            if (folder := unwritable_folder(output_dir)) is not None:
                raise PermissionError(unwritable_message(folder))
            start = time.perf_counter()
            spec = RunSpec.from_config(cfg, output_dir)  # the config, read once: every rule checked, nothing loaded
            hold_run_dir(output_dir)  # a second process into the same directory is refused
            recipe = Run(spec, output_dir, start)  # (prepare checks the directory again, under the lock)
            state = recipe.prepare()  # input files, the checkpoint, a resume's changes: before the backbone loads
        except RunFinished as done:  # re-running a finished run (or a sweep's finished job): nothing to do
            from cselab.callbacks.run_config import finished_run_changes

            record.discard()
            changed = finished_run_changes(done.results, done.config or {}, done.copies, output_dir)
            if changed and not multirun:  # resume=<finished run> optim.lr=...: say that nothing changes
                sys.exit(f"cselab: {changed}")
            if changed:
                log.warning("job %s: %s", hydra_cfg.job.num, changed)
            log.info("skipped %s: already finished (results.json; overwrite=true runs it again)", output_dir)
            return (done.results.get("test") or {}).get("avg")
        except Exception as err:  # refused: the run directory keeps its record byte for byte
            in_use = isinstance(err, RunDirInUse)  # the directory is another process's: write and remove nothing
            if multirun:  # the sweep goes on; its summary lists a new job's directory with its failed.json
                path = None
                if fresh and not in_use:
                    record.claim(cfg, hydra_cfg)
                    path = record_failure(output_dir, err)
                else:
                    record.discard()
                log.error("job %s failed (%s: %s); details in %s; the sweep continues",
                          hydra_cfg.job.num, type(err).__name__, err, path or "the log above")
                return None
            record.discard()
            if fresh and not in_use and nothing_written(output_dir):  # nothing ran: leave no run directory behind
                release_run_dir(output_dir)
                shutil.rmtree(output_dir, ignore_errors=True)
                with contextlib.suppress(OSError):  # outputs/ itself, when this was its only run
                    Path(output_dir).parent.rmdir()
            if isinstance(err, INPUT_ERRORS):  # a value or an input file: the message names the key
                sys.exit(f"cselab: {err}")  # one line, exit status 1 (no traceback)
            raise
        import lightning  # noqa: F401  (it adds its console handler on import: routed through Hydra's, once)

        one_line_per_event()
        record.claim(cfg, hydra_cfg)  # the run proceeds: .hydra/, the lock's pid, run.log
        try:
            results = recipe.execute(state)
        except StoppedBySignal as stop:  # SIGTERM / SIGINT in training: not a failure, the same command resumes
            saved = f"{stop.checkpoint} saved" if stop.checkpoint else "no last.ckpt (checkpointing.save_last=false)"
            log.warning("stopped by %s at step %d: %s; resume with the same command: %s (exit status %d)",
                        stop.signal_name, stop.step, saved, shlex.join(["python", "run.py", *sys.argv[1:]]),
                        stop.code)
            raise
        except Exception as err:  # a failed run: failed.json and its cause in run.log, whatever the method
            path = record_failure(output_dir, err)
            log.error("%s failed (%s: %s); details in %s", "job " + str(hydra_cfg.job.num) if multirun else "the run",
                      type(err).__name__, err, path or "the log above")
            if multirun:
                return None
            from cselab.model.loading import BackboneUnavailableError

            if isinstance(err, (ConfigError, BackboneUnavailableError)):  # a key's value, or weights not here
                sys.exit(f"cselab: {err}")  # one line (names the key, or the offline alternatives), exit status 1
            raise
    finally:
        release_run_dir(output_dir)
    return results["test"].get("avg")


def unwritable_message(folder: Path) -> str:
    """The one line for an output folder this process cannot write."""
    return (f"{folder} is not writable (read-only or another user's): run from a folder you can write, or set the "
            "run's place with hydra.run.dir=<folder> (hydra.sweep.dir=<folder> for -m)")


def output_folder(argv: list[str]) -> str:
    """Where this command writes its run directory, from the command line alone (before Hydra makes it):
    ``resume.dir`` / ``hydra.run.dir`` (``hydra.sweep.dir`` for ``-m``) when given, else ``outputs``
    (``multirun``), conf/config.yaml's defaults."""
    multirun = any(a in ("-m", "--multirun") for a in argv)
    keys = ("hydra.sweep.dir",) if multirun else ("resume.dir", "hydra.run.dir")
    for item in argv:
        key, _, value = item.partition("=")
        if key.lstrip("+") in keys and value and "$" not in value:
            return value.strip("'\"")
    return "multirun" if multirun else "outputs"


#: what a check of the command's values and input files raises before anything is written or loaded (a refusal,
#: one line): ConfigError (a ValueError) and the file checks' errors (cselab.run.inputs.check_inputs)
INPUT_ERRORS = (ValueError, FileNotFoundError, PermissionError, NotADirectoryError)


def fresh_run_dir(output_dir: str) -> bool:
    """The run directory holds nothing (Hydra made it for this command; an older Hydra layout: only ``.hydra/`` and
    an empty ``run.log``)."""
    path = Path(output_dir)
    names = {p.name for p in path.iterdir()} if path.is_dir() else set()
    log_file = path / "run.log"
    return names <= {".hydra", "run.log"} and (not log_file.exists() or log_file.stat().st_size == 0)


def nothing_written(output_dir: str) -> bool:
    """The run directory holds only Hydra's files, the log and this process's lock: no checkpoint, no logger
    output (a refusal after training started keeps its directory)."""
    path = Path(output_dir)
    return not path.is_dir() or {p.name for p in path.iterdir()} <= {".hydra", "run.log", ".lock"}


if __name__ == "__main__":
    if (moved := moved_key_error(sys.argv[1:], {**MOVED_KEYS, **MOVED_MODULE_KEYS})) is not None:
        sys.exit(f"cselab: {moved}")
    try:  # backbone=<hub id or folder> -> backbone=auto backbone.name_or_path=<id or folder>
        options = {p.stem for p in (Path(__file__).resolve().parent / "conf" / "backbone").glob("*.yaml")}
        sys.argv[1:] = teacher_overrides(resume_overrides(backbone_path_overrides(sys.argv[1:], options)))
    except ValueError as err:
        sys.exit(f"cselab: {err}")
    informs = any(a.startswith("-") and a not in ("-m", "--multirun") for a in sys.argv[1:])  # --help, --cfg ...
    if not informs and (unwritable := unwritable_folder(output_folder(sys.argv[1:]))) is not None:  # before Hydra
        sys.exit(f"cselab: {unwritable_message(unwritable)}")
    if sys.argv[1:] and not any(a.startswith("-") for a in sys.argv[1:]):  # one run: a typo'd key named at once
        from cselab.run.config_keys import missing_key_error

        if (missing := missing_key_error(sys.argv[1:], Path(__file__).resolve().parent / "conf")) is not None:
            sys.exit(f"cselab: {missing}")
    from cselab.model.loading import register_family_resolver  # noqa: F401  (${cselab_backbone_family:...}; transformers)

    main()
    sys.exit(exit_status())  # a -m sweep with a failed job: 1 (a failing single run has exited 1 already)
