"""``python run.py ...`` and ``python -m cselab ...`` for the tests, without paying the imports each time.

A process of ``run.py`` spends about 14 s of an idle 2-core machine importing torch, Lightning (torchmetrics),
transformers, dynamo, scikit-learn and cselab before it reads its command, and the suite starts dozens of them.
:func:`run` and :class:`Popen` take the command a test would give :mod:`subprocess` and run it in a child of a
multiprocessing *forkserver* that imported those packages once (one server per pytest-xdist worker, started at the
first command): a fresh process for each command (its own pid, signals, exit status, working directory and
environment; none of the test process's state, monkeypatches or compiled graphs), whose interpreter only skips the
imports.  The child runs the script as ``python`` would: ``runpy`` as ``__main__``, ``sys.argv`` as given, the
command's ``PYTHONPATH`` in front of ``sys.path``, ``OMP_NUM_THREADS`` as torch's thread count, its stdout and
stderr the files of its file descriptors 1 and 2 (Hydra's, logging's and Lightning's output), ``atexit`` run at the
end, and the exit status of ``sys.exit`` / an uncaught exception / a signal as the interpreter gives it.

The refusals that must come before Lightning loads (``tests/test_checks_before_anything.py``) and the commands that
are not ``run.py`` or ``-m cselab`` keep a process of their own (:mod:`subprocess`).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: imported once by the forkserver (what ``run.py`` imports before and after it reads its command); the
#: environment variables that Hugging Face reads at import are set for it (offline: the suite has no network)
PRELOAD = ["torch", "lightning", "transformers", "hydra", "sklearn", "scipy.stats", "torch._dynamo",
           "cselab.run.flow", "cselab.cli", "tests.forked"]
_SERVER_ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false"}
_context: Any = None


def _server():
    """The forkserver context, started (with :data:`PRELOAD`) at the first call of this process."""
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        saved = {key: os.environ.get(key) for key in _SERVER_ENV}
        os.environ.update(_SERVER_ENV)
        try:
            from multiprocessing import forkserver

            forkserver.ensure_running()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        _context = context
    return _context


def _target(cmd: list[str]) -> tuple[str, str]:
    """("path", script) for ``python <script> ...``, ("module", name) for ``python -m <name> ...``.

    Raises:
        ValueError: any other command (run it with :mod:`subprocess`).
    """
    if len(cmd) >= 2 and cmd[0] == sys.executable:
        if cmd[1] == "-m" and len(cmd) >= 3 and cmd[2] == "cselab":
            return "module", cmd[2]
        if cmd[1].endswith(".py"):
            return "path", cmd[1]
    raise ValueError(f"tests/forked.py runs `python <script>.py ...` and `python -m cselab ...`; got {cmd[:3]}")


def _child(cmd: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """The command, in the forkserver's child: never returns (``os._exit`` with the interpreter's status)."""
    kind, what = _target(cmd)
    code = 1
    try:
        for fd, path in ((1, out), (2, err)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        if env.get("OMP_NUM_THREADS", "").isdigit():
            import torch

            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if kind == "path":
            script = str(Path(cwd, what))
            sys.path[:0] = [*extra, str(Path(script).parent)]
            sys.argv = [script, *cmd[2:]]
            runpy.run_path(script, run_name="__main__")
        else:
            sys.path[:0] = [*extra, cwd]
            sys.argv = [what, *cmd[3:]]
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as end:
        if end.code is None:
            code = 0
        elif isinstance(end.code, int):
            code = end.code
        else:
            print(end.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # the interpreter dies of the SIGINT it was not handling
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            if code < 0:
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            os._exit(code & 0xFF)


class Popen:
    """:class:`subprocess.Popen`'s interface for ``run.py`` / ``-m cselab`` commands run in a forkserver child
    (see the module's docstring): ``pid``, ``returncode`` (``-signal`` when a signal ended it), :meth:`poll`,
    :meth:`wait`, :meth:`send_signal`, :meth:`terminate`, :meth:`kill`, and the child's stdout / stderr text
    (:meth:`output`) once it has ended.  The output goes to files in a temporary folder, always (no ``stdout`` /
    ``stderr`` arguments), removed by :meth:`close` (``with forked.Popen(...) as proc:`` closes it at the end).

    Raises:
        ValueError: a command that is neither (use :mod:`subprocess`).
    """

    def __init__(self, cmd: list[str], cwd: str | os.PathLike | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.args = [str(c) for c in cmd]
        _target(self.args)
        self._files = tempfile.mkdtemp(prefix="forked_")
        self._out, self._err = os.path.join(self._files, "stdout"), os.path.join(self._files, "stderr")
        self._process = _server().Process(target=_child, args=(
            self.args, str(cwd or os.getcwd()), dict(os.environ if env is None else env), self._out, self._err))
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status, after waiting at most ``timeout`` seconds.

        Raises:
            subprocess.TimeoutExpired: it has not ended by then.
        """
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        """Kill the child if it still runs, wait for it, and remove its output files."""
        if self._process.exitcode is None:
            self.kill()
            self._process.join(60)
        shutil.rmtree(self._files, ignore_errors=True)

    def __enter__(self) -> Popen:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def output(self) -> tuple[str, str]:
        """(stdout, stderr) as text (UTF-8, undecodable bytes replaced), what the child wrote so far."""
        return tuple(Path(p).read_text(encoding="utf-8", errors="replace") if os.path.exists(p) else ""
                     for p in (self._out, self._err))


def run(cmd: list[str], cwd: str | os.PathLike | None = None, env: dict[str, str] | None = None,
        timeout: float | None = None, check: bool = False, capture_output: bool = True,
        text: bool = True) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` with ``capture_output=True, text=True`` (the only values taken: the call sites read as
    :mod:`subprocess` ones) for a ``run.py`` / ``-m cselab`` command, in a forkserver child (:class:`Popen`): a
    :class:`subprocess.CompletedProcess` with its status, stdout and stderr.

    Raises:
        subprocess.TimeoutExpired: it ran past ``timeout`` seconds (then killed, its output attached).
        subprocess.CalledProcessError: ``check`` and a non-zero status.
        ValueError: a command that is neither (use :mod:`subprocess`), or ``capture_output`` / ``text`` false.
    """
    if not (capture_output and text):
        raise ValueError("tests/forked.py: run() always captures the output as text (capture_output=True, text=True)")
    with Popen(cmd, cwd=cwd, env=env) as proc:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(60)
            stdout, stderr = proc.output()
            raise subprocess.TimeoutExpired(proc.args, timeout, output=stdout, stderr=stderr) from None
        stdout, stderr = proc.output()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done
