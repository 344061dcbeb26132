"""RankCSE (Liu et al. 2023): the loss against the official code's numbers, the teacher targets, the teacher provider
(frozen, not in the student's state), the method's step (uncached, cached, DDP) and a short run on MiniLM.

``tests/data/rankcse_official.json`` was written by ``scripts/rankcse_reference.py``, which EXECUTES the official
``rankcse/models.py`` (perceptiveshawty/RankCSE: ``cl_forward``, ``ListNet``, ``ListMLE``, ``Divergence``) on fixed
inputs, in float64; the teacher-target lines (trainers.py:525-528) are copied there (transcribed).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from cselab.methods.rankcse.loss import RankCSELoss, consistency_loss
from cselab.methods.rankcse.ranking import listmle_loss, listnet_loss
from cselab.methods.rankcse.teachers import TeacherScores, TeacherSpec, teacher_specs
from cselab.model.spec import ConfigError
from tests import forked
from tests.conftest import loss_and_grads

ROOT = Path(__file__).resolve().parents[1]
RECORD = json.loads((ROOT / "tests" / "data" / "rankcse_official.json").read_text())
SENTENCES = ["a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park",
             "it is raining today", "a woman is slicing an onion", "birds fly in the sky",
             "a man plays the guitar", "the dog sat on the mat"]


def _t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


# ------------------------------------------------------------------------------ against the official code's numbers
def test_teacher_targets_equal_the_official_weighted_cosines() -> None:
    inputs = RECORD["inputs"]
    scores = TeacherScores([TeacherSpec("a", 0.33), TeacherSpec("b", 0.67)], temperature=0.05)
    targets = scores.logits([_t(inputs["teacher1"]), _t(inputs["teacher2"])])
    torch.testing.assert_close(targets, _t(RECORD["teacher_targets"]), rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("ranking", ["listnet", "listmle"])
def test_loss_and_gradients_equal_the_official_cl_forward(ranking) -> None:
    """cselab's RankCSELoss on the official inputs = the official cl_forward run on them (loss, the three terms,
    dL/d[CLS] states and dL/d MLP weight and bias)."""
    official, inputs = RECORD[ranking], RECORD["inputs"]
    h = _t(inputs["cls_states"]).requires_grad_()
    weight, bias = _t(inputs["mlp_weight"]).requires_grad_(), _t(inputs["mlp_bias"]).requires_grad_()
    z = torch.tanh(h @ weight.T + bias)  # MLPLayer: Linear + Tanh (models.py:19-33)
    teacher = _t(RECORD["teacher_targets"])
    loss_fn = RankCSELoss(temperature=0.05, ranking=ranking, ranking_weight=official["gamma"])
    terms = loss_fn.terms(z, teacher, torch.tensor(official["permutation"]))
    terms = {k: v if k == "loss" else v.detach() for k, v in terms.items()}
    assert float(terms["infonce"]) == pytest.approx(official["infonce"], rel=1e-12)
    assert float(terms["consistency"]) == pytest.approx(official["consistency"], rel=1e-10)
    assert official["gamma"] * float(terms["ranking"]) == pytest.approx(official["distillation"], rel=1e-12)
    assert terms["loss"].item() == pytest.approx(official["loss"], rel=1e-12)
    terms["loss"].backward()
    torch.testing.assert_close(h.grad, _t(official["grad_cls_states"]), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(weight.grad, _t(official["grad_mlp_weight"]), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(bias.grad, _t(official["grad_mlp_bias"]), rtol=1e-9, atol=1e-12)


def test_the_official_consistency_term_is_minus_the_row_entropy() -> None:
    """Divergence.forward clamps log m at +1e-7 (models.py:60): m is constant, the term is -H(p)/2 - H(q)/2 - 1e-7
    (averaged over rows), and its gradient is the entropy's; the paper's JS (``js``) is >= 0 and differs."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(5, 5, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 5, generator=g, dtype=torch.float64, requires_grad=True)
    official = consistency_loss(a, b, "official")
    p, q = a.softmax(-1), b.softmax(-1)
    neg_entropy = 0.5 * ((p * p.log()).sum() + (q * q.log()).sum()) / 5 - 1e-7
    assert official.item() == pytest.approx(neg_entropy.item(), rel=1e-9)
    ga = torch.autograd.grad(official, a, retain_graph=True)[0]
    torch.testing.assert_close(ga, torch.autograd.grad(neg_entropy, a)[0], rtol=1e-7, atol=1e-12)
    js = consistency_loss(a, b, "js")
    m = 0.5 * (p + q)
    expected = 0.5 * ((p * (p / m).log()).sum() + (q * (q / m).log()).sum()) / 5
    assert float(js) == pytest.approx(float(expected), rel=1e-6) and float(js) > 0
    assert float(consistency_loss(a, a, "js")) == pytest.approx(0.0, abs=1e-12)


