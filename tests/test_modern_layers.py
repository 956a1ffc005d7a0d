"""The vocabulary of today's published decoders against Hugging Face transformers' models:
RMSNorm, gated feed-forward (SwiGLU), grouped-query attention, per-projection biases, rotary
positions with their base, untied output projections; Llama, Mistral and Qwen2 written as specs.

Each model is built by transformers at a small random-initialised size; its weights are copied
into the tfspec module (no download), and logits, KV-cached greedy decoding and the ONNX
export must agree with it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec

transformers = pytest.importorskip("transformers")

FAMILIES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
            "mistral": ("MistralConfig", "MistralForCausalLM")}
SMALL = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
         "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None}


def llama_spec(config, **extra) -> Spec:
    """A Llama-style decoder: pre-RMSNorm, SwiGLU, GQA, rotary, untied output, no biases."""
    return Spec.model_validate({
        "name": config.model_type, "family": "decoder-only", "d_model": config.hidden_size,
        "vocab": {"size": config.vocab_size, "pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 0},
        "heads": config.num_attention_heads, "kv_heads": config.num_key_value_heads,
        "d_ff": config.intermediate_size, "activation": "silu", "gated_ffn": True, "norm": "pre",
        "norm_type": "rms", "norm_eps": config.rms_norm_eps, "bias": False, "embed_scale": False,
        "positional": {"kind": "rotary", "max_len": config.max_position_embeddings,
                       "base": config.rope_parameters["rope_theta"]},
        "tie_embeddings": "output" if config.tie_word_embeddings else "none", "dropout": 0.0,
        "label_smoothing": 0.0, "decoder": {"layers": config.num_hidden_layers,
                                            "block": ["causal_self_attention", "ffn"]}} | extra)


def copy_llama_weights(ref, ours, attn: str = "self_attn") -> None:
    """transformers' Llama/Mistral/Qwen2 parameters under tfspec's IR names (``attn``: the
    attention's stem, ``local_attn`` for restricted attention)."""
    m = ref.model  # a tied lm_head is the embedding itself, as tfspec's tied output.weight
    weights = {"decoder.embed.weight": m.embed_tokens.weight, "decoder.norm.weight": m.norm.weight,
               "output.weight": ref.lm_head.weight}
    for i, layer in enumerate(m.layers):
        p, a, f = f"decoder.layers.{i}.", layer.self_attn, layer.mlp
        weights |= {p + f"{attn}_norm.weight": layer.input_layernorm.weight,
                    p + f"{attn}.w_qkv": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                    p + f"{attn}.w_o": a.o_proj.weight, p + "ffn_norm.weight": layer.post_attention_layernorm.weight,
                    p + "ffn.w_1": f.gate_proj.weight, p + "ffn.w_3": f.up_proj.weight, p + "ffn.w_2": f.down_proj.weight}
        if a.q_proj.bias is not None:
            weights[p + f"{attn}.b_qkv"] = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
    ours.load_state_dict({k: v.detach().clone() for k, v in weights.items()}, strict=True)


def build(family: str, **overrides):
    config_class, model_class = (getattr(transformers, cls) for cls in FAMILIES[family])
    config = config_class(**SMALL | overrides)
    torch.manual_seed(0)
    ref = model_class(config).eval()
    extra = {}
    if family == "qwen2":
        extra = {"qkv_bias": True}
    ours = build_module(llama_spec(config, **extra)).eval()
    copy_llama_weights(ref, ours)
    return ref, ours


@pytest.mark.parametrize("family,overrides", [("llama", {}), ("llama", {"num_key_value_heads": 1}),
                                              ("qwen2", {"tie_word_embeddings": True}), ("mistral", {})])
@torch.no_grad()
def test_logits_and_greedy_decoding_match_transformers(family, overrides):
    ref, ours = build(family, **overrides)
    tokens = torch.randint(3, 128, (3, 21))
    assert torch.allclose(ours(tokens), ref(tokens).logits, atol=1e-4)
    prompt = tokens[:, :5]
    want = ref.generate(prompt, max_new_tokens=20, min_new_tokens=20, do_sample=False, pad_token_id=0)[:, 5:]
    options = SearchOptions(beam=1, max_length=20, min_length=20, max_extra=20)
    got = search(TorchDecoder(ours), None, options, prefix=prompt.numpy())
    assert [list(map(int, row)) for row in want] == got


@pytest.mark.parametrize("family,overrides", [("llama", {}), ("qwen2", {"num_key_value_heads": 1}),
                                              ("mistral", {"sliding_window": 6})])
def test_onnx_export_matches_transformers(family, overrides, tmp_path):
    """The ONNX graphs emitted from the IR, run by onnxruntime: full-sequence logits equal
    transformers', and the export's own parity checks (KV-cached steps, greedy) pass."""
    pytest.importorskip("onnxruntime")
    from tfspec.backends.onnx import OnnxModel, export

    if family == "mistral":  # a window shorter than the sequence: restricted causal attention
        ref, _ = build(family, **overrides)
        spec = llama_spec(ref.config).model_dump()
        spec["decoder"] = {"layers": 2, "block": [{"kind": "restricted_self_attention", "r": 5, "causal": True},
                                                  "ffn"]}
        ours = build_module(Spec.model_validate(spec)).eval()
        copy_llama_weights(ref, ours, "local_attn")
    else:
        ref, ours = build(family, **overrides)
    result = export(ours, tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]
    tokens = np.random.default_rng(0).integers(3, 128, (2, 40))
    with torch.no_grad():
        want = ref(torch.from_numpy(tokens)).logits.numpy()
    assert np.abs(OnnxModel(tmp_path).logits(tgt=tokens) - want).max() < 1e-4


PUBLISHED = {  # the published configurations (config.json values), built by transformers on the meta device
    "zoo/llama-2-7b": ("llama", {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32}),
    "zoo/tinyllama-1.1b": ("llama", {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
                                     "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4}),
    "zoo/mistral-7b": ("mistral", {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                   "sliding_window": 4096}),
    "zoo/qwen2.5-0.5b": ("qwen2", {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                                   "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                                   "tie_word_embeddings": True}),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_sizes_count_as_transformers_does(name, cli):
    family, config = PUBLISHED[name]
    config_class, model_class = (getattr(transformers, cls) for cls in FAMILIES[family])
    with torch.device("meta"):
        expected = sum(p.numel() for p in model_class(config_class(**config)).parameters())
    code, out, _ = cli("report", name, "--format", "json")
    assert code == 0 and json.loads(out)["params"]["total"] == expected


def test_llama3_rope_scaling_equals_transformers():
    """Llama 3.1's rescaled frequencies (``rope_scaling: llama3``) as transformers computes them,
    and a small Llama with them: logits equal."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from tfspec.ir.positions import rotary_frequencies

    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    config = transformers.LlamaConfig(**SMALL | {"rope_parameters": rope, "num_attention_heads": 2,
                                                 "num_key_value_heads": 1})
    want, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    scaling = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_len": 64}
    ours = rotary_frequencies(32, {"base": 500000.0, "scaling": scaling})
    assert np.allclose(ours, want.double().numpy(), rtol=1e-6)
    assert not np.allclose(ours, 500000.0 ** (-np.arange(0, 32, 2) / 32))  # the scaling changed them
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(config).eval()
    spec = llama_spec(config).model_dump()
    spec["positional"] = {"kind": "rotary", "max_len": 128, "base": 500000.0, "scaling": scaling}
    model = build_module(Spec.model_validate(spec)).eval()
    copy_llama_weights(ref, model)
    tokens = torch.randint(3, 128, (2, 100))
    with torch.no_grad():
        assert torch.allclose(model(tokens), ref(tokens).logits, atol=1e-4)
