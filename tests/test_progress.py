"""Progress: the training bar's total bounded by max_steps, and log lines when the output is not a terminal."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from cselab.io.progress import EvalProgress, ProgressLog, StepRichProgressBar


def _trainer(global_step=0, batches=187, max_steps=20, restarting=False, ready=0, accumulate=1, total=None):
    loop = SimpleNamespace(restarting=restarting, batch_progress=SimpleNamespace(current=SimpleNamespace(ready=ready)))
    return SimpleNamespace(num_training_batches=batches, max_steps=max_steps, global_step=global_step,
                           accumulate_grad_batches=accumulate, fit_loop=SimpleNamespace(epoch_loop=loop),
                           estimated_stepping_batches=total if total is not None else max_steps,
                           is_global_zero=True, callback_metrics={}, progress_bar_callback=None, fast_dev_run=False,
                           _logger_connector=SimpleNamespace(should_update_logs=True))


def test_training_bar_total_is_bounded_by_max_steps(monkeypatch):
    bar = StepRichProgressBar()
    for trainer, expected in [
        (_trainer(), 20),                                    # a 20-step run on a 187-batch epoch: 20, not 187
        (_trainer(global_step=180, max_steps=200), 20),      # the second epoch of a 200-step run
        (_trainer(max_steps=-1), 187),                       # epochs only: the epoch's batches
        (_trainer(max_steps=500), 187),                      # max_steps beyond this epoch
        (_trainer(global_step=8, restarting=True, ready=8), 20),  # resumed mid-epoch at batch 8 of 20
        (_trainer(max_steps=10, accumulate=2), 20),          # 2 batches per optimizer step
    ]:
        monkeypatch.setattr(type(bar), "trainer", property(lambda self, t=trainer: t), raising=False)
        assert bar.total_train_batches == expected


def test_progress_log_lines_for_training(caplog, monkeypatch):
    import cselab.io.progress as progress

    clock = iter([0.0, 30.0, 61.0, 130.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    cb = ProgressLog(every_s=60)
    trainer = _trainer(global_step=0, total=200)
    with caplog.at_level(logging.INFO, logger="cselab.io.progress"):
        cb.on_train_start(trainer, None)
        for step in (10, 20, 40):  # at 30 s (too soon), 61 s and 130 s
            trainer.global_step = step
            trainer.callback_metrics = {"train/loss": 0.5}
            cb.on_train_batch_end(trainer, None, None, None, step - 1)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["training: step 0 of 200",
                     "training: step 20/200 (10%), 3.05 s/step, 9:09 left, loss 0.5000",
                     "training: step 40/200 (20%), 3.25 s/step, 8:40 left, loss 0.5000"]


def test_progress_log_s_per_step_leaves_validation_out(caplog, monkeypatch):
    """Issue #40: 20 steps in 40 s of training plus a 20 s validation is 2.00 s/step (not 3.00); the time left
    keeps the wall-clock rate (validations recur): 180 steps x 3 s = 9:00."""
    import cselab.io.progress as progress

    clock = iter([0.0, 20.0, 40.0, 61.0])  # train start, validation start, validation end, step 20
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    cb = ProgressLog(every_s=60)
    trainer = _trainer(global_step=0, total=200)
    with caplog.at_level(logging.INFO, logger="cselab.io.progress"):
        cb.on_train_start(trainer, None)
        cb.on_validation_start(trainer, None)
        cb.on_validation_end(trainer, None)
        trainer.global_step = 20
        cb.on_train_batch_end(trainer, None, None, None, 19)
    assert [r.getMessage() for r in caplog.records][-1] == "training: step 20/200 (10%), 2.05 s/step, 9:09 left"


def test_progress_shows_the_loss_read_on_logging_steps_only(monkeypatch):
    """Between logging steps the loss shown is the last one read: the display never reads the device's value."""
    import cselab.io.progress as progress

    clock = iter([0.0, 61.0, 130.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    cb = ProgressLog(every_s=60)
    trainer = _trainer(global_step=0, total=200)
    cb.on_train_start(trainer, None)
    trainer.global_step, trainer.callback_metrics = 10, {"train/loss": 0.5}
    cb.on_train_batch_end(trainer, None, None, None, 9)
    trainer._logger_connector.should_update_logs = False

    class Unreadable:
        def __float__(self):
            raise AssertionError("read on a step that is not a logging step")

    trainer.global_step, trainer.callback_metrics = 11, {"train/loss": Unreadable()}
    cb.on_train_batch_end(trainer, None, None, None, 10)
    assert cb.shown_loss == 0.5


def test_evaluation_progress_lines_when_not_a_terminal(caplog, monkeypatch):
    import cselab.io.progress as progress

    clock = iter([0.0, 0.0, 70.0, 100.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    report = EvalProgress(None, "test", every_s=60)
    with caplog.at_level(logging.INFO, logger="cselab.io.progress"):
        report("sts12", 0, 6000)
        report("sts12", 2000, 6000)  # 70 s in: a line
        report("sts12", 6000, 6000)  # done
        report.close()
    assert [r.getMessage() for r in caplog.records] == [
        "evaluating sts12 test: 6,000 sentences to encode",
        "evaluating sts12 test: 2,000/6,000 sentences (33%), 2:20 left",
        "evaluated sts12 test: 6,000 sentences in 100.0 s",
    ]


def test_evaluation_bar_shows_speed_and_time_left_after_one_slow_chunk():
    """An STS task whose first chunk took longer than Rich's 30 s speed window: Lightning's columns show no time
    left and 0.00it/s; ours show the average since the task began (500 sentences in 40 s: 12.5/s, 40 s left)."""
    from rich.progress import Progress

    from cselab.io.progress import SpeedColumn, TimeLeftColumn, average_speed, time_left

    clock = [0.0]
    progress = Progress(get_time=lambda: clock[0])
    task_id = progress.add_task("sts12 test", total=1000, unit="sent")
    clock[0] = 40.0
    progress.update(task_id, completed=500)
    task = progress.tasks[0]
    assert task.speed is None and task.time_remaining is None  # what Lightning's columns read
    assert average_speed(task) == pytest.approx(12.5) and time_left(task) == pytest.approx(40.0)
    assert TimeLeftColumn(style="").render(task).plain == "0:00:40 • 0:00:40"
    assert SpeedColumn(style="").render(task).plain == "12.50sent/s"
    progress.add_task("stsb test", total=10)
    fresh = progress.tasks[1]
    assert SpeedColumn(style="").render(fresh).plain == "-it/s" and time_left(fresh) is None


def test_rich_bar_uses_the_time_left_columns():
    from cselab.io.progress import SpeedColumn, TimeLeftColumn

    kinds = {type(c) for c in StepRichProgressBar().configure_columns(None)}
    assert {TimeLeftColumn, SpeedColumn} <= kinds


def test_evaluation_without_a_trainer_draws_a_tqdm_bar_in_a_terminal(monkeypatch, capsys):
    import cselab.io.progress as progress

    monkeypatch.setattr(progress, "interactive", lambda: True)
    report = EvalProgress(None, "test")
    report("stsb", 0, 100)
    report("stsb", 50, 100)
    bar = report._task[1]
    assert bar is not None and bar.n == 50 and bar.total == 100 and bar.unit == "sent"
    report.close()


def test_evaluation_between_the_rich_bars_loops_draws_a_tqdm_bar(monkeypatch):
    """A Rich bar with no live display (``progress`` is None, e.g. after fit): the task gets a tqdm bar, and its
    updates go to that bar, not to the absent Rich display."""
    import cselab.io.progress as progress

    monkeypatch.setattr(progress, "interactive", lambda: True)
    bar = StepRichProgressBar()
    assert bar.progress is None and bar.is_enabled
    report = EvalProgress(SimpleNamespace(progress_bar_callback=bar), "test")
    report("stsb", 0, 100)
    report("stsb", 50, 100)
    handle = report._task[1]
    assert handle.n == 50 and handle.total == 100
    report.close()
    assert report._task is None
