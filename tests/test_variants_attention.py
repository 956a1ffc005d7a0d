"""Attention variants from x-transformers as tfspec spec options named after what they compute
(issue 57): sigmoid weights (``sigmoid_bias``), explicit sparse top-k (``top_k``) and talking heads
(``mix_logits``, ``mix_weights``), each a score modifier (``tfspec/modifiers``).

References: x-transformers 2.31.10 on the same weights (``tests/xtransformers_reference.py``), in
PyTorch, KV-cached decoding and onnxruntime; the sigmoid paper's bias b = -log(n), which
x-transformers lacks, against its equation written out in numpy; parameter counts against
x-transformers' own; the training-memory estimate against autograd's saved tensors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from tfspec import build_graph
from tfspec.analysis import train_memory
from tfspec.analysis.complexity import table1_complexity
from tfspec.analysis.flops import SYMBOLS, op_flops
from tfspec.analysis.params import analyze_params
from tfspec.backends.onnx import export
from tfspec.backends.torch import RunContext, build_module
from tfspec.layers.attention import fused_kernel
from tests.xtransformers_reference import (HEADS, Case, attention_hook, check_cached, check_onnx, check_torch,
                                           differs, pair, spec)


def talking_heads(a, copier, prefix):
    """x-transformers mixes the logits as J + W J (P_l = I + W) and the weights as W A (P_w = W)."""
    if a.attend.pre_softmax_talking_heads is not None:
        copier.set(f"{prefix}.mix_logits", torch.eye(HEADS) + a.attend.pre_softmax_talking_heads.weight[:, :, 0, 0])
    if a.attend.post_softmax_talking_heads is not None:
        copier.set(f"{prefix}.mix_weights", a.attend.post_softmax_talking_heads.weight[:, :, 0, 0])


def scramble_talking_heads(xt):
    """x-transformers starts its talking-heads convolutions at the identity (dirac): move them off it."""
    for name, p in xt.named_parameters():
        if "talking_heads" in name:
            p.normal_(0.0, 0.5)


TALKING = {"hooks": (attention_hook(talking_heads),), "init": (scramble_talking_heads,)}
VARIANTS = {
    "sigmoid": ({"attn_sigmoid": True}, {"sigmoid_bias": 0.0}, {}),
    "top_k": ({"attn_sparse_topk": 3}, {"top_k": 3}, {}),
    "mix_logits": ({"attn_pre_talking_heads": True}, {"mix_logits": True}, TALKING),
    "mix_weights": ({"attn_post_talking_heads": True}, {"mix_weights": True}, TALKING),
    "talking_heads": ({"attn_pre_talking_heads": True, "attn_post_talking_heads": True},
                      {"mix_logits": True, "mix_weights": True}, TALKING),
}
"""x-transformers' options, tfspec's attention fields and the harness's extras, per variant."""
FAMILIES = ["decoder-only", "encoder-only"]


def case(variant: str, family: str = "decoder-only") -> Case:
    options, attention, extra = VARIANTS[variant]
    return Case(options=options, attention=attention, family=family, **extra)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_baseline_is_x_transformers_defaults(family, tmp_path):
    """The harness itself: no option on either side, equal logits in PyTorch and ONNX."""
    check_torch(Case(family=family))
    check_onnx(Case(family=family), tmp_path)
    if family == "decoder-only":
        check_cached(Case())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_matches_x_transformers_in_pytorch(variant, family):
    check_torch(case(variant, family))
    if family == "decoder-only":
        check_cached(case(variant))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_matches_x_transformers_in_onnx(variant, tmp_path):
    """The export's parity checks (full sequences, steps after pasts, greedy decoding) pass, and
    onnxruntime's logits are x-transformers'."""
    check_onnx(case(variant), tmp_path)


def test_encoder_variants_match_x_transformers_in_onnx(tmp_path):
    for variant in ("sigmoid", "top_k", "talking_heads"):
        check_onnx(case(variant, "encoder-only"), tmp_path / variant)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_is_not_a_no_op(variant):
    differs(case(variant))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_counts_x_transformers_parameters_and_spells_the_scores_out(variant):
    """Parameters: talking heads add h x h per matrix, the others none, as x-transformers counts
    them; every variant rules the fused kernels out."""
    xt, tf = pair(case(variant))
    graph = build_graph(spec(case(variant)))
    assert analyze_params(graph).total == sum(p.numel() for p in xt.parameters())
    assert not any(fused_kernel(n) for n in graph.nodes() if n.op == "attention")