def test_listnet_softmax_is_over_rows_and_ignores_the_diagonal() -> None:
    g = torch.Generator().manual_seed(1)
    teacher, student = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    loss = listnet_loss(teacher, student)
    manual = 0.0
    for i in range(4):
        off = [j for j in range(4) if j != i]
        q, p = teacher[i, off].softmax(0), student[i, off].log_softmax(0)
        manual -= float((q * p).sum()) / 4
    assert float(loss) == pytest.approx(manual, rel=1e-6)
    changed = teacher.clone()
    changed.fill_diagonal_(100.0)
    assert float(listnet_loss(changed, student)) == pytest.approx(float(loss), rel=1e-7)
    assert float(listnet_loss(teacher.T, student)) != pytest.approx(float(loss), rel=1e-3)  # rows, not columns
    assert torch.equal(teacher, torch.randn(4, 4, generator=torch.Generator().manual_seed(1)))  # not modified


def test_listmle_is_the_plackett_luce_likelihood_of_the_teacher_order() -> None:
    teacher = torch.tensor([[3.0, 1.0, 2.0]])
    student = torch.tensor([[0.5, -0.2, 0.1]])
    s = student[0, [0, 2, 1]]  # the teacher's order: 0, 2, 1
    manual = sum(math.log(sum(math.exp(float(v)) for v in s[k:])) - float(s[k]) for k in range(3))
    for perm in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):  # no ties: the shuffle does not matter
        assert float(listmle_loss(teacher, student, torch.tensor(perm))) == pytest.approx(manual, abs=1e-5)
    tied = torch.tensor([[1.0, 1.0, 0.0]])
    values = {round(float(listmle_loss(tied, student, torch.tensor(p))), 6) for p in ([0, 1, 2], [1, 0, 2])}
    assert len(values) == 2  # ties broken by the shuffle (models.py:94-97)
    with pytest.raises(ValueError, match="permutation"):
        listmle_loss(teacher, student, torch.tensor([0, 1]))


def test_loss_refuses_bad_arguments_by_name() -> None:
    with pytest.raises(ValueError, match="loss.ranking"):
        RankCSELoss(ranking="lambdarank")
    with pytest.raises(ValueError, match="loss.consistency"):
        RankCSELoss(consistency="kl")
    with pytest.raises(ValueError, match="loss.ranking_weight"):
        RankCSELoss(ranking_weight=-1)
    with pytest.raises(ValueError, match=r"expected \(3, 3\)"):
        RankCSELoss()(torch.randn(3, 2, 4), torch.randn(2, 2))


@pytest.mark.parametrize("ranking", [listnet_loss, listmle_loss])
def test_the_ranking_losses_refuse_logits_that_are_not_one_n_by_n_pair(ranking) -> None:
    """Called directly (not through RankCSELoss), logits of two shapes or of one dimension are named, not computed on
    (``fill_diagonal_`` and ``gather`` would otherwise run on them)."""
    with pytest.raises(ValueError, match=r"same shape \(N, N\), got \(3, 3\) and \(4, 4\)"):
        ranking(torch.randn(3, 3), torch.randn(4, 4))
    with pytest.raises(ValueError, match=r"got \(3,\) and \(3,\)"):
        ranking(torch.randn(3), torch.randn(3))


