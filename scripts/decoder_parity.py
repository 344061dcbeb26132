"""Parity of cselab's decoder path with the official PromptEOL / PretCoT evaluation rules, on a tiny random OPT.

    python scripts/decoder_parity.py [--data data] [--n 1500]

The reference is recomputed by hand from the rules of kongds/scaling_sentemb@8567aa0 ``evaluation.py:180-229``
(the official code itself is not vendored): the template's ``_`` read as spaces; per sentence a period appended
unless it ends in ``. ? " '``, ``"`` -> ``'``, a final ``?`` -> ``.``; the sentence in place of ``*sent 0*``, the
prompt stripped; each batch of 16 (SentEval's test batch size) tokenized with the tokenizer's special tokens,
left-padded with id 0; the model in float32; ``hidden_states[layer][:, -1, :]`` (-1: PromptEOL, -2: PretCoT / KE,
ZBWpro/PretCoTandKE ``evaluation.py:266-269``).  Training prompts (``ft_llm.py:221-239``): the sentence's first 32
tokens decoded back, no sentence rule.

cselab encodes the same sentences its own way (length-sorted batches, :meth:`EmbeddingModel.encode`).  Printed:
how many prompts have identical token ids, and the largest absolute difference between the embeddings.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = {  # as the official scripts write them (train_llm.sh:4; PK settings.py:11-12)
    "prompteol": ('This_sentence_:_"*sent_0*"_means_in_one_word:"', -1),
    "pretcot": ('After thinking step by step , this sentence : "*sent_0*" means in one word:"', -2),
    "knowledge": ('The essence of a sentence is often captured by its main subjects and actions, while descriptive '
                  'terms provide additional but less central details. With this in mind , this sentence : "*sent_0*" '
                  'means in one word:"', -2),
    # run_icl.sh:5, opt-125m's demonstration (conf/prompt/prompteol_icl.yaml, backbone.name=opt_125m)
    "prompteol_icl": ('This_sentence_:_"A_man_is_smoking."_means_in_one_word:"Smoking".This_sentence_:_"*sent_0*"'
                      '_means_in_one_word:"', -1),
}


def official_prompt(template: str, sentence: str) -> str:
    frame = template.replace("_", " ").replace("*sep+*", "").replace("*cls*", "")
    if sentence and sentence[-1] not in ".?\"'":
        sentence += "."
    sentence = sentence.replace('"', "'")
    if sentence.endswith("?"):
        sentence = sentence[:-1] + "."
    return frame.replace("*sent 0*", sentence).strip()


def official_embeddings(model, tokenizer, prompts: list[str], layer: int, batch: int = 16):
    rows, ids_all = [], []
    for start in range(0, len(prompts), batch):
        ids = [tokenizer(p)["input_ids"] for p in prompts[start:start + batch]]
        ids_all += ids
        width = max(map(len, ids))
        input_ids = torch.tensor([[0] * (width - len(i)) + i for i in ids])
        mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
        with torch.no_grad():
            out = model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True)
        rows.append(out.hidden_states[layer][:, -1, :])
    return torch.cat(rows), ids_all


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data")
    parser.add_argument("--n", type=int, default=1500, help="STS-B dev sentences to compare")
    args = parser.parse_args(argv)
    from transformers import AutoModel, AutoTokenizer

    from cselab.cli.tiny_decoders import build_tiny_decoder, read_corpus
    from cselab.data.sts import load_task
    from cselab.methods.prompteol.method import PromptEOL

    torch.set_num_threads(1)
    folder = build_tiny_decoder("opt", Path(tempfile.mkdtemp()) / "tiny_opt",
                                read_corpus(ROOT / "tests" / "data" / "wiki1m_head300.txt", limit=None))
    pairs = next(iter(load_task(args.data, "stsb", "dev").values()))
    sentences = list(dict.fromkeys([*pairs.sent1, *pairs.sent2]))[: args.n]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    print(f"tiny random OPT at {folder}; {len(sentences)} distinct STS-B dev sentences")
    import yaml
    from omegaconf import OmegaConf

    for name, (template, layer) in TEMPLATES.items():
        raw = yaml.safe_load((ROOT / "conf" / "prompt" / f"{name}.yaml").read_text())
        prompt_cfg = OmegaConf.to_container(OmegaConf.create({"prompt": raw, "backbone": {"name": "opt_125m"}}),
                                            resolve=True)["prompt"]  # prompteol_icl: the backbone's demonstration
        torch.manual_seed(0)
        method = PromptEOL(backbone={"name_or_path": str(folder), "family": "decoder"}, setting="sup",
                           model={"pooler": "last_token", "head": "none", "prompt": prompt_cfg,
                                  "tuning": {"name": "frozen"}, "eval_precision": "32"})
        ours = method.encode(sentences, batch_size=16)
        ours_ids = method.model.collate("test").tokenize(sentences)
        theirs, their_ids = official_embeddings(model, tokenizer, [official_prompt(template, s) for s in sentences],
                                                layer)
        same = sum(a == b for a, b in zip(ours_ids, their_ids, strict=True))
        diff = (ours - theirs).abs().max().item()
        cos = torch.nn.functional.cosine_similarity(ours, theirs).min().item()
        print(f"{name:13s} layer {layer:+d}: token ids identical {same}/{len(sentences)}; embeddings max |diff| "
              f"{diff:.2e}, min cosine {cos:.7f}")
        # training prompts: the sentence cut to 32 tokens and decoded back, no sentence rule
        train = method.model.collate("train")
        cut = [tokenizer.decode(tokenizer(s, add_special_tokens=False)["input_ids"][:32]) for s in sentences]
        frame = template.replace("_", " ")
        train_same = sum(train.prompt_ids([s])[0] == tokenizer(frame.replace("*sent 0*", c).strip())["input_ids"]
                         for s, c in zip(sentences[:300], cut[:300], strict=False))
        print(f"{'':13s} training prompts (first 300): token ids identical {train_same}/300")
    return 0


if __name__ == "__main__":
    sys.exit(main())
