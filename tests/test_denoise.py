"""Template denoising: bias rows (position / pad), their equivalence with the official per-sentence bias, grads."""

from __future__ import annotations

import pytest
import torch
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

from cselab.model.template import TokenizedTemplate
from cselab.model.template_bias import bias_inputs
from cselab.model.template_input import ViewCollate, ViewSpec

FAMILIES = ["bert", "roberta"]
COT = {
    "bert": 'The sentence of "[X]" means [MASK] , so it can be summarized as [MASK] .',
    "roberta": "The sentence of '[X]' means [MASK] , so it can be summarized as [MASK] .",
}
#: lengths 3, 3, 2, 6, 6, 4 with both tokenizers: repeated and distinct lengths in one batch
BATCH = ["the dog ran", "a cat sat", "birds fly", "a man is playing a guitar", "the cat sat on the mat",
         "it is raining today"]  # fmt: skip


def backbone_position_ids(encoder, input_ids, attention_mask, position_ids=None) -> torch.Tensor:
    """The position ids the backbone itself feeds its position embeddings (captured with a hook)."""
    seen: list[torch.Tensor] = []
    emb = encoder.model.embeddings.position_embeddings
    handle = emb.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().clone()))
    try:
        with torch.no_grad():
            encoder(input_ids, attention_mask, position_ids=position_ids)
    finally:
        handle.remove()
    assert len(seen) == 1
    return seen[0].expand(input_ids.shape[0], -1)


def official_pieces(template: str, tokenizer, family: str) -> tuple[list[int], list[int]]:
    """PromptBERT train.py, written out: ``bs`` = [CLS] + prefix ids, ``es`` = suffix ids + [SEP]."""
    t = template.replace("*mask*", tokenizer.mask_token).replace("*sep+*", "").replace("*cls*", "")
    bs_text, es_text = t.replace("*sent_0*", " ").split(" ")
    bs_text, es_text = bs_text.replace("_", " "), es_text.replace("_", " ")
    if family == "roberta":
        bs_text = bs_text.strip()
    return tokenizer.encode(bs_text)[:-1], tokenizer.encode(es_text)[1:]


def last_mask(ids: list[int], mask_id: int) -> int:
    return max(i for i, t in enumerate(ids) if t == mask_id)


# ----------------------------------------------------------------------------------------- (a) positions


@pytest.mark.parametrize("positions", ["official", "aligned"])
@pytest.mark.parametrize("family", FAMILIES)
def test_position_bias_rows_match_real_positions(family: str, positions: str, make_method) -> None:
    """``aligned``: each bias-row token has the position it has in the real input; ``official`` (Prompt-BERT
    ``get_delta``): the same numbering counted from 0, i.e. minus the backbone's first position (RoBERTa: 2)."""
    method = make_method("promptbert", family, pooler="mask", denoise="position", prompt="promptbert",
                         denoise_positions=positions)
    batch = method.train_collate()(BATCH)
    enc = method.encoder
    b, v, t = batch["input_ids"].shape
    real_pos = backbone_position_ids(
        enc, batch["input_ids"].view(b * v, t), batch["attention_mask"].view(b * v, t)
    ).view(b, v, t)
    if family == "roberta":
        ref = RobertaEmbeddings.create_position_ids_from_input_ids(batch["input_ids"].view(b * v, t), 1)
        assert torch.equal(real_pos, ref.view(b, v, t))
        assert enc.position_offset == 2
    else:
        assert torch.equal(real_pos[0, 0], torch.arange(t))
    bias_pos = batch["bias_position_ids"]
    # the bias forward really uses the given position ids
    fed = backbone_position_ids(enc, batch["bias_input_ids"], batch["bias_attention_mask"], bias_pos)
    assert torch.equal(fed, bias_pos)
    for i in range(b):
        for j in range(v):
            tt = method.train_collate().templates[j]
            p, s = len(tt.prefix_ids), len(tt.suffix_ids)
            length = int(batch["sent_len"][i, j])
            r = int(batch["bias_row"][i, j])
            n = int(batch["bias_attention_mask"][r].sum())
            assert n == p + s
            real_idx = list(range(p)) + [p + length + k for k in range(s)]
            assert batch["bias_input_ids"][r, :n].tolist() == batch["input_ids"][i, j, real_idx].tolist()
            shift = 0 if positions == "aligned" else enc.position_offset
            assert bias_pos[r, :n].tolist() == (real_pos[i, j, real_idx] - shift).tolist()
            # the bias's representation index is the same template token as the real one
            assert real_idx[int(batch["bias_rep_index"][r])] == int(batch["rep_index"][i, j])


