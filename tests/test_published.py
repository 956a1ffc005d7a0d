"""GPT-2 and BERT written as specs against Hugging Face transformers' implementations of them.

The shipped specs (specs/zoo) at reduced sizes, with transformers' randomly initialised weights
copied in (no download), every one redrawn far from the init (``hf_checkpoints.perturb``: at
init scale exact GELU and its tanh form agree to 1e-7 and biases are zero): hidden states,
logits and the pooled output must agree. This checks what the parameter counts cannot:
activation, norm placement and epsilon, biases, learned positions, segment embeddings, the
embedding LayerNorm, the pooler and the tied output head.
"""

from __future__ import annotations

import pytest
import torch

from hf_checkpoints import perturb
from tfspec import load_spec
from tfspec.backends.torch import build_module
from tfspec.spec import Spec

transformers = pytest.importorskip("transformers")

SMALL = {"d_model": 32, "heads": 4, "d_ff": 64, "dropout": 0.0, "attention_dropout": 0.0}


def shrink(name: str, layers: int, **extra) -> Spec:
    data = load_spec(name).model_dump(exclude={"d_k", "d_v"}) | SMALL | extra
    stack = "decoder" if data["family"] == "decoder-only" else "encoder"
    data[stack] = data[stack] | {"layers": layers}
    return Spec.model_validate(data)


@torch.no_grad()
def test_gpt2_matches_transformers():
    spec = shrink("zoo/gpt2", 2, vocab={"size": 100, "pad_id": 99, "bos_id": 99, "eos_id": 99, "unk_id": 99},
                  positional={"kind": "learned", "max_len": 40})
    config = transformers.GPT2Config(vocab_size=100, n_positions=40, n_embd=32, n_layer=2, n_head=4, n_inner=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    ref = perturb(transformers.GPT2LMHeadModel(config).eval())
    ours = build_module(spec).eval()
    h = ref.transformer
    weights = {"decoder.embed.weight": h.wte.weight, "output.weight": h.wte.weight, "decoder.pos.weight": h.wpe.weight,
               "decoder.norm.weight": h.ln_f.weight, "decoder.norm.bias": h.ln_f.bias}
    for i, block in enumerate(h.h):
        p = f"decoder.layers.{i}."
        weights |= {p + "self_attn_norm.weight": block.ln_1.weight, p + "self_attn_norm.bias": block.ln_1.bias,
                    p + "self_attn.w_qkv": block.attn.c_attn.weight.T, p + "self_attn.b_qkv": block.attn.c_attn.bias,
                    p + "self_attn.w_o": block.attn.c_proj.weight.T, p + "self_attn.b_o": block.attn.c_proj.bias,
                    p + "ffn_norm.weight": block.ln_2.weight, p + "ffn_norm.bias": block.ln_2.bias,
                    p + "ffn.w_1": block.mlp.c_fc.weight.T, p + "ffn.b_1": block.mlp.c_fc.bias,
                    p + "ffn.w_2": block.mlp.c_proj.weight.T, p + "ffn.b_2": block.mlp.c_proj.bias}
    ours.load_state_dict({k: v.detach().clone() for k, v in weights.items()}, strict=True)
    tokens = torch.randint(0, 99, (3, 17))
    assert torch.allclose(ours(tokens), ref(tokens).logits, atol=1e-5)


@torch.no_grad()
def test_bert_matches_transformers():
    spec = shrink("zoo/bert-base", 2, vocab={"size": 100, "pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3,
                                             "mask_id": 4}, positional={"kind": "learned", "max_len": 40})
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=40, type_vocab_size=2,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, hidden_act="gelu",
                                     layer_norm_eps=1e-12)
    torch.manual_seed(0)
    ref = perturb(transformers.BertModel(config, add_pooling_layer=True).eval())
    ours = build_module(spec).eval()
    e = ref.embeddings
    weights = {"encoder.embed.weight": e.word_embeddings.weight, "output.weight": e.word_embeddings.weight,
               "encoder.pos.weight": e.position_embeddings.weight,
               "encoder.segment.weight": e.token_type_embeddings.weight,
               "encoder.embed_norm.weight": e.LayerNorm.weight, "encoder.embed_norm.bias": e.LayerNorm.bias,
               "encoder.pooler.w_pool": ref.pooler.dense.weight, "encoder.pooler.b_pool": ref.pooler.dense.bias}
    for i, layer in enumerate(ref.encoder.layer):
        p, a = f"encoder.layers.{i}.", layer.attention
        weights |= {p + "self_attn.w_qkv": torch.cat([a.self.query.weight, a.self.key.weight, a.self.value.weight]),
                    p + "self_attn.b_qkv": torch.cat([a.self.query.bias, a.self.key.bias, a.self.value.bias]),
                    p + "self_attn.w_o": a.output.dense.weight, p + "self_attn.b_o": a.output.dense.bias,
                    p + "self_attn_norm.weight": a.output.LayerNorm.weight,
                    p + "self_attn_norm.bias": a.output.LayerNorm.bias,
                    p + "ffn.w_1": layer.intermediate.dense.weight, p + "ffn.b_1": layer.intermediate.dense.bias,
                    p + "ffn.w_2": layer.output.dense.weight, p + "ffn.b_2": layer.output.dense.bias,
                    p + "ffn_norm.weight": layer.output.LayerNorm.weight, p + "ffn_norm.bias": layer.output.LayerNorm.bias}
    ours.load_state_dict({k: v.detach().clone() for k, v in weights.items()}, strict=True)
    tokens = torch.randint(5, 100, (3, 13))
    tokens[1, 9:] = 0  # padding
    segments = torch.randint(0, 2, (3, 13))
    expected = ref(input_ids=tokens, token_type_ids=segments, attention_mask=(tokens != 0).long())
    got = ours.run({"src": tokens, "segments": segments}, ("memory", "pooled"))
    keep = tokens != 0
    assert torch.allclose(got["memory"][keep], expected.last_hidden_state[keep], atol=1e-5)
    assert torch.allclose(got["pooled"], expected.pooler_output, atol=1e-5)


