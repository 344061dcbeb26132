import torch
from cselab.methods.base import ContrastiveMethod
from tests.test_ddp import *  # noqa
from tests.test_ddp import test_global_negatives_match_one_process as _t

def test_mutant(nodrop_bert_dir, tmp_path, monkeypatch):
    def bad(self, z):
        g = self.all_gather(z, sync_grads=False) if self._trainer is not None and self.trainer.world_size > 1 else z
        if g.dim() == 4:
            g = g.clone(); g[self.global_rank] = z; g = g.reshape(-1, *z.shape[1:])
        return g
    monkeypatch.setattr(ContrastiveMethod, "gather_embeddings", bad)
    _t("infonce_eh", (0, 4, 8), nodrop_bert_dir, tmp_path)