def test_talking_heads_flops_and_table1_count_h_squared_per_pair():
    """Each mix is h x h multiply-adds per scored pair: n(n+1)/2 pairs causal, n^2 dense; Table 1's
    complexity per layer gains an n^2 h^2 term."""
    graph = build_graph(spec(case("talking_heads")))
    node = next(n for n in graph.nodes() if n.op == "attention")
    n, h = SYMBOLS.n, SYMBOLS.h
    visible, dense = op_flops(node, dense=False), op_flops(node, dense=True)
    for field in ("mix_logits", "mix_weights"):
        assert (visible[field] - 2 * h * h * n * (n + 1) / 2).expand() == 0
        assert (dense[field] - 2 * h * h * n * n).expand() == 0
    assert table1_complexity(node.layer) == "O(n²·h² + n²·d)"
    ranked = next(n for n in build_graph(spec(case("top_k"))).nodes() if n.op == "attention")
    assert table1_complexity(ranked.layer) == "O(n²·d)"  # every score is computed to be ranked


def test_sigmoid_weights_follow_the_paper_with_its_bias():
    """b = -log(n) (Ramapuram et al. 2024), which x-transformers lacks: one causal layer against
    sigmoid(q·k / sqrt(d_k) + b) V W^O written out in numpy, masked keys weighing 0."""
    length, bias = 7, -math.log(7)
    s = spec(Case(attention={"sigmoid_bias": bias}))
    attn = dict(build_module(s).named_modules())["decoder.layers.0.self_attn"]
    torch.manual_seed(0)
    for p in attn.parameters():
        p.data.normal_(0, 0.3)
    x = torch.randn(1, length, 16)
    with torch.no_grad():
        ours = attn(RunContext(training=False, padding={}), x)[0].numpy().astype(np.float64)
    q, k, v = np.split(x[0].numpy().astype(np.float64) @ attn.w_qkv.detach().numpy().T.astype(np.float64), 3, -1)
    i, j = np.arange(length)[:, None], np.arange(length)[None, :]
    heads = []
    for head in range(HEADS):
        cols = slice(8 * head, 8 * head + 8)
        weights = np.where(j <= i, 1 / (1 + np.exp(-(q[:, cols] @ k[:, cols].T / np.sqrt(8) + bias))), 0.0)
        heads.append(weights @ v[:, cols])
    np.testing.assert_allclose(ours, np.concatenate(heads, 1) @ attn.w_o.detach().numpy().T, atol=1e-5)


def test_sigmoid_with_the_papers_bias_exports_with_parity(tmp_path):
    torch.manual_seed(0)
    model = build_module(spec(Case(attention={"sigmoid_bias": -math.log(9)})))
    result = export(model, tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]


def test_top_k_over_every_key_is_the_softmax():
    """k at least the number of keys keeps them all: the logits are the plain softmax's."""
    tokens = torch.randint(4, 50, (2, 9))
    torch.manual_seed(0)
    plain = build_module(spec(Case())).eval()
    wide = build_module(spec(Case(attention={"top_k": 9}))).eval()
    wide.load_state_dict(plain.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(wide(tokens).numpy(), plain(tokens).numpy(), atol=1e-6)


def saved_copies(s) -> float:
    """Bytes of (B, h, L, L) tensors, whatever their view, the backward of one call keeps (distinct
    storages), in float32 copies."""
    rows, length = 2, 12
    module, kept = build_module(build_graph(s)), {}

    def pack(t):
        if t.numel() == rows * HEADS * length ** 2:  # any view of a (B, h, L, L) tensor
            kept[t.untyped_storage().data_ptr()] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(torch.randint(4, 50, (rows, length)))
    return sum(kept.values()) / (rows * HEADS * length ** 2 * 4)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_training_memory_estimate_keeps_what_autograd_keeps(variant):
    s = spec(case(variant))
    sizes = {"B": 2, "S": 12, "T": 12}
    graph = build_graph(s)
    held = sum(v for node in graph.nodes() for k, v in train_memory._saved(graph, node, sizes).items()
               if k.endswith("#weights"))
    assert held / (2 * HEADS * 12 ** 2 * 4) == saved_copies(s)


def test_refusals_name_the_field():
    with pytest.raises(ValidationError, match="sigmoid_bias .* no denominator for sinks"):
        spec(Case(attention={"sigmoid_bias": 0.0, "sinks": True}))
    with pytest.raises(ValidationError, match="top_k"):
        spec(Case(attention={"top_k": 0}))
    with pytest.raises(ValidationError, match="does not apply mix_logits"):
        spec(Case(spec={"decoder": {"layers": 1, "block": [
            {"kind": "latent_attention", "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
             "v_head_dim": 8, "mix_logits": True}, "ffn"]}}))