def test_bias_inputs_position_mode_values() -> None:
    tt = TokenizedTemplate(prefix_ids=(101, 7, 8), suffix_ids=(9, 103, 102), rep_offset=1, rep_in_prefix=False)
    out = bias_inputs(tt, [0, 2, 5], "position", pad_token_id=0, position_offset=2)
    assert out["input_ids"].tolist() == [[101, 7, 8, 9, 103, 102]] * 3
    assert out["attention_mask"].tolist() == [[1] * 6] * 3
    assert out["position_ids"].tolist() == [[2, 3, 4, 5, 6, 7], [2, 3, 4, 7, 8, 9], [2, 3, 4, 10, 11, 12]]
    assert out["rep_index"].tolist() == [4, 4, 4]
    with pytest.raises(ValueError, match="denoise='none'"):
        bias_inputs(tt, [1], "none", pad_token_id=0)


# ----------------------------------------------------------------------------------------- (b) equivalence


@pytest.mark.parametrize("positions", ["official", "aligned"])
@pytest.mark.parametrize("family", FAMILIES)
def test_position_bias_equals_official_per_sentence_bias(family: str, positions: str, make_method) -> None:
    """Prompt-BERT ``get_delta`` (prompt_bert/models.py:93-97): ``d_position_ids = arange(T)`` with the suffix
    shifted by the sentence length -- counted from 0 for RoBERTa too (``denoise_positions=official``);
    ``aligned`` counts from the backbone's first position (RoBERTa: padding_idx + 1)."""
    method = make_method("promptbert", family, pooler="mask", denoise="position", prompt="promptbert",
                         denoise_positions=positions)
    method.eval()
    tok, enc = method.tokenizer, method.encoder
    mask_id = tok.mask_token_id
    batch = method.train_collate()(BATCH)
    lengths = batch["sent_len"][:, 0].tolist()
    assert len(set(lengths)) < len(lengths) and len(set(lengths)) >= 3  # repeated and distinct lengths
    # one bias row per (template, distinct length): two different templates here
    assert batch["bias_input_ids"].shape[0] == 2 * len(set(lengths))

    with torch.no_grad():
        h = method.represent(batch)
        bias_out = enc(batch["bias_input_ids"], batch["bias_attention_mask"], position_ids=batch["bias_position_ids"])
        table = bias_out.last_hidden_state[torch.arange(bias_out.last_hidden_state.shape[0]), batch["bias_rep_index"]]

    views = [method.template(name) for name in method.prompt["train_views"]]
    assert views[0] != views[1]
    for j, template in enumerate(views):
        bs, es = official_pieces(template, tok, family)
        for i, sentence in enumerate(BATCH):
            s = tok.encode(sentence, add_special_tokens=False)[: method.max_seq_len]
            assert len(s) == lengths[i]
            # the real input, alone (no padding)
            ids = bs + s + es
            with torch.no_grad():
                real = enc.model(input_ids=torch.tensor([ids])).last_hidden_state[0, last_mask(ids, mask_id)]
            # the bare template with the suffix positions shifted by this sentence's length
            d_ids = bs + es
            pos = torch.arange(len(d_ids))
            pos[len(bs):] += len(s)
            pos = pos + (enc.position_offset if positions == "aligned" else 0)
            with torch.no_grad():
                out = enc.model(input_ids=torch.tensor([d_ids]), position_ids=pos.unsqueeze(0))
            bias = out.last_hidden_state[0, last_mask(d_ids, mask_id)]
            assert batch["input_ids"][i, j, : len(ids)].tolist() == ids
            torch.testing.assert_close(table[int(batch["bias_row"][i, j])], bias, atol=1e-5, rtol=0)
            torch.testing.assert_close(h[i, j], real - bias, atol=1e-5, rtol=0)
            assert float((real - bias).norm()) > 1e-3  # the bias is not trivially zero