def test_consistency_loss_refuses_an_unknown_kind() -> None:
    """A kind other than official / js (``none`` included: RankCSELoss leaves the term out) is named, not computed
    as the Jensen-Shannon divergence."""
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    for kind in ("jsd", "none"):
        with pytest.raises(ValueError, match=f"kind='{kind}'"):
            consistency_loss(a, b, kind)


# ------------------------------------------------------------------------------ the teachers' config
@pytest.mark.parametrize(("teachers", "temperature", "match"), [
    (None, 0.05, r"method.teachers=None"),
    ([{"weight": 1.0}], 0.05, r"method.teachers\[0\]"),
    ([{"path": "a", "weight": 0.5}, {"path": "b", "weight": 0.4}], 0.05, r"sum to 0.9"),
    ([{"path": "a", "weight": 0.5}, {"path": "b"}], 0.05, r"method.teachers\[1\].weight"),
    ([{"path": "a", "alpha": 1.0}], 0.05, r"unknown keys \['alpha'\]"),
    ([{"path": "a"}], 0.0, r"method.teacher_temperature"),
])
def test_teacher_config_errors_name_the_key(teachers, temperature, match) -> None:
    with pytest.raises(ConfigError, match=match):
        teacher_specs(teachers, temperature)
    assert teacher_specs([{"path": "a"}], 0.05) == (TeacherSpec("a", 1.0),)


# ------------------------------------------------------------------------------ the method on tiny backbones
@pytest.fixture(scope="module")
def teacher_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """A tiny SimCSE model saved as a cselab folder (``cselab_model.json``): a teacher on the student's tokenizer."""
    from cselab.methods.simcse.method import SimCSE

    torch.manual_seed(7)
    teacher = SimCSE({"name_or_path": str(tiny_bert_dir), "family": "bert"},
                     model={"pooler": "cls", "head": "mlp", "mlp_only_train": True})
    path = tmp_path_factory.mktemp("teacher") / "export"
    teacher.model.save(path)
    return path


def _rankcse(backbone_dir: Path, teachers: list[dict], ranking: str = "listnet", **kwargs):
    from cselab.methods.rankcse.method import RankCSE

    torch.manual_seed(0)
    loss = {"_target_": "cselab.methods.rankcse.loss.RankCSELoss", "ranking": ranking,
            "ranking_weight": 0.1 if ranking == "listnet" else 1.0}
    return RankCSE({"name_or_path": str(backbone_dir), "family": "bert"},
                   model={"pooler": "cls", "head": "mlp", "mlp_only_train": True}, loss=loss, options={"teachers": teachers},
                   **kwargs)


@pytest.mark.parametrize("ranking", ["listnet", "listmle"])
def test_step_uses_the_frozen_teachers_targets(ranking, tiny_bert_dir, teacher_dir) -> None:
    from cselab.methods.loading import load

    method = _rankcse(tiny_bert_dir, [{"path": str(teacher_dir), "weight": 1.0}], ranking).train()
    batch = method.train_collate()([{"text": s} for s in SENTENCES])
    loss, grads = loss_and_grads(method, batch)
    teacher = method.teacher_scores.teachers[0]
    # frozen, eval mode, not a submodule: not in the student's state, optimizer or export
    assert not teacher.training and all(not p.requires_grad for p in teacher.parameters())
    assert all(not k.startswith("teacher") for k in method.state_dict())
    student_params = {id(p) for p in method.parameters()}
    assert not any(id(p) in student_params for p in teacher.parameters())
    # the same loss by hand: first view -> the teacher as evaluated -> cos / tau2 -> RankCSELoss
    assert method.teacher_scores.feeds == ["ids"]  # the teacher shares the student's vocabulary
    reference = load(teacher_dir).encode(SENTENCES)
    targets = torch.nn.functional.cosine_similarity(reference[:, None], reference[None], dim=-1) / 0.05
    torch.testing.assert_close(method.teacher_targets(batch), targets, rtol=1e-5, atol=1e-5)
    targets = method.teacher_targets(batch)  # the same up to rounding; listMLE's sort must see the same values
    torch.manual_seed(1)
    perm = torch.randperm(len(SENTENCES)) if ranking == "listmle" else None  # drawn before the forward
    z = method.embed(batch)
    expected = method.loss_fn(z, targets, perm)
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    assert grads and max(float(g.abs().max()) for g in grads.values()) > 0


