"""Cross-layer variants (issue 57, part E): value residual learning (``value_residual``; Zhou et
al. 2024, x-transformers' ``add_value_residual``) and residual attention (``residual_scores``;
He et al. 2020, x-transformers' ``residual_attn``), each against x-transformers 2.31 on the same
weights: PyTorch logits, KV-cached steps and ONNX within 1e-4, the option moving the logits,
parameter counts, FLOPs and what the spec refuses."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from tests import xtransformers_reference as ref
from tests.variants_support import counts_match, saved_bytes
from tfspec import build_graph
from tfspec.ir.ops import definition
from tfspec.layers.attention import fused_kernel
from tfspec.spec import Spec


def copy_mix(xt, copier, family="decoder-only"):
    """x-transformers' learned mix, Linear(dim, heads) then a sigmoid, on every self-attention
    after the first (the first is the source and has none)."""
    for layer in ref.xt_layers(xt, family)[2::2]:
        mix = layer.block.to_value_residual_mix[0]
        copier.set(f"{layer.prefix}.w_mix", mix.weight)
        copier.set(f"{layer.prefix}.b_mix", mix.bias)


def moved_mix(xt):
    """The mix's bias off its start, so that lam differs between tokens and heads visibly."""
    for layer in ref.xt_layers(xt)[2::2]:
        torch.nn.init.normal_(layer.block.to_value_residual_mix[0].bias, 0.0, 1.0)


LEARNED = ref.Case({"add_value_residual": True}, attention={"value_residual": "learned"},
                   hooks=(copy_mix,), init=(moved_mix,))
FIXED = ref.Case({"add_value_residual": True, "learned_value_residual_mix": False}, attention={"value_residual": 0.5})
RESIDUAL_ATTENTION = ref.Case({"residual_attn": True}, attention={"residual_scores": True})
BOTH = ref.Case({"add_value_residual": True, "residual_attn": True},
                attention={"value_residual": "learned", "residual_scores": True}, hooks=(copy_mix,), init=(moved_mix,))
CASES = {"learned mix": LEARNED, "fixed mix": FIXED, "residual attention": RESIDUAL_ATTENTION, "both": BOTH}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
def test_equals_x_transformers(case):
    """PyTorch logits and KV-cached decoding (one token a step: the first layer's values and the
    previous layer's logits for the new query come from the same step) equal x-transformers'."""
    ref.check_torch(case)
    ref.check_cached(case)


@pytest.mark.parametrize("case", [LEARNED, RESIDUAL_ATTENTION], ids=["value residual", "residual attention"])
def test_onnx_equals_x_transformers(case, tmp_path):
    ref.check_onnx(case, tmp_path)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
def test_option_changes_the_logits(case):
    ref.differs(case)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
def test_parameters_and_flops_equal_x_transformers(case):
    """The learned mix's (g, d) + (g,) per reading layer, and its 2 n d g FLOPs, as torch's
    counter sees x-transformers compute them (residual attention adds no parameters or products)."""
    counts_match(case)


def test_residual_scores_spell_attention_out_and_value_residual_keeps_the_kernels():
    """Residual attention needs the logits of the layer that publishes them and of the one that
    reads them: neither runs a fused kernel; mixing values happens before the kernel."""
    for case, fused in ((RESIDUAL_ATTENTION, False), (LEARNED, True)):
        nodes = [n for n in build_graph(ref.spec(case)).nodes() if n.op == "attention"]
        assert [fused_kernel(n) for n in nodes] == [fused] * len(nodes)


@pytest.mark.parametrize("case", [LEARNED, FIXED], ids=["learned", "fixed"])
def test_report_train_counts_what_autograd_saves_for_the_mix(case):
    """``report --train``'s bytes for a reading layer equal autograd's saved tensors (the mixed
    values the kernel reads, lam and v - v_1 for a learned lam, beside the attention's own),
    measured at two batch sizes."""
    xt, tf = ref.pair(case)
    graph, name = tf.graph, "decoder.layers.1.self_attn"
    node = graph.node(name)
    module = tf.get_submodule(name)
    x, first = torch.randn(2, 7, ref.DIM), torch.randn(2, 7, ref.HEADS, ref.DIM_HEAD)

    def run(ctx, x):
        ctx.published[("decoder.layers.0.self_attn", "values")] = torch.cat([first] * (len(x) // 2))
        return module(ctx, x)

    got = saved_bytes(tf, run, x)
    sizes = {"B": 2, "T": 7}
    declared = definition("attention").saved(graph, node, sizes, lambda i: 2 * 7 * ref.DIM * 4)
    assert got == sum(declared.values())


@pytest.mark.parametrize("attention, problem", [
    ({"value_residual": 1.5}, "less than or equal to 1"),
    ({"value_residual": "mean"}, "value_residual"),
])
def test_bad_values_are_field_errors(attention, problem):
    with pytest.raises(ValidationError, match=problem):
        ref.spec(ref.Case(attention=attention))


def spec_with(block, layers=2, family="decoder-only", **extra):
    stack = "decoder" if family != "encoder-only" else "encoder"
    return ref.BASE | {"family": family, stack: {"layers": layers, "block": block}} | extra


@pytest.mark.parametrize("data, problem", [
    (spec_with([{"kind": "causal_self_attention", "residual_scores": True}, "ffn"], layers=1), "first self-attention alone"),
    (spec_with([{"kind": "causal_self_attention", "value_residual": 0.5, "kv_heads": 1}, "ffn"]) | {
        "decoder": {"groups": [{"layers": 1, "block": ["causal_self_attention", "ffn"]},
                               {"layers": 1, "block": [{"kind": "causal_self_attention", "value_residual": 0.5,
                                                        "kv_heads": 1}, "ffn"]}]}}, "kv_heads"),
    (spec_with(["causal_self_attention", "ffn"]) | {"decoder": {"groups": [
        {"layers": 1, "block": [{"kind": "restricted_self_attention", "r": 3, "causal": True}, "ffn"]},
        {"layers": 1, "block": [{"kind": "causal_self_attention", "residual_scores": True}, "ffn"]}]}},
     "same keys"),
    (spec_with([{"kind": "causal_self_attention", "value_residual": 0.5}, "ffn"]) | {
        "decoder": {"layers": 2, "block": [{"kind": "causal_self_attention", "value_residual": 0.5}, "ffn"],
                    "shared": True}}, "shares weights"),
])
def test_links_the_layers_cannot_make_are_refused(data, problem):
    with pytest.raises(ValidationError, match=problem):
        Spec.model_validate(data)


def test_cross_attention_refuses_value_residual():
    data = ref.BASE | {"family": "encoder-decoder", "encoder": {"layers": 2, "block": ["self_attention", "ffn"]},
                       "decoder": {"layers": 2, "block": ["causal_self_attention",
                                                          {"kind": "cross_attention", "value_residual": 0.5}, "ffn"]}}
    with pytest.raises(ValidationError, match="cross_attention is not one"):
        Spec.model_validate(data)