@pytest.mark.parametrize("family", FAMILIES)
def test_pad_bias_equals_per_sentence_bias(family: str, make_method) -> None:
    method = make_method("baseline", family, pooler="mask", head="none", denoise="pad", prompt="promptbert")
    method.eval()
    tok, enc = method.tokenizer, method.encoder
    collate = ViewCollate(tok, [ViewSpec("text", COT[family])], denoise="pad",
                          position_offset=enc.position_offset, max_positions=enc.max_positions)
    batch = collate(BATCH)
    tt = collate.templates[0]
    with torch.no_grad():
        h = method.represent(batch)
    for i, sentence in enumerate(BATCH):
        s = tok.encode(sentence, add_special_tokens=False)
        real_ids = [*tt.prefix_ids, *s, *tt.suffix_ids]
        row = [*tt.prefix_ids, *([tok.pad_token_id] * len(s)), *tt.suffix_ids]
        with torch.no_grad():
            real = enc.model(input_ids=torch.tensor([real_ids])).last_hidden_state[0, last_mask(real_ids, tok.mask_token_id)]
            out = enc.model(input_ids=torch.tensor([row]), attention_mask=torch.ones(1, len(row), dtype=torch.long))
        bias = out.last_hidden_state[0, last_mask(row, tok.mask_token_id)]
        torch.testing.assert_close(h[i, 0], real - bias, atol=1e-5, rtol=0)


def test_sup_views_share_one_template_and_its_rows(make_method) -> None:
    method = make_method("promptbert", "bert", setting="sup", pooler="mask", denoise="position", prompt="promptbert")
    rows = [{"sent0": "the dog ran", "sent1": "birds fly", "hard_neg": "a cat sat"},
            {"sent0": "it is raining today", "sent1": "a cat sat", "hard_neg": "the cat sat on the mat"}]
    batch = method.train_collate()(rows)
    assert batch["input_ids"].shape[:2] == (2, 3)
    assert batch["sent_len"].tolist() == [[3, 2, 3], [4, 3, 6]]
    assert batch["bias_input_ids"].shape[0] == 4  # lengths {2, 3, 4, 6}, one template
    rows_by_len = {}
    for i in range(2):
        for j in range(3):
            rows_by_len.setdefault(int(batch["sent_len"][i, j]), set()).add(int(batch["bias_row"][i, j]))
    assert all(len(r) == 1 for r in rows_by_len.values())
    assert len({next(iter(r)) for r in rows_by_len.values()}) == 4


# ----------------------------------------------------------------------------------------- (c) pad rows


