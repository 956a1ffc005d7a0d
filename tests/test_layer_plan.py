"""The per-layer plan and the attention stages it opened (issue 28): layers that set their own
sizes and positions, ALiBi, QK-norm, soft-capping, sandwich/output norms and parallel blocks.

References: ALiBi's slopes as Press et al. (2022) state them and as transformers' BLOOM builds
them; parameter counts by hand; both backends against each other through the export's parity
check (the families tests hold these options against transformers' models).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

from tfspec import build_graph
from tfspec.analysis.flops import analyze_flops
from tfspec.backends.onnx import export
from tfspec.backends.torch import RunContext, build_module
from tfspec.ir.positions import alibi_slopes
from tfspec.spec import Spec

BASE = {"name": "m", "family": "decoder-only", "vocab": 100, "d_model": 32, "heads": 4, "d_ff": 64, "dropout": 0.0,
        "norm": "pre", "norm_type": "rms", "positional": {"kind": "rotary", "max_len": 128},
        "decoder": {"layers": 2, "block": ["causal_self_attention", "ffn"]}}


def spec(**fields) -> Spec:
    return Spec.model_validate(BASE | fields)


def attention(**fields) -> dict:
    return {"layers": 2, "block": [{"kind": "causal_self_attention", **fields}, "ffn"]}


def test_alibi_slopes_are_the_papers():
    """Press et al. 2022, §3: 8 heads get 1/2, 1/4, ..., 1/256; 16 heads the geometric sequence
    from 1/2^0.5 down to 1/2^8."""
    np.testing.assert_allclose(alibi_slopes(8), [2.0 ** -i for i in range(1, 9)])
    np.testing.assert_allclose(alibi_slopes(16), [2.0 ** (-0.5 * i) for i in range(1, 17)])


@pytest.mark.parametrize("heads", [1, 6, 12, 20])
def test_alibi_slopes_of_other_head_counts_are_blooms(heads):
    transformers = pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    # BLOOM's tensor is slope * key position for one all-visible row: position 1 holds the slopes.
    theirs = build_alibi_tensor(torch.ones(1, 2), heads, torch.float64)[:, 0, 1]
    np.testing.assert_allclose(alibi_slopes(heads), theirs.numpy(), rtol=1e-6)  # BLOOM: float32 powers
    assert transformers


def test_alibi_attention_by_hand():
    """One layer of ALiBi attention against numpy: scores q·k/sqrt(d_k) - slope * |i - j|,
    causal, softmax, times V, through W^O."""
    s = spec(positional={"kind": "alibi", "max_len": 64}, decoder={"layers": 1, "block": ["causal_self_attention"]},
             norm="post", final_norm=False)
    module = build_module(s)
    attn = dict(module.named_modules())["decoder.layers.0.self_attn"]
    torch.manual_seed(0)
    for p in attn.parameters():
        p.data.normal_(0, 0.3)
    x = torch.randn(1, 7, 32)
    ours = attn(RunContext(training=False, padding={}), x)[0].detach().numpy().astype(np.float64)
    w, b = attn.w_qkv.detach().numpy().astype(np.float64), attn.b_qkv.detach().numpy().astype(np.float64)
    q, k, v = np.split(x[0].numpy() @ w.T + b, 3, axis=-1)
    slopes, outs = alibi_slopes(4), []
    for head in range(4):
        cols = slice(8 * head, 8 * head + 8)
        scores = q[:, cols] @ k[:, cols].T / np.sqrt(8)
        i, j = np.arange(7)[:, None], np.arange(7)[None, :]
        scores = np.where(j <= i, scores - slopes[head] * np.abs(i - j), -np.inf)
        weights = np.exp(scores - scores.max(1, keepdims=True))
        outs.append(weights / weights.sum(1, keepdims=True) @ v[:, cols])
    expected = np.concatenate(outs, 1) @ attn.w_o.detach().numpy().T + attn.b_o.detach().numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-5)


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("fields", [
    {"positional": {"kind": "alibi", "max_len": 128}},
    {"family": "encoder-decoder", "positional": {"kind": "alibi", "max_len": 128},
     "encoder": {"layers": 1, "block": ["self_attention", "ffn"]},
     "decoder": {"layers": 1, "block": ["causal_self_attention", "cross_attention", "ffn"]}},
    {"decoder": attention(qk_norm="head", kv_heads=2)},
    {"norm_type": "layer", "decoder": attention(qk_norm="all", kv_heads=1)},
    {"decoder": attention(softcap=0.5), "output_softcap": 0.8, "norm": "sandwich"},
    {"residual": "parallel", "positional": {"kind": "rotary", "fraction": 0.5, "max_len": 128}},
    {"residual": "parallel_shared_norm", "norm_type": "layer"},
    {"norm": "output"},
    {"norm_type": "layer", "norm_bias": False, "residual_scale": 0.22, "embed_multiplier": 12.0},
    {"norm_type": "layer", "norm_bias": False, "norm_gain": False, "decoder": attention(qk_norm="head")},
    {"decoder": {"groups": [
        {"layers": 1, "block": [{"kind": "causal_self_attention", "positions": {"kind": "rotary", "base": 1e6}}, "ffn"]},
        {"layers": 1, "block": [{"kind": "restricted_self_attention", "r": 3, "causal": True, "heads": 2, "d_k": 12},
                                "ffn"]},
        {"layers": 1, "block": [{"kind": "causal_self_attention", "positions": "none"}, "ffn"]}]}},
], ids=["alibi", "alibi-encoder-decoder", "qk-norm-head-gqa", "qk-norm-all-layernorm-mqa", "softcaps-sandwich",
        "parallel-partial-rotary", "parallel-shared-norm", "output-norm", "granite-scales-gain-only-norm",
        "no-parameter-norms", "per-layer-positions-heads"])
def test_every_new_option_exports_with_parity(fields, opset, tmp_path):
    """onnxruntime against the PyTorch backend: full sequences, steps after pasts, greedy decoding."""
    torch.manual_seed(0)
    model = build_module(spec(**fields))
    with torch.no_grad():
        for name, p in model.named_parameters():  # gains and biases away from 1 and 0, scores large enough to cap
            p.normal_(1.0 if "norm" in name and "bias" not in name else 0.0, 0.3)
    result = export(model, tmp_path, opset=opset)
    assert result.ok, [str(c) for c in result.checks if not c.ok]


def test_parameter_counts_by_hand():
    d, d_k, layers = 32, 8, 2
    plain = build_graph(spec()).num_params
    count = lambda **f: build_graph(spec(**f)).num_params  # noqa: E731
    assert count(decoder=attention(qk_norm="head")) - plain == layers * 2 * d_k
    assert count(decoder=attention(qk_norm="all", kv_heads=1), norm_type="layer") - \
        count(decoder=attention(kv_heads=1), norm_type="layer") == layers * 2 * (4 + 1) * d_k  # gain and bias over q (4 heads) and k (1)
    assert count(norm="sandwich") - plain == layers * 2 * d  # an output norm per sub-layer
    assert count(norm="output") == plain
    norms = 2 * layers + 1  # two per layer and the final one
    assert count(norm_type="layer") - plain == norms * d  # LayerNorm's bias
    assert count(norm_type="layer", norm_bias=False) == plain and plain - count(norm_gain=False) == norms * d
    assert count(residual_scale=0.5, embed_multiplier=3.0) == plain
    assert count(residual="parallel") == plain
    assert plain - count(residual="parallel_shared_norm") == layers * d  # one norm per layer, not two
    # A layer of 2 heads of width 12: q (2 * 12) and k, v (2 * 12 each) rows, W^O 24 columns.
    narrow = {"layers": 1, "block": [{"kind": "causal_self_attention", "heads": 2, "d_k": 12, "d_v": 12}, "ffn"]}
    wide = {"layers": 1, "block": ["causal_self_attention", "ffn"]}
    difference = count(decoder=wide) - count(decoder=narrow)
    assert difference == (3 * 32 * d + 3 * 32) + 32 * d - ((3 * 24 * d + 3 * 24) + 24 * d)


def test_flops_follow_each_layers_heads():
    """A layer's own heads and widths enter its FLOPs (dense: n x n scores): projections
    2 n d (3 h d_k), scores and values 2 n^2 h d_k each, W^O 2 n h d_v d."""
    narrow = spec(decoder={"layers": 1, "block": [{"kind": "causal_self_attention", "heads": 2, "d_k": 12, "d_v": 12}]})
    row = next(r for r in analyze_flops(build_graph(narrow), n=10).layers if r.layer is not None)
    assert row.forward == (2 * 10 * 32 * (2 * 12 * 3) + 2 * 100 * 2 * 12 * 2 + 2 * 10 * 2 * 12 * 32)
    assert "heads=2" in row.label and "d_k=12" in row.label and "kv_heads" not in row.label


def test_plan_resolves_every_layer():
    s = spec(decoder={"groups": [{"layers": 2, "block": [{"kind": "causal_self_attention", "qk_norm": "head"}, "ffn"]},
                                 {"layers": 1, "block": [{"kind": "causal_self_attention", "positions": "none"},
                                                         {"kind": "ffn", "d_ff": 16}]}]})
    plan = s.plan("decoder")
    assert [p.index for p in plan] == [0, 1, 2]
    assert [p.attention.qk_norm for p in plan] == ["head", "head", "none"]
    assert [p.attention.positions.kind for p in plan] == ["rotary", "rotary", "none"]
    assert [(p.attention.heads, p.attention.kv_heads, p.attention.d_k) for p in plan] == [(4, 4, 8)] * 3
    assert [p.ffn.d_ff for p in plan] == [64, 64, 16]
    assert plan[2].names == ("decoder.layers.2.self_attn", "decoder.layers.2.ffn")


def test_a_layer_stating_the_specs_own_values_is_the_same_model():
    assert spec(decoder=attention(heads=4, kv_heads=4, d_k=8, positions={"kind": "rotary", "max_len": 128})) == spec()
    assert spec(decoder=attention(kv_heads=2)) != spec()


@pytest.mark.parametrize("fields,needles", [
    ({"residual": "parallel", "norm": "post"}, ["residual", "set norm: pre"]),
    ({"residual": "parallel", "decoder": {"layers": 1, "block": ["causal_self_attention", "ffn", "ffn"]}},
     ["decoder.block", "has 3"]),
    ({"decoder": attention(positions="sinusoidal")}, ["positions", "added to the embeddings"]),
    ({"decoder": {"layers": 1, "block": [  # one table per stack: layers that set it set it alike
        {"kind": "causal_self_attention", "positions": {"kind": "relative_bias", "max_distance": 64}}, "ffn",
        {"kind": "causal_self_attention", "positions": {"kind": "relative_bias", "max_distance": 32}}, "ffn"]}},
     ["decoder.block[2]", "one per stack, shared by its layers: set the same positions as decoder.block[0]"]),
    ({"decoder": attention(heads=6, kv_heads=4)}, ["decoder.block[0]", "heads (6)", "kv_heads (4)"]),
    ({"decoder": attention(score="additive", softcap=30)}, ["softcap (30.0) caps dot-product scores"]),
    ({"decoder": attention(qk_norm="layer")}, ["qk_norm", "'none', 'head', 'per_head', 'all' or 'l2'"]),
    ({"decoder": attention(d_k=7)}, ["d_k (7)", "even"]),
])
def test_bad_layer_fields_are_clear_errors(fields, needles, write_spec, cli):
    code, _, err = cli("validate", write_spec(yaml.safe_dump(BASE | fields)))
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
