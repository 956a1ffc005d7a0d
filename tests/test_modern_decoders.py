"""Llama, Mistral, Qwen2 and StableLM written as specs, against Hugging Face transformers.

Tiny configurations with random weights (no download), copied into tfspec's module: logits of
the PyTorch backend and of the exported ONNX graphs, and greedy decoding with tfspec's
KV-cached search against ``generate``. Together they check RMSNorm, SwiGLU, grouped- and
multi-query attention (and their caches), per-projection biases, Llama 3 rotary scaling,
partial rotary (StableLM), the rotate-half feature layout and Mistral's sliding window.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec

transformers = pytest.importorskip("transformers")

VOCAB, WINDOW = 100, 5
LLAMA_SPEC = {"family": "decoder-only", "vocab": {"size": VOCAB, "pad_id": 0, "unk_id": 0, "bos_id": 1, "eos_id": 2},
              "d_model": 32, "heads": 4, "kv_heads": 2, "d_ff": 64, "activation": "silu", "gated": True,
              "bias": False, "dropout": 0.0, "norm": "pre", "norm_type": "rms", "norm_eps": 1e-5,
              "tie_embeddings": "none", "embed_scale": False,
              "decoder": {"layers": 2, "block": ["causal_self_attention", "ffn"]}}
HF_COMMON = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "max_position_embeddings": 64, "bos_token_id": 1, "eos_token_id": 2}
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}

# name: (transformers class, its config, the spec's fields beyond LLAMA_SPEC)
MODELS = {
    "llama-gqa-llama3-rope": (
        "LlamaForCausalLM", transformers.LlamaConfig(**HF_COMMON, num_key_value_heads=2, rms_norm_eps=1e-5,
                                                     rope_parameters=LLAMA3_ROPE),
        {"positional": {"kind": "rotary", "base": 500000.0, "max_len": 64, "scaling": {
            "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}}),
    "mistral-mqa-sliding-window": (
        "MistralForCausalLM", transformers.MistralConfig(**HF_COMMON, num_key_value_heads=1, sliding_window=WINDOW,
                                                         rms_norm_eps=1e-5),
        # transformers' window w: query i sees keys i - w + 1 .. i, so r = w - 1.
        {"kv_heads": 1, "positional": {"kind": "rotary", "max_len": 64},
         "decoder": {"layers": 2, "block": [{"kind": "restricted_self_attention", "r": WINDOW - 1, "causal": True},
                                            "ffn"]}}),
    "qwen2-qkv-bias-tied": (
        "Qwen2ForCausalLM", transformers.Qwen2Config(**HF_COMMON, num_key_value_heads=2, rms_norm_eps=1e-6,
                                                     tie_word_embeddings=True,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
        {"biases": {"q": True, "k": True, "v": True}, "norm_eps": 1e-6, "tie_embeddings": "output",
         "positional": {"kind": "rotary", "base": 1e6, "max_len": 64}}),
    "stablelm-partial-rotary-layernorm": (
        "StableLmForCausalLM", transformers.StableLmConfig(**HF_COMMON, num_key_value_heads=2, hidden_act="silu",
                                                           use_qkv_bias=True, partial_rotary_factor=0.5,
                                                           rope_theta=10000.0, layer_norm_eps=1e-5),
        {"biases": {"q": True, "k": True, "v": True}, "norm_type": "layer",
         "positional": {"kind": "rotary", "max_len": 64, "fraction": 0.5}}),
}


@torch.no_grad()
def pair(name: str):
    """(transformers model, tfspec module with its weights, spec) for MODELS[name]."""
    cls, config, fields = MODELS[name]
    torch.manual_seed(0)
    ref = getattr(transformers, cls)(config).eval()
    for param_name, p in ref.named_parameters():  # far from the init, so every weight matters
        p.normal_(1.0 if "norm" in param_name and param_name.endswith("weight") else 0.0, 0.15)
    spec = Spec.model_validate({"name": name, **LLAMA_SPEC, **fields})
    ours = build_module(spec).eval()
    ours.load_state_dict(transformers_weights(ref, spec), strict=True)
    return ref, ours, spec


def transformers_weights(ref, spec: Spec) -> dict[str, torch.Tensor]:
    """tfspec's state dict from a Llama-layout transformers model (q/k/v/o_proj,
    gate/up/down_proj, input/post_attention_layernorm)."""
    m = ref.model
    weights = {"decoder.embed.weight": m.embed_tokens.weight, "output.weight": ref.lm_head.weight}
    weights |= _norm("decoder.norm", m.norm)
    for i, layer in enumerate(m.layers):
        p, a, mlp = f"decoder.layers.{i}.", layer.self_attn, layer.mlp
        attn = p + spec.decoder.block[0].stem  # self_attn, a sliding window's too
        projections = (a.q_proj, a.k_proj, a.v_proj)
        weights |= {f"{attn}.w_qkv": torch.cat([x.weight for x in projections]), f"{attn}.w_o": a.o_proj.weight,
                    p + "ffn.w_1": mlp.gate_proj.weight, p + "ffn.w_3": mlp.up_proj.weight,
                    p + "ffn.w_2": mlp.down_proj.weight}
        if a.q_proj.bias is not None:
            weights[f"{attn}.b_qkv"] = torch.cat([x.bias for x in projections])
        weights |= _norm(f"{attn}_norm", layer.input_layernorm) | _norm(p + "ffn_norm", layer.post_attention_layernorm)
    return {k: v.detach().clone() for k, v in weights.items()}


def _norm(name: str, module) -> dict[str, torch.Tensor]:
    bias = getattr(module, "bias", None)
    return {f"{name}.weight": module.weight} | ({f"{name}.bias": bias} if bias is not None else {})


def tokens(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", MODELS)
@torch.no_grad()
def test_logits_match_transformers(name):
    ref, ours, _ = pair(name)
    x = tokens(3, 17, 1)  # 17 > the sliding window: Mistral's band matters
    torch.testing.assert_close(ours(x), ref(x).logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", MODELS)
@torch.no_grad()
def test_greedy_decoding_matches_generate(name):
    """20 new tokens with tfspec's KV-cached search (key/value heads cached as kv_heads) and
    with ``generate``: the same tokens."""
    ref, ours, _ = pair(name)
    prompt = tokens(2, 6, 2)
    theirs = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, min_new_tokens=20,
                          do_sample=False, pad_token_id=0)[:, prompt.shape[1]:]
    options = SearchOptions(beam=1, max_extra=20, min_length=20)
    assert search(TorchDecoder(ours), None, options, prefix=prompt.numpy()) == theirs.tolist()


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("name", MODELS)
def test_onnx_export_matches_transformers(name, opset, tmp_path):
    """The graphs emitted from the IR: logits against transformers, the export's own parity
    check against PyTorch, and greedy decoding with the ONNX step graph against ``generate``."""
    ref, ours, _ = pair(name)
    result = export(ours, tmp_path, opset=opset)
    assert result.ok, [str(c) for c in result.checks if not c.ok]
    onnx_model = OnnxModel(tmp_path, device="cpu")
    x = tokens(3, 17, 3)
    with torch.no_grad():
        expected = ref(x).logits.numpy()
        prompt = tokens(2, 6, 4)
        theirs = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, min_new_tokens=20,
                              do_sample=False, pad_token_id=0)[:, prompt.shape[1]:]
    np.testing.assert_allclose(onnx_model.logits(tgt=x.numpy()), expected, atol=1e-4, rtol=0)
    options = SearchOptions(beam=1, max_extra=20, min_length=20)
    assert search(onnx_model.decoder(), None, options, prefix=prompt.numpy()) == theirs.tolist()