#: a sentence with a character outside the tiny vocabulary: the student's ids hold [UNK] (1 of 3 in wiki1m's first
#: 2,000 sentences, issue #40)
UNK_SENTENCES = ["a man is playing a \u2603 guitar", *SENTENCES[1:]]


@pytest.fixture(scope="module")
def avg_teacher_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """A tiny avg-pooled teacher on the student's tokenizer (the official ``avg`` teacher, teachers.py:42-48; a tiny
    random BERT's [CLS] barely depends on the tokens, its mean does)."""
    from cselab.methods.simcse.method import SimCSE

    torch.manual_seed(7)
    teacher = SimCSE({"name_or_path": str(tiny_bert_dir), "family": "bert"}, model={"pooler": "avg"})
    path = tmp_path_factory.mktemp("avg_teacher") / "export"
    teacher.model.save(path)
    return path


@pytest.mark.parametrize("pooler", ["cls_before_pooler", "avg"])
def test_teacher_reads_the_students_ids_as_the_official_trainer_does(pooler, tiny_bert_dir, teacher_dir,
                                                                    avg_teacher_dir) -> None:
    """Official trainers.py:476-499 (``teacher_inputs`` = the student's input_ids / attention_mask / token_type_ids,
    flattened) and teachers.py:36-48 (``self.model(**inputs)``, then ``cls_before_pooler``: ``last_hidden_state[:,
    0]``, or ``avg``: the masked mean), then trainers.py:507-508 (cos / tau2), transcribed on the teacher's own
    weights.  A sentence with [UNK] is fed as the student sees it: decoding with ``skip_special_tokens=True`` (cselab
    before #40) dropped the [UNK], so the teacher saw "a man is playing a guitar" (row 0 differs by ~0.2 / tau2)."""
    from cselab.methods.loading import load

    path = teacher_dir if pooler == "cls_before_pooler" else avg_teacher_dir
    method = _rankcse(tiny_bert_dir, [{"path": str(path)}]).train()
    batch = method.train_collate()([{"text": s} for s in UNK_SENTENCES])
    ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
    assert method.tokenizer.unk_token_id in ids[0].tolist()
    hf = load(path).backbone.model.eval()  # the teacher's AutoModel (official: Teacher(...).model)
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), return_dict=True)
    h = out.last_hidden_state
    if pooler == "cls_before_pooler":
        z = h[:, 0]
    else:
        m = mask.unsqueeze(-1).expand(h.size()).float()
        z = torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-7)
    official = torch.nn.functional.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=-1) / 0.05
    torch.testing.assert_close(method.teacher_targets(batch), official, rtol=1e-5, atol=1e-5)
    assert method.teacher_scores.feeds == ["ids"]