@torch.no_grad()
def test_bert_masked_lm_head_matches_transformers():
    """``head_transform`` + ``output_bias`` (pooler off) is BertForMaskedLM: its 109,514,298
    parameters at full size and its logits at a small one."""
    full = Spec.model_validate(load_spec("zoo/bert-base").model_dump() | {"head_transform": True,
                                                                          "output_bias": True, "pooler": False})
    from tfspec import build_graph

    assert build_graph(full).num_params == 109_514_298
    spec = shrink("zoo/bert-base", 1, vocab={"size": 100, "pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3},
                  positional={"kind": "learned", "max_len": 40}, head_transform=True, output_bias=True,
                  pooler=False)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=40, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12)
    torch.manual_seed(0)
    ref = transformers.BertForMaskedLM(config).eval()
    ours = perturb(build_module(spec).eval())  # the head's bias starts at zero in both: make it matter
    e, a, layer, head = ref.bert.embeddings, ref.bert.encoder.layer[0].attention, ref.bert.encoder.layer[0], ref.cls.predictions
    pairs = {"encoder.embed.weight": e.word_embeddings.weight, "encoder.pos.weight": e.position_embeddings.weight,
             "encoder.segment.weight": e.token_type_embeddings.weight, "encoder.embed_norm.weight": e.LayerNorm.weight,
             "encoder.embed_norm.bias": e.LayerNorm.bias,
             "encoder.layers.0.self_attn.w_qkv": (a.self.query.weight, a.self.key.weight, a.self.value.weight),
             "encoder.layers.0.self_attn.b_qkv": (a.self.query.bias, a.self.key.bias, a.self.value.bias),
             "encoder.layers.0.self_attn.w_o": a.output.dense.weight, "encoder.layers.0.self_attn.b_o": a.output.dense.bias,
             "encoder.layers.0.self_attn_norm.weight": a.output.LayerNorm.weight,
             "encoder.layers.0.self_attn_norm.bias": a.output.LayerNorm.bias,
             "encoder.layers.0.ffn.w_1": layer.intermediate.dense.weight, "encoder.layers.0.ffn.b_1": layer.intermediate.dense.bias,
             "encoder.layers.0.ffn.w_2": layer.output.dense.weight, "encoder.layers.0.ffn.b_2": layer.output.dense.bias,
             "encoder.layers.0.ffn_norm.weight": layer.output.LayerNorm.weight,
             "encoder.layers.0.ffn_norm.bias": layer.output.LayerNorm.bias,
             "head.dense.weight": head.transform.dense.weight, "head.dense.bias": head.transform.dense.bias,
             "head.norm.weight": head.transform.LayerNorm.weight,
             "head.norm.bias": head.transform.LayerNorm.bias, "output.bias": head.bias}
    state = ours.state_dict()
    for name, theirs in pairs.items():  # ours -> theirs, so the bias is non-zero in both
        ours_value = state[name]
        if isinstance(theirs, tuple):
            for part, chunk in zip(theirs, ours_value.chunk(3)):
                part.copy_(chunk)
        else:
            theirs.copy_(ours_value)
    tokens = torch.randint(5, 100, (2, 11))
    expected = ref(input_ids=tokens, token_type_ids=torch.zeros_like(tokens)).logits
    assert torch.allclose(ours(tokens), expected, atol=1e-4)
