"""Run the OFFICIAL RankCSE code on fixed inputs and record what it computes (tests/data/rankcse_official.json).

    python scripts/rankcse_reference.py <RankCSE checkout> [out.json]

The checkout is perceptiveshawty/RankCSE (any copy of its ``rankcse/models.py``).  Its ``models.py`` is executed
as written (lines 1-5 and 17-311: the imports that exist in today's transformers, ``MLPLayer``, ``Similarity``,
``Divergence``, ``ListNet``, ``ListMLE``, ``Pooler``, ``cl_init``'s objects and ``cl_forward``) with a stand-in
encoder whose ``last_hidden_state`` is a fixed leaf tensor, so the official loss and its gradients w.r.t. the [CLS]
states and the MLP come out of the official code itself.  The teachers' targets are the official
``trainers.py:525-528`` lines (copied below, the only transcribed part) on fixed teacher embeddings.

Recorded, for listNet and listMLE: the inputs, the teacher targets, the loss, the three terms (InfoNCE, consistency,
distillation: recomputed by the official classes on the same tensors), the gradients w.r.t. the [CLS] states
and the MLP's weight, and listMLE's permutation (the official ``torch.randperm`` after ``torch.manual_seed(123)``).
``tests/test_rankcse.py`` checks cselab against this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

N, D, DT1, DT2, LEN = 6, 8, 5, 4, 3
ALPHA, TAU2, TEMP, SEED_PERM = 0.33, 0.05, 0.05, 123


def official_namespace(repo: Path) -> dict:
    """``rankcse/models.py`` executed: lines 1-5 (torch imports), 17 (modeling outputs), 19-311 (classes and
    ``cl_forward``); lines 6-16 import transformers' old ``file_utils`` docstring helpers, unused here."""
    lines = (repo / "rankcse" / "models.py").read_text().splitlines(keepends=True)
    source = "".join(lines[0:5] + [lines[16]] + ["\n"] * 2 + lines[18:311])
    namespace: dict = {}
    exec(compile(source, str(repo / "rankcse" / "models.py"), "exec"), namespace)  # noqa: S102
    return namespace


def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(20230526)
    return {
        "cls_states": torch.randn(N, 2, D, generator=g),         # [CLS] of (sentence i, view v)
        "mlp_weight": torch.randn(D, D, generator=g) * 0.5,
        "mlp_bias": torch.randn(D, generator=g) * 0.1,
        "teacher1": torch.randn(N, DT1, generator=g),
        "teacher2": torch.randn(N, DT2, generator=g),
    }


def official_targets(t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
    """trainers.py:500-528 (two teachers; z1T = z2T: the same sentences, no dropout in eval mode)."""
    first_teacher_z1, first_teacher_z2 = t1, t1
    second_teacher_z1, second_teacher_z2 = t2, t2
    cos = nn.CosineSimilarity(dim=-1)
    first_teacher_top1_sim = cos(first_teacher_z1.unsqueeze(1), first_teacher_z2.unsqueeze(0)) / TAU2
    second_teacher_top1_sim = cos(second_teacher_z1.unsqueeze(1), second_teacher_z2.unsqueeze(0)) / TAU2
    return (ALPHA * first_teacher_top1_sim) + ((1.0 - ALPHA) * second_teacher_top1_sim)


def run(ns: dict, data: dict, loss_name: str, gamma: float) -> dict:
    args = SimpleNamespace(pooler_type="cls", temp=TEMP, hard_negative_weight=0.0, do_mlm=False, mlp_only_train=True,
                           distillation_loss=loss_name, tau2=TAU2, gamma_=gamma, beta_=1.0, mlm_weight=0.1)
    config = SimpleNamespace(hidden_size=D, use_return_dict=True)
    cls = SimpleNamespace(model_args=args, config=config, device=torch.device("cpu"), training=True,
                          init_weights=lambda: None)
    ns["cl_init"](cls, config)
    with torch.no_grad():
        cls.mlp.dense.weight.copy_(data["mlp_weight"])
        cls.mlp.dense.bias.copy_(data["mlp_bias"])
    h = data["cls_states"].clone().requires_grad_()

    def encoder(input_ids, **_):
        last = torch.zeros(N * 2, LEN, D)
        last = last.index_put((torch.arange(N * 2), torch.zeros(N * 2, dtype=torch.long)), h.reshape(N * 2, D))
        return SimpleNamespace(last_hidden_state=last, pooler_output=None, hidden_states=None, attentions=None)

    teacher = official_targets(data["teacher1"], data["teacher2"])
    torch.manual_seed(SEED_PERM)
    out = ns["cl_forward"](cls, encoder, input_ids=torch.zeros(N, 2, LEN, dtype=torch.long),
                           attention_mask=torch.ones(N, 2, LEN, dtype=torch.long), teacher_top1_sim_pred=teacher.clone())
    out.loss.backward()
    torch.manual_seed(SEED_PERM)
    permutation = torch.randperm(N)

    with torch.no_grad():  # the three terms, by the official objects on the same tensors (models.py:264-291)
        z = cls.mlp(h)
        z1, z2 = z[:, 0], z[:, 1]
        cos_sim = cls.sim(z1.unsqueeze(1), z2.unsqueeze(0))
        infonce = nn.CrossEntropyLoss()(cos_sim, torch.arange(N))
        torch.manual_seed(SEED_PERM)
        kd = cls.distillation_loss_fct(teacher.clone(), cos_sim.clone())
        z2_z1_cos = cls.sim(z2.unsqueeze(1), z1.unsqueeze(0))
        sd = cls.div(cos_sim.softmax(dim=-1).clamp(min=1e-7), z2_z1_cos.softmax(dim=-1).clamp(min=1e-7))
    return {"loss": out.loss.item(), "infonce": infonce.item(), "distillation": kd.item(), "consistency": sd.item(),
            "gamma": gamma, "permutation": permutation.tolist(), "grad_cls_states": h.grad.tolist(),
            "grad_mlp_weight": cls.mlp.dense.weight.grad.tolist(), "grad_mlp_bias": cls.mlp.dense.bias.grad.tolist()}


def main(repo: str, out: str = "tests/data/rankcse_official.json") -> None:
    torch.set_default_dtype(torch.float64)  # float64: the comparison is about the rules, not rounding
    ns = official_namespace(Path(repo))
    data = inputs()
    record = {
        "source": "perceptiveshawty/RankCSE rankcse/models.py (executed), trainers.py:525-528 (copied)",
        "constants": {"alpha": ALPHA, "tau2": TAU2, "temp": TEMP},
        "inputs": {k: v.tolist() for k, v in data.items()},
        "teacher_targets": official_targets(data["teacher1"], data["teacher2"]).tolist(),
        "listnet": run(ns, data, "listnet", 0.1),
        "listmle": run(ns, data, "listmle", 1.0),
    }
    Path(out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}: listnet loss {record['listnet']['loss']:.6f}, listmle loss {record['listmle']['loss']:.6f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