def test_a_teacher_on_another_vocabulary_reads_the_decoded_view_with_its_unk(tiny_bert_dir, tiny_roberta_dir,
                                                                             teacher_dir, tmp_path) -> None:
    """The documented extension: a teacher whose vocabulary differs (or with a template) reads the first view decoded,
    its framing special tokens dropped and [UNK] kept (not shortened)."""
    from cselab.methods.rankcse.teachers import decode_view, teacher_feed
    from cselab.methods.simcse.method import SimCSE

    method = _rankcse(tiny_bert_dir, [{"path": str(teacher_dir)}]).train()
    batch = method.train_collate()([{"text": s} for s in UNK_SENTENCES])
    decoded = decode_view(method.tokenizer, batch["input_ids"][:, 0], batch["attention_mask"][:, 0])
    assert decoded[0] == "a man is playing a [UNK] guitar"
    assert decoded[1:] == SENTENCES[1:]
    other = SimCSE({"name_or_path": str(tiny_roberta_dir), "family": "roberta"}, model={"pooler": "avg"})
    assert teacher_feed(other, method.tokenizer) == ("text", "its vocabulary differs from the student's")
    path = tmp_path / "roberta_teacher"
    other.model.save(path)
    mixed = _rankcse(tiny_bert_dir, [{"path": str(teacher_dir), "weight": 0.5}, {"path": str(path), "weight": 0.5}])
    mixed.teacher_targets(batch)
    assert mixed.teacher_scores.feeds == ["ids", "text"]
    expected = mixed.teacher_scores.teachers[1].encode(decoded)
    got = mixed.teacher_scores.embeddings(batch["input_ids"][:, 0], batch["attention_mask"][:, 0], method.tokenizer)
    torch.testing.assert_close(got[1], expected, rtol=1e-5, atol=1e-5)


def test_missing_or_unloadable_teacher_is_named(tiny_bert_dir, tmp_path) -> None:
    method = _rankcse(tiny_bert_dir, [{"path": str(tmp_path / "nowhere")}])
    with pytest.raises(ConfigError, match=r"method.teachers\[0\].path=.*does not exist"):
        method.teacher_scores.load()
    (tmp_path / "empty").mkdir()
    method = _rankcse(tiny_bert_dir, [{"path": str(tmp_path / "empty")}])
    with pytest.raises(ConfigError, match=r"method.teachers\[0\].path=.*not a teacher cselab can load"):
        method.teacher_scores.load()


def test_method_refuses_what_rankcse_cannot_be(tiny_bert_dir, teacher_dir) -> None:
    from cselab.methods.rankcse.method import RankCSE

    backbone = {"name_or_path": str(tiny_bert_dir), "family": "bert"}
    teachers = [{"path": str(teacher_dir)}]
    with pytest.raises(ConfigError, match="loss=rankcse_listnet"):
        RankCSE(backbone, model={"pooler": "cls", "head": "mlp"}, loss={"name": "infonce"}, options={"teachers": teachers})
    with pytest.raises(ConfigError, match="unsupervised only"):
        RankCSE(backbone, model={"pooler": "cls", "head": "mlp"}, setting="sup", options={"teachers": teachers})


