"""Attention variants on the heads' output before W^O (issue 57), against x-transformers 2.31.10 on
the same weights (``tests/xtransformers_reference.py``): value gating (``output_gate``: the heads'
output times sigmoid(x W_gate), x-transformers' ``attn_gate_values``, or times SiLU(x W_gate),
its ``attn_swiglu_values``) and NormFormer's head scale (``head_scale``, Shleifer et al. 2021, §2:
a learned scalar per head, x-transformers' ``attn_head_scale``).

Each is checked in PyTorch, KV-cached decoding and onnxruntime (logits within 1e-4), for its
parameter count against x-transformers' own, for not being a no-op, for its FLOPs (the gate's
matrix product; the head scale's elementwise product adds none) and for its training memory
against the tensors autograd really keeps.
"""

from __future__ import annotations

import pytest
import sympy
import torch
from pydantic import ValidationError

from tfspec import build_graph
from tfspec.analysis import train_memory
from tfspec.analysis.complexity import table1_complexity
from tfspec.analysis.flops import SYMBOLS, op_flops
from tfspec.analysis.params import analyze_params
from tfspec.backends.torch import build_module
from tfspec.ir.ops import OPS
from tfspec.layers.attention import fused_kernel
from tests.test_train_memory_ops import measured
from tests.xtransformers_reference import (Case, attention_hook, check_cached, check_onnx, check_torch, differs,
                                           pair, spec)


def copy_gate_and_scale(a, copier, prefix):
    """x-transformers' value gate is a bias-less (h * d_v, d) linear of the attention's input (its
    ``to_v_gate``); its head scale a (1, h, 1, 1) tensor."""
    if a.to_v_gate is not None:
        copier.set(f"{prefix}.w_gate", a.to_v_gate.weight)
    if a.head_scale:
        copier.set(f"{prefix}.head_scale", a.head_scale_params.view(-1))


def move_off_start(xt):
    """x-transformers starts the gate's weights at 0 (every gate 0.5) and the head scales at 1:
    move both off their starts so that a wrong weight or a missing scale shows."""
    for name, p in xt.named_parameters():
        if "to_v_gate" in name or "head_scale" in name:
            p.normal_(0.0, 0.5)


EXTRA = {"hooks": (attention_hook(copy_gate_and_scale),), "init": (move_off_start,)}
VARIANTS = {
    "sigmoid_gate": ({"attn_gate_values": True}, {"output_gate": True}),
    "named_sigmoid_gate": ({"attn_gate_values": True}, {"output_gate": "sigmoid"}),
    "silu_gate": ({"attn_gate_values": True, "attn_swiglu_values": True}, {"output_gate": "silu"}),
    "head_scale": ({"attn_head_scale": True}, {"head_scale": True}),
    "head_scale_silu_gate": ({"attn_head_scale": True, "attn_gate_values": True, "attn_swiglu_values": True},
                             {"head_scale": True, "output_gate": "silu"}),
}
"""x-transformers' options and tfspec's attention fields, per variant."""


def case(variant: str, family: str = "decoder-only") -> Case:
    options, attention = VARIANTS[variant]
    return Case(options=options, attention=attention, family=family, **EXTRA)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_matches_x_transformers_in_pytorch_and_cached_decoding(variant):
    check_torch(case(variant))
    check_torch(case(variant, "encoder-only"))
    check_cached(case(variant))


@pytest.mark.parametrize("variant", ["silu_gate", "head_scale_silu_gate", "sigmoid_gate"])
def test_variant_matches_x_transformers_in_onnx(variant, tmp_path):
    """The export's parity checks (full sequences, steps after pasts, greedy decoding) pass, and
    onnxruntime's logits are x-transformers'."""
    check_onnx(case(variant), tmp_path)


def test_encoder_variant_matches_x_transformers_in_onnx(tmp_path):
    check_onnx(case("head_scale_silu_gate", "encoder-only"), tmp_path)


@pytest.mark.parametrize("variant", ["sigmoid_gate", "silu_gate", "head_scale"])
def test_variant_is_not_a_no_op(variant):
    differs(case(variant))


def test_silu_and_sigmoid_gates_differ():
    """The same weights through the two gate functions give different logits."""
    ids = torch.randint(4, 50, (2, 9))
    _, silu = pair(case("silu_gate"))
    _, sigmoid = pair(case("sigmoid_gate"))
    with torch.no_grad():
        assert (silu(ids) - sigmoid(ids)).abs().max() > 1e-3


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_counts_x_transformers_parameters_and_keeps_the_fused_kernels(variant):
    """The gate adds h * d_v x d per layer, the head scale h, as x-transformers counts them; both act
    after the attention, so the fused kernels still apply."""
    xt, _ = pair(case(variant))
    graph = build_graph(spec(case(variant)))
    assert analyze_params(graph).total == sum(p.numel() for p in xt.parameters())
    assert all(fused_kernel(n) for n in graph.nodes() if n.op == "attention")


def test_flops_and_table1():
    """The gate is one (n x d) @ (d x h d_v) product, whichever its function; the head scale adds
    no matrix product; neither touches the pairs, so Table 1's complexity is the paper's."""
    n, d, h, d_v = SYMBOLS.n, SYMBOLS.d, SYMBOLS.h, SYMBOLS.d_v
    for variant in ("sigmoid_gate", "silu_gate", "head_scale"):
        node = next(x for x in build_graph(spec(case(variant))).nodes() if x.op == "attention")
        terms = op_flops(node, dense=False)
        gated = "output_gate" in VARIANTS[variant][1]
        assert sympy.expand(terms.get("gate", 0) - (2 * n * d * h * d_v if gated else 0)) == 0
        assert table1_complexity(node.layer) == "O(n²·d)"
    plain = op_flops(next(x for x in build_graph(spec(Case())).nodes() if x.op == "attention"), dense=False)
    scaled = op_flops(next(x for x in build_graph(spec(case("head_scale"))).nodes() if x.op == "attention"),
                      dense=False)
    assert scaled == plain


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_training_memory_estimate_keeps_what_autograd_keeps(variant):
    """Each attention node's saved tensors (``report --train``) in bytes equal those autograd keeps
    while it runs: the head scale keeps the output it scales, the sigmoid gate its output and what
    it multiplies, the SiLU gate its logits too."""
    graph = build_graph(spec(case(variant)))
    got = measured(build_module(graph).train(), graph)
    sizes = {"B": 2, "S": 128, "T": 128}
    for node in graph.nodes():
        if node.op == "attention":
            assert sum(train_memory._saved(graph, node, sizes).values()) == got[node.name], node.name


def test_kv_cache_is_unchanged():
    """Neither variant caches anything beyond keys and values: the gate reads the step's own input."""
    def cached(c):
        node = next(x for x in build_graph(spec(c)).nodes() if x.op == "attention")
        return OPS[node.op].cached(node)

    for variant in VARIANTS:
        assert cached(case(variant)) == cached(Case())


def test_refusals_name_the_field():
    with pytest.raises(ValidationError, match="output_gate"):
        spec(Case(attention={"output_gate": "tanh"}))
    latent = {"kind": "latent_attention", "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
              "v_head_dim": 8}
    for field, value in (("head_scale", True), ("output_gate", "silu")):
        with pytest.raises(ValidationError, match=f"does not apply {field}"):
            spec(Case(spec={"decoder": {"layers": 1, "block": [latent | {field: value}, "ffn"]}}))
