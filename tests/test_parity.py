"""Behaviour pinned across refactors: every paper config and every method default, on tiny random BERT /
RoBERTa models, gives the training loss, gradient norm, trainable-parameter count and test embeddings recorded in
``tests/data/parity_before_refactor.json`` (written by ``scripts/parity_snapshot.py`` from main before the
one-embedding-path refactor, commit recorded in the closing note of that issue)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "data" / "parity_before_refactor.json"


def _snapshot_module():
    spec = importlib.util.spec_from_file_location("parity_snapshot", ROOT / "scripts" / "parity_snapshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_method_and_paper_config_matches_the_recorded_losses_and_embeddings(tmp_path):
    snap = _snapshot_module()
    recorded = json.loads(RECORD.read_text())
    assert len(recorded) == 56
    now = snap.snapshot(snap.tiny_backbones(tmp_path))
    assert snap.mismatches(now, recorded) == []


def test_the_comparison_sees_a_changed_loss_embedding_and_parameter_count():
    snap = _snapshot_module()
    recorded = json.loads(RECORD.read_text())
    name = "promptbert/unsup/bert"
    changed = json.loads(json.dumps(recorded))
    changed[name]["loss"] += 1e-3
    assert snap.mismatches(changed, recorded) == [f"{name}: loss {recorded[name]['loss']:.6f} -> "
                                                  f"{changed[name]['loss']:.6f}, grad norm "
                                                  f"{recorded[name]['grad_norm']:.6f} -> "
                                                  f"{recorded[name]['grad_norm']:.6f}"]
    changed = json.loads(json.dumps(recorded))
    changed[name]["embeddings"][0][0] += 1e-4
    assert snap.mismatches(changed, recorded) == [f"{name}: test embeddings differ ((4, 32) vs (4, 32))"]
    changed = json.loads(json.dumps(recorded))
    changed[name]["trainable"] += 1
    del changed["simcse/sup/bert"]
    assert len(snap.mismatches(changed, recorded)) == 2