@pytest.mark.parametrize("family", FAMILIES)
def test_pad_rows_layout(family: str, bert_tokenizer, roberta_tokenizer) -> None:
    tok = bert_tokenizer if family == "bert" else roberta_tokenizer
    collate = ViewCollate(tok, [ViewSpec("text", COT[family])], denoise="pad")
    batch = collate(["the dog ran", "a cat sat", "birds fly", "a man is playing a guitar"])
    assert "bias_position_ids" not in batch
    tt = collate.templates[0]
    p, s = len(tt.prefix_ids), len(tt.suffix_ids)
    lengths = [2, 3, 6]
    assert batch["bias_input_ids"].shape == (3, p + 6 + s)
    assert batch["bias_row"].tolist() == [[1], [1], [0], [2]]
    pad = tok.pad_token_id
    for r, length in enumerate(lengths):
        n = p + length + s
        expected = [*tt.prefix_ids, *([pad] * length), *tt.suffix_ids] + [pad] * (6 - length)
        assert batch["bias_input_ids"][r].tolist() == expected
        assert batch["bias_attention_mask"][r].tolist() == [1] * n + [0] * (6 - length)
        rep = int(batch["bias_rep_index"][r])
        assert rep == p + length + tt.rep_offset
        assert rep == last_mask(expected, tok.mask_token_id)


@pytest.mark.parametrize("family", FAMILIES)
def test_pad_rows_default_positions_advance_on_bert_not_on_roberta(family: str, make_method) -> None:
    """Documents the CoT-BERT caveat: RoBERTa numbers positions from non-pad tokens only."""
    method = make_method("baseline", family, pooler="mask", head="none", prompt="promptbert")
    tok, enc = method.tokenizer, method.encoder
    collate = ViewCollate(tok, [ViewSpec("text", COT[family])], denoise="pad")
    batch = collate(["birds fly", "a man is playing a guitar"])  # rows: L = 2, L = 6
    tt = collate.templates[0]
    p = len(tt.prefix_ids)
    pos = backbone_position_ids(enc, batch["bias_input_ids"], batch["bias_attention_mask"])
    suffix_start = {r: p + length for r, length in enumerate([2, 6])}
    if family == "bert":
        for r, start in suffix_start.items():
            assert pos[r, start] == start  # the placeholders shift the suffix like real tokens
        assert pos[0, suffix_start[0]] != pos[1, suffix_start[1]]
    else:
        for r, start in suffix_start.items():
            assert pos[r, p:start].tolist() == [tok.pad_token_id] * (start - p)  # placeholders: padding position
            assert pos[r, start] == p + enc.position_offset  # the suffix does NOT advance over them
        assert pos[0, suffix_start[0]] == pos[1, suffix_start[1]]


# ----------------------------------------------------------------------------------------- (d) gradient


@pytest.mark.parametrize("denoise", ["position", "pad"])
def test_gradient_flows_through_the_bias(denoise: str, make_method) -> None:
    method = make_method("promptbert", "bert", pooler="mask", denoise=denoise, prompt="promptbert")
    method.eval()  # deterministic, so gradients of two forward passes can be compared
    batch = method.train_collate()(BATCH[:4])
    plain = {k: t for k, t in batch.items() if not k.startswith("bias_")}
    torch.manual_seed(0)
    w = torch.randn(4, 2, method.encoder.hidden_size)

    def grads(loss_fn) -> dict[str, torch.Tensor]:
        method.zero_grad(set_to_none=True)
        loss_fn().backward()
        return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in method.named_parameters()}

    def bias_only() -> torch.Tensor:
        out = method.encoder(batch["bias_input_ids"], batch["bias_attention_mask"],
                             position_ids=batch.get("bias_position_ids"))
        last = out.last_hidden_state
        bias = last[torch.arange(last.shape[0]), batch["bias_rep_index"]][batch["bias_row"]]
        return -(bias * w).sum()

    g_full = grads(lambda: (method.represent(batch) * w).sum())
    g_plain = grads(lambda: (method.represent(plain) * w).sum())
    g_bias = grads(bias_only)
    emb = "model.backbone.model.embeddings.word_embeddings.weight"
    assert float((g_full[emb] - g_plain[emb]).abs().sum()) > 1e-4  # the bias term contributes gradient
    assert float(g_bias[emb].abs().sum()) > 1e-4
    for name in g_full:
        torch.testing.assert_close(g_full[name] - g_plain[name], g_bias[name], atol=1e-5, rtol=1e-4)
