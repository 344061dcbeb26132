"""Run the OFFICIAL SNCSE code (Sense-GVT/SNCSE at faa013e) on the fixed inputs of tests/test_sncse.py and print the
numbers that test pins: the negation rules (generate_soft_negative_samples.py:9-54, spaCy replaced by a stub
parser returning the given tokens / deps / tags / lemmas) and the loss and gradients of cl_forward
(SNCSE/simcse/models.py:89-188, the encoder replaced by a stub returning fixed [MASK] states).

    python scripts/sncse_official_reference.py /path/to/Sense-GVT/SNCSE    # a checkout of the official repository

Needs torch and transformers (models.py imports the BERT / RoBERTa classes); no spaCy, no network.
"""
import json
import sys
import types
from pathlib import Path

import torch

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("SNCSE")
sys.modules["en_core_web_sm"] = types.ModuleType("en_core_web_sm")
gen = {}
exec((ROOT / "generate_soft_negative_samples.py").read_text().split('if __name__ == "__main__":')[0], gen)

class Tok:
    def __init__(self, text, dep, tag, lemma):
        self.t, self.dep_, self.tag_, self.lemma_ = text, dep, tag, lemma

    def __str__(self):
        return self.t

CASES = [
    (["He", "is", "not", "happy", "."], ["nsubj", "ROOT", "neg", "acomp", "punct"], ["PRP", "VBZ", "RB", "JJ", "."], ["he", "be", "not", "happy", "."]),
    (["She", "has", "been", "working", "."], ["nsubj", "aux", "aux", "ROOT", "punct"], ["PRP", "VBZ", "VBN", "VBG", "."], ["she", "have", "be", "work", "."]),
    (["He", "likes", "cats", "."], ["nsubj", "ROOT", "dobj", "punct"], ["PRP", "VBZ", "NNS", "."], ["he", "like", "cat", "."]),
    (["They", "run", "fast", "."], ["nsubj", "ROOT", "advmod", "punct"], ["PRP", "VBP", "RB", "."], ["they", "run", "fast", "."]),
    (["He", "ran", "home", "."], ["nsubj", "ROOT", "advmod", "punct"], ["PRP", "VBD", "RB", "."], ["he", "run", "home", "."]),
    (["It", "Was", "red", "."], ["nsubj", "ROOT", "acomp", "punct"], ["PRP", "VBD", "JJ", "."], ["it", "be", "red", "."]),
    (["YMCA", "in", "South", "Australia"], ["ROOT", "prep", "compound", "pobj"], ["NNP", "IN", "NNP", "NNP"], ["YMCA", "in", "South", "Australia"]),
    (["Go", "if", "you", "can"], ["ROOT", "mark", "nsubj", "aux"], ["VB", "IN", "PRP", "MD"], ["go", "if", "you", "can"]),
    (["He", "does", "n't", "know", "."], ["nsubj", "aux", "neg", "ROOT", "punct"], ["PRP", "VBZ", "RB", "VB", "."], ["he", "do", "not", "know", "."]),
    (["Not", "now", ",", "not", "ever"], ["neg", "advmod", "punct", "neg", "ROOT"], ["RB", "RB", ",", "RB", "RB"], ["not", "now", ",", "not", "ever"]),
    (["The", "book", "was", "written", "."], ["det", "nsubjpass", "auxpass", "ROOT", "punct"], ["DT", "NN", "VBD", "VBN", "."], ["the", "book", "be", "write", "."]),
    (["Hello"], ["intj"], ["UH"], ["hello"]),
]
out = []
for toks, deps, tags, lemmas in CASES:
    doc = [Tok(*x) for x in zip(toks, deps, tags, lemmas, strict=True)]
    out.append(gen["convert_to_negation"](lambda s, doc=doc: doc, " ".join(toks)))
print("NEGATIONS =", json.dumps(out, indent=1))

# ---- the loss: cl_forward (models.py:89-188) with a stub encoder returning fixed [MASK] states
mod = {}
exec((ROOT / "SNCSE" / "simcse" / "models.py").read_text(), mod)
torch.manual_seed(0)
B, D, L = 6, 8, 5
g = torch.Generator().manual_seed(0)
z1 = torch.randn(B, D, generator=g, dtype=torch.float64)
z2 = z1 + 0.8 * torch.randn(B, D, generator=g, dtype=torch.float64)
z3 = z1 + torch.linspace(0.2, 2.5, B, dtype=torch.float64)[:, None] * torch.randn(B, D, generator=g, dtype=torch.float64)
Z = torch.stack([z1, z2, z3], 1).clone().requires_grad_(True)   # (B, 3, D)
MASK = 103
ids = torch.ones(B, 3, L, dtype=torch.long)
ids[:, :, 2] = MASK
class Enc:
    def __call__(self, input_ids, **kw):
        h = torch.zeros(input_ids.shape[0], L, D, dtype=torch.float64)
        h = h.index_put((torch.arange(input_ids.shape[0]), torch.full((input_ids.shape[0],), 2)), Z.reshape(-1, D))
        return types.SimpleNamespace(last_hidden_state=h, hidden_states=None, attentions=None)
for lam in (1e-3, 5e-4, 1.0):
    cls = types.SimpleNamespace(config=types.SimpleNamespace(use_return_dict=True), mask_token_id=MASK,
                                pooler_type="cls_before_pooler", sim=mod["Similarity"](0.05), device="cpu",
                                alpha=0.1, beta=0.3, lambda_=lam)
    Z.grad = None
    res = mod["cl_forward"](cls, Enc(), input_ids=ids, attention_mask=torch.ones_like(ids))
    res.loss.backward()
    d = (torch.cosine_similarity(z1, z3, dim=1) - torch.cosine_similarity(z1, z2, dim=1)).tolist()
    print(f"lambda={lam}: loss={res.loss.item()!r}")
    print("  grad[:, :, 0] =", Z.grad[:, :, 0].tolist())
    print("  grad norm =", Z.grad.norm().item(), " delta =", [round(x, 4) for x in d])
