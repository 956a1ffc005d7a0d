"""The modern decoder vocabulary against outside references beyond whole-model parity
(tests/test_modern_decoders.py): published parameter counts (transformers on the meta
device), Llama 3 frequencies, FLOPs (torch's counter), split biases, the KV caches' shapes in
both backends, every new option through the ONNX export, and the spec errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec import build_graph, load_spec
from tfspec.analysis.flops import analyze_flops
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import DecodeState, build_module
from tfspec.ir.positions import rotary_frequencies
from tfspec.spec import Spec
from tests.test_analysis_flops import counted
from tests.test_modern_decoders import LLAMA_SPEC, WINDOW, pair, tokens

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration")  # torch.backends.mkldnn.flags() notes it

# Published configurations (the released config.json files) and transformers' counts.
PUBLISHED = {
    "zoo/llama-2-7b": ("LlamaForCausalLM", dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                                                num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                                                max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
                                                tie_word_embeddings=False), 6_738_415_616),
    "zoo/tinyllama-1.1b": ("LlamaForCausalLM", dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                                    num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                                                    max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
                                                    tie_word_embeddings=False), 1_100_048_384),
    "zoo/mistral-7b": ("MistralForCausalLM", dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                                  max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=10000.0,
                                                  sliding_window=4096, tie_word_embeddings=False), 7_241_732_096),
    "zoo/qwen2.5-0.5b": ("Qwen2ForCausalLM", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                                  num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                                  max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
                                                  tie_word_embeddings=True), 494_032_768),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_sizes_have_transformers_parameter_counts(name):
    cls, config, published = PUBLISHED[name]
    spec = load_spec(name)
    block = spec.decoder.block[0]
    # The spec transcribes the released configuration.
    assert (spec.vocab.size, spec.d_model, spec.d_ff, spec.decoder.num_layers, spec.heads, spec.num_kv_heads,
            spec.positional.max_len, spec.norm_eps, spec.positional.base, spec.tie_embeddings != "none") == (
        config["vocab_size"], config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"],
        config["num_attention_heads"], config["num_key_value_heads"], config["max_position_embeddings"],
        config["rms_norm_eps"], config["rope_theta"], config["tie_word_embeddings"])
    assert getattr(block, "r", None) == (config["sliding_window"] - 1 if "sliding_window" in config else None)
    with torch.device("meta"):
        ref = getattr(transformers, cls)(getattr(transformers, cls.replace("ForCausalLM", "Config"))(**config))
    theirs = sum(p.numel() for p in ref.parameters())
    assert build_graph(spec).num_params == theirs == published
    assert sum(p.numel() for p in build_module(spec, device="meta").parameters()) == theirs


def test_llama3_frequencies_equal_transformers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    config = transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32,
                                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, **scaling})
    theirs, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    spec = Spec.model_validate({**LLAMA_SPEC, "d_model": 4096, "heads": 32, "kv_heads": 8,
                                "positional": {"kind": "rotary", "base": 500000.0, "scaling": scaling}})
    ours = rotary_frequencies(spec.d_k, spec.positional.model_dump())
    assert attention_factor == 1.0
    np.testing.assert_allclose(ours, theirs.double().numpy(), rtol=1e-6)  # transformers computes in float32
    plain = rotary_frequencies(spec.d_k, {"base": 500000.0, "fraction": 1.0})
    assert (ours < plain).sum() > 10 and (ours == plain).sum() > 10  # both bands and the smooth one occur


GQA_SWIGLU = {**LLAMA_SPEC, "d_model": 64, "heads": 8, "kv_heads": 2, "d_ff": 160, "vocab": 1000}


@pytest.mark.parametrize("fields", [
    {}, {"kv_heads": 1, "biases": {"q": True, "v": True}, "gated": False, "activation": "gelu"},
    {"decoder": {"layers": 2, "block": [{"kind": "restricted_self_attention", "r": 3, "causal": True},
                                        {"kind": "ffn", "gated": True, "activation": "gelu_tanh"}]}},
    {"family": "encoder-decoder", "tie_embeddings": "all", "encoder": {"layers": 1, "block": ["self_attention", "ffn"]},
     "decoder": {"layers": 2, "block": ["causal_self_attention", "cross_attention", "ffn"]}},
], ids=["gqa-swiglu", "mqa-split-bias-gelu", "sliding-geglu", "encoder-decoder-gqa-cross"])
def test_flops_match_torch_flop_counter(fields):
    spec = Spec.model_validate(GQA_SWIGLU | fields)
    assert counted(spec, 12) == pytest.approx(2 * analyze_flops(build_graph(spec), 12).forward, rel=0.01)


def test_gqa_flops_by_hand():
    """n = 4, d = 64, h = 8, g = 2, d_k = d_v = 8: Q 64x64, K and V 64x16 each, then h heads
    of scores and values over all 16 pairs (dense), W^O, gated feed-forward of three 64x160
    matrices, the projection."""
    spec = Spec.model_validate(GQA_SWIGLU | {"decoder": {"layers": 1, "block": ["causal_self_attention", "ffn"]}})
    n = 4
    macs = n * 64 * (64 + 16 + 16) + 2 * 16 * 8 * 8 + n * 64 * 64 + 3 * n * 64 * 160 + n * 64 * 1000
    assert analyze_flops(build_graph(spec), n).forward == 2 * macs


@torch.no_grad()
def test_split_biases_match_transformers_qwen2_without_key_bias():
    """biases {q, v} but not k (Whisper's layout) is stored as b_q and b_v, not a fused b_qkv:
    Qwen2 with its key bias zeroed is the reference."""
    ref, full, _ = pair("qwen2-qkv-bias-tied")
    spec = Spec.model_validate(full.graph.spec.model_dump() | {"biases": {"q": True, "k": False, "v": True}})
    ours = build_module(spec).eval()
    state = {k: v for k, v in full.state_dict().items() if ".b_qkv" not in k}
    for i, layer in enumerate(ref.model.layers):
        a = layer.self_attn
        a.k_proj.bias.zero_()
        state |= {f"decoder.layers.{i}.self_attn.b_q": a.q_proj.bias.clone(),
                  f"decoder.layers.{i}.self_attn.b_v": a.v_proj.bias.clone()}
    ours.load_state_dict(state, strict=True)
    x = tokens(2, 9, 5)
    torch.testing.assert_close(ours(x), ref(x).logits, atol=1e-4, rtol=0)
    key_biases = sum(layer.self_attn.k_proj.bias.numel() for layer in ref.model.layers)
    assert build_graph(spec).num_params == sum(p.numel() for p in ref.parameters()) - key_biases


def test_caches_hold_kv_heads_in_both_backends(tmp_path):
    """Decoding state is sized by the key/value heads, not the query heads."""
    _, ours, spec = pair("mistral-mqa-sliding-window")
    state = DecodeState()
    ours.run({"tgt": tokens(2, 9, 6)}, state=state)
    assert {tuple(t.shape) for value in state.cache.values() for t in value} == {(2, 1, WINDOW - 1, spec.d_k)}
    export(ours, tmp_path, parity=False)
    inputs = OnnxModel(tmp_path, device="cpu").sessions["decoder"].get_inputs()
    assert {tuple(i.shape[1:]) for i in inputs if i.name.startswith("past.")} == {(1, "past_len", spec.d_k)}


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("fields", [
    {"output_bias": True, "tie_embeddings": "none", "biases": {"q": True, "k": False, "v": True, "o": True}},
    {"family": "encoder-decoder", "tie_embeddings": "all", "kv_heads": 1, "positional": {"kind": "rotary",
                                                                                          "fraction": 0.25},
     "encoder": {"layers": 1, "block": ["self_attention", {"kind": "ffn", "gated": False}]},
     "decoder": {"layers": 2, "block": ["causal_self_attention", "cross_attention", "ffn"]}},
    {"norm": "post", "kv_heads": 4, "biases": {"ffn": True}, "decoder": {"layers": 2, "block": [
        {"kind": "restricted_self_attention", "r": 2, "causal": True}, {"kind": "causal_self_attention",
                                                                         "score": "additive"}, "ffn"]}},
], ids=["untied-output-bias-split-biases", "encoder-decoder-mqa-partial-rotary", "post-rms-additive-banded"])
def test_every_option_exports_with_parity(fields, opset, tmp_path):
    """ONNX Runtime against the PyTorch backend: full sequences, steps after pasts, encoder,
    greedy decoding, and blocked restricted attention on long sequences."""
    spec = Spec.model_validate(GQA_SWIGLU | {"positional": {"kind": "rotary", "max_len": 256}} | fields)
    torch.manual_seed(0)
    model = build_module(spec)
    with torch.no_grad():
        for name, p in model.named_parameters():  # biases and gains away from their 0 and 1
            if p.dim() == 1:
                p.normal_(1.0 if "norm" in name else 0.0, 0.2)
    result = export(model, tmp_path, opset=opset)
    assert result.ok, [str(c) for c in result.checks if not c.ok]


def test_untied_output_bias_counts():
    base, with_bias, tied = (build_graph(Spec.model_validate(GQA_SWIGLU | extra)).num_params
                             for extra in ({}, {"output_bias": True}, {"tie_embeddings": "output"}))
    assert with_bias - base == 1000 and base - tied == 1000 * 64


@pytest.mark.parametrize("fields,needles", [
    ({"heads": 8, "kv_heads": 3}, ["kv_heads", "heads (8)", "kv_heads (3)", "dividing heads"]),
    ({"positional": {"kind": "rotary", "fraction": 0.4}}, ["positional.fraction", "int(8 x 0.4) = 3", "even"]),
    ({"positional": {"kind": "rotary", "fraction": 0.1}}, ["positional.fraction", "= 0 must be even and positive"]),
    ({"positional": {"kind": "learned", "fraction": 0.5}}, ["fraction", "kind is learned", "set kind: rotary"]),
    ({"positional": {"kind": "rotary", "scaling": {"factor": 8, "low_freq_factor": 4, "high_freq_factor": 1}}},
     ["high_freq_factor (1.0)", "low_freq_factor (4.0)"]),
    ({"norm_type": "batch"}, ["norm_type", "'layer', 'rms'"]),  # then the other norm kinds (tfspec/norms)
    ({"biases": {"qkv": True}}, ["biases.qkv", "unknown field"]),
])
def test_bad_fields_are_clear_errors(fields, needles, write_spec, cli):
    import yaml

    code, _, err = cli("validate", write_spec(yaml.safe_dump(GQA_SWIGLU | {"name": "m"} | fields)))
    assert code == 2
    for needle in needles:
        assert needle in err, (needle, err)