def test_student_saves_loads_and_exports_without_its_teachers(tiny_bert_dir, teacher_dir, tmp_path) -> None:
    """A student checkpoint holds the student only and loads (cselab.load) without touching the teachers."""
    import lightning as L

    from cselab.methods.loading import load

    method = _rankcse(tiny_bert_dir, [{"path": str(teacher_dir)}])
    trainer = L.Trainer(max_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.strategy.connect(method)
    ckpt = tmp_path / "student.ckpt"
    trainer.save_checkpoint(ckpt)
    saved = torch.load(ckpt, weights_only=False)
    assert not any("teacher" in k for k in saved["state_dict"])
    assert saved["hyper_parameters"]["options"]["teachers"] == [{"path": str(teacher_dir)}]
    import shutil

    moved = tmp_path / "moved_teacher"
    shutil.move(str(teacher_dir), moved)  # the teacher is gone: the student still loads and encodes
    try:
        student = load(ckpt)
        emb = student.encode(SENTENCES[:2])
        torch.testing.assert_close(emb, method.eval().encode(SENTENCES[:2]))
        assert not student.teacher_scores.loaded
        from cselab.export import export

        info = export(ckpt, tmp_path / "exported")  # the student as it is tested: [CLS] without the MLP
        assert info["max_abs_diff"] < 1e-5
        exported = load(tmp_path / "exported")
        torch.testing.assert_close(exported.encode(SENTENCES[:2]), emb, rtol=1e-5, atol=1e-5)
        size = sum(p.numel() for p in exported.parameters())
        assert size <= sum(p.numel() for p in student.model.parameters())  # the student's weights, no teacher's
    finally:
        shutil.move(str(moved), teacher_dir)


def test_global_negatives_and_teacher_targets_match_one_process(tmp_path, tiny_bert_dir, teacher_dir) -> None:
    """DDP (2 CPU ranks, 4 sentences each): the teachers' embeddings gathered like the student's, so the loss and
    gradients equal one process on the 8 sentences."""
    import shutil

    from test_ddp import _max_grad_diff, _reference, _run_ddp

    nodrop = tmp_path / "nodrop"
    shutil.copytree(tiny_bert_dir, nodrop)
    cfg = json.loads((nodrop / "config.json").read_text())
    cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (nodrop / "config.json").write_text(json.dumps(cfg))
    ref = _rankcse(nodrop, [{"path": str(teacher_dir)}], optim={"lr": 1e-5})
    ddp_method = copy.deepcopy(ref)
    rows = [{"text": s} for s in SENTENCES]
    ref_loss, ref_grads = _reference(ref, rows)
    for res in _run_ddp(ddp_method, rows, tmp_path / "ddp", (0, 4, 8)):
        assert res["world_size"] == 2
        assert abs(float(res["loss"]) - float(ref_loss)) < 1e-5
        scale = max(float(g.abs().max()) for g in ref_grads.values())
        assert _max_grad_diff(res["grads"], ref_grads) < 5e-5 * max(1.0, scale)


# ------------------------------------------------------------------------------ report rows
def test_published_rows_and_the_listmle_variant() -> None:
    from cselab.report.published import load_published, lookup, variant_of

    published = load_published()
    bert = lookup(published, "rankcse", "bert_base", "unsup")
    roberta = lookup(published, "rankcse", "roberta_base", "unsup")
    assert (bert.scores["avg"], roberta.scores["avg"]) == (80.05, 79.73)
    assert bert.source == roberta.source == "CoT-BERT Table 2"
    config = {"method": {"name": "rankcse"}, "setting": {"name": "unsup"}, "loss": {"name": "rankcse_listnet",
                                                                                   "ranking": "listnet"}}
    assert variant_of(config) is None
    config["loss"] = {"name": "rankcse_listmle", "ranking": "listmle"}
    assert variant_of(config) == "listMLE"


# ------------------------------------------------------------------------------ runs (cselab.run.flow.run, run.py)
@pytest.mark.integration
def test_minilm_rankcse_with_a_simcse_teacher_trains_tests_and_compares(tmp_path, short_stsb_data_dir,
                                                                        minilm_simcse_run) -> None:
    """The embedded MiniLM: the shared short SimCSE run (``MINILM_SHORT_RUN``) is the teacher of a RankCSE run of the
    same seed and settings, which trains, tests on STS-B, and ``python -m cselab compare`` pairs the two."""
    import os
    import sys

    from tests.conftest import MINILM_SHORT_RUN, run_py

    res = run_py(tmp_path / "rankcse", "method=rankcse", f"method.teachers=[{{path:'{minilm_simcse_run}',weight:1.0}}]",
                 *MINILM_SHORT_RUN, data_dir=short_stsb_data_dir)
    assert res["config"]["method"]["name"] == "rankcse" and res["global_step"] == 4
    assert set(res["test"]) == {"stsb"} and -100 <= res["test"]["stsb"] <= 100
    assert [p["step"] for p in res["val_curve"]] == [4]
    env = {**os.environ, "CSELAB_DATA_DIR": str(short_stsb_data_dir), "HF_HUB_OFFLINE": "1"}
    proc = forked.run([sys.executable, "-m", "cselab", "compare", str(minilm_simcse_run), str(tmp_path / "rankcse"),
                           "--n-resamples", "200"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "stsb" in proc.stdout.lower() or "sts-b" in proc.stdout.lower()
