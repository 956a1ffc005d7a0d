"""Feed-forward and sub-layer-input variants (issue 57, part B) against x-transformers and their
papers' math: the macaron layout's half steps (``ffn.step``; Lu et al. 2019, ``macaron``),
NormFormer's norm inside the FFN (``ffn.inner_norm``; Shleifer et al. 2021, ``ff_post_act_ln``)
and token shift (``token_shift`` on any sub-layer; RWKV, Peng et al. 2023, ``shift_tokens``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from tests import xtransformers_reference as ref
from tests.variants_support import (check, counts_match, differs, inner, pair, randomised, saved_bytes, sublayers,
                                    tiny, wrapper)
from tfspec import build_graph
from tfspec.analysis.complexity import layer_facts
from tfspec.analysis.flops import analyze_flops
from tfspec.analysis.kvcache import analyze_kv_cache
from tfspec.analysis.params import analyze_params
from tfspec.analysis.paths import path_length
from tfspec.backends.onnx import export
from tfspec.backends.torch import RunContext, build_module
from tfspec.ir.ops import definition


# --- macaron: half-step feed-forward layers around attention -----------------------------------

HALF = {"kind": "ffn", "step": 0.5}
MACARON = ref.Case({"macaron": True}, spec={"decoder": {"layers": ref.DEPTH, "block": [
    HALF, "causal_self_attention", HALF]}})
"""Lu et al. 2019, §3.2: x + 1/2 FFN(x), then attention, then x + 1/2 FFN(x) in every layer."""


def test_macaron_half_steps_equal_x_transformers(tmp_path):
    """``ffn.step: 0.5`` in a block [ffn, attention, ffn] against x-transformers' ``macaron``
    (its FFNs wrapped in Scale(0.5)): PyTorch, cached steps and ONNX within 1e-4; parameters
    (two FFNs a layer) equal x-transformers' count and FLOPs its counted products."""
    check(MACARON, tmp_path)
    counts_match(MACARON)


def test_macaron_half_steps_change_the_logits_from_whole_steps():
    """The same weights with step 1 (the block [ffn, attention, ffn] with whole steps)."""
    _, tf = pair(MACARON)
    whole = build_module(ref.spec(ref.Case(spec={"decoder": {"layers": ref.DEPTH, "block": [
        "ffn", "causal_self_attention", "ffn"]}}))).eval()
    whole.load_state_dict(tf.state_dict())
    ids = ref.tokens()
    assert np.abs(ref.logits_tf(tf, ids) - ref.logits_tf(whole, ids)).max() > 1e-3


@torch.no_grad()
def test_a_half_step_halves_the_feed_forward_update_with_post_norm_too():
    """x + step * FFN(x) whatever the placement: with norm post, LayerNorm(x + 0.5 FFN(x)), the
    FFN's input and output and the norm's output caught by hooks on the modules."""
    spec = tiny(norm="post", decoder={"layers": 1, "block": [{"kind": "ffn", "step": 0.5}]})
    model = randomised(build_module(spec))
    seen = {}
    for name in ("decoder.layers.0.ffn", "decoder.layers.0.ffn_norm"):
        model.get_submodule(name).register_forward_hook(
            lambda module, args, out, name=name: seen.update({name: (args[1], out)}))
    model(ref.tokens(1, 5))
    (x, ffn), (_, normed) = seen["decoder.layers.0.ffn"], seen["decoder.layers.0.ffn_norm"]
    norm = model.get_submodule("decoder.layers.0.ffn_norm")
    torch.testing.assert_close(normed, torch.nn.functional.layer_norm(x + 0.5 * ffn, (16,), norm.weight, norm.bias,
                                                                       spec.norm_eps))


def test_step_is_a_bounded_feed_forward_field():
    for bad in (0.0, 1.5):
        with pytest.raises(ValidationError, match="step"):
            tiny(decoder={"layers": 1, "block": [{"kind": "ffn", "step": bad}]})


# --- NormFormer's norm inside the feed-forward layer -------------------------------------------

def copy_inner_norms(xt, copier):
    """Each FFN's LayerNorm over d_ff (moved off its start first), as it multiplies."""
    for layer in sublayers(xt, INNER_NORM):
        if layer.type == "f":
            norm = next(m for m in inner(layer.block).ff if type(m).__name__ == "LayerNorm")
            with torch.no_grad():
                norm.gamma.add_(0.3 * torch.randn_like(norm.gamma))
            copier.set(f"{layer.prefix}.inner_norm", ref.gain(norm))


INNER_NORM = ref.Case({"ff_post_act_ln": True}, hooks=(copy_inner_norms,), spec={"decoder": {
    "layers": ref.DEPTH, "block": ["causal_self_attention", {"kind": "ffn", "inner_norm": True}]}})
"""Shleifer et al. 2021 (NormFormer), §2: W2 LayerNorm(act(x W1)) in every FFN."""


def test_inner_norm_is_normformers_ffn_norm_as_x_transformers_computes_it(tmp_path):
    """``ffn.inner_norm`` against x-transformers' ``ff_post_act_ln``: PyTorch, cached steps and
    ONNX within 1e-4; the logits move without it; parameters and FLOPs equal x-transformers'."""
    check(INNER_NORM, tmp_path)
    differs(INNER_NORM)
    counts_match(INNER_NORM)


@pytest.mark.parametrize("norm_type", ["layer", "rms"])
@pytest.mark.parametrize("gated", [False, True])
def test_inner_norm_saves_what_autograd_keeps(norm_type, gated, tmp_path):
    """What ``report --train`` adds for the inner norm equals what PyTorch's autograd keeps
    beyond the plain FFN's; the ONNX export (RMSNorm too) keeps parity."""
    sizes, x = {"B": 2, "T": 5}, torch.randn(2, 5, 16, requires_grad=True)
    declared, kept = [], []
    for inner_norm in (False, True):
        spec = tiny(norm_type=norm_type, gated=gated, activation="gelu",
                    decoder={"layers": 1, "block": ["causal_self_attention",
                                                    {"kind": "ffn", "inner_norm": inner_norm}]})
        graph, model = build_graph(spec), randomised(build_module(spec))
        node = graph.node("decoder.layers.0.ffn")
        declared.append(sum(v for k, v in definition("ffn").saved(graph, node, sizes, lambda n: 0).items()))
        kept.append(saved_bytes(model, model.get_submodule("decoder.layers.0.ffn"), x))
    assert declared[1] - declared[0] == kept[1] - kept[0] > 0
    result = export(model, tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]


def test_inner_norm_under_a_norm_kind_the_ffn_cannot_compute_is_refused():
    with pytest.raises(ValidationError, match="inner_norm normalises with the norm_type"):
        tiny(norm_type="l2", decoder={"layers": 1, "block": [{"kind": "ffn", "inner_norm": True}]})


# --- token shift: each sub-layer reads its input mixed with the previous position's -------------

SHIFTED = [{"kind": "causal_self_attention", "token_shift": True}, {"kind": "ffn", "token_shift": True}]


def copy_split_shift(xt, copier):
    """x-transformers' ``shift_tokens: 1`` in a decoder shifts by (0, 1): the first d // 2 features
    are the position's own (mu = 1), the next d // 2 the previous position's (mu = 0)."""
    half = ref.DIM // 2
    for layer in sublayers(xt, TOKEN_SHIFT):
        assert wrapper(layer.block, "ShiftTokens").shifts == (0, 1)
        copier.set(f"{layer.prefix}_shift.mix", torch.cat([torch.ones(half), torch.zeros(ref.DIM - half)]))


TOKEN_SHIFT = ref.Case({"shift_tokens": 1}, hooks=(copy_split_shift,),
                       spec={"decoder": {"layers": ref.DEPTH, "block": SHIFTED}})
"""x-transformers' token shift on every sub-layer: tfspec's learned mu at x-transformers' split."""


def test_token_shift_at_x_transformers_split_equals_its_shift_tokens(tmp_path):
    """``token_shift`` with mu at x-transformers' split: PyTorch, KV-cached steps (each carrying
    the previous position's input) and ONNX within 1e-4; without the shift the logits move."""
    check(TOKEN_SHIFT, tmp_path)
    differs(TOKEN_SHIFT)


@torch.no_grad()
def test_token_shift_is_rwkvs_lerp_and_reads_left_padding_as_the_start():
    """Peng et al. 2023, eqs. 11-15: mu * x_t + (1 - mu) * x_{t-1}, x_{-1} = 0, mu per feature, in
    numpy; a row left-padded by 2 gives its real positions the unpadded row's values."""
    model = randomised(build_module(tiny(decoder={"layers": 1, "block": SHIFTED})))
    shift = model.get_submodule("decoder.layers.0.self_attn_shift")
    x = torch.randn(1, 6, 16)
    mu, h = shift.mix.double().numpy(), x.double().numpy()
    previous = np.concatenate([np.zeros((1, 1, 16)), h[:, :-1]], 1)
    want = mu * h + (1 - mu) * previous
    np.testing.assert_allclose(shift(RunContext(training=False, padding={}), x).numpy(), want, atol=1e-6, rtol=0)
    padded = torch.cat([torch.randn(1, 2, 16), x], 1)
    pad = torch.tensor([[True, True] + [False] * 6])
    got = shift(RunContext(training=False, padding={"T": pad}), padded)[:, 2:]
    np.testing.assert_allclose(got.numpy(), want, atol=1e-6, rtol=0)


def test_token_shift_connects_each_position_with_the_one_before():
    """Table 1: a stack of shifted feed-forward layers connects input j to output i through
    i - j layers (a convolution of length 2, Table 1's O(n/k) row with k = 2, here k - 1 = 1 a
    layer), where plain ones never connect; causal attention keeps its one layer; the shift
    mixes positions (ragged batches are refused) and a decoder carries its one position."""
    spec = tiny(decoder={"layers": 1, "block": SHIFTED})
    ffn, attention = (layer.resolved(spec) for layer in spec.decoder.block[::-1])
    assert [path_length(ffn, n) for n in (4, 8, 16)] == [3, 7, 15]
    assert path_length(ffn.model_copy(update={"token_shift": False}), 8) is None
    assert path_length(attention, 16) == 1
    assert layer_facts(ffn).max_path_length == "O(n)"
    graph = build_graph(spec)
    plain = build_graph(tiny(decoder={"layers": 1, "block": ["causal_self_attention", "ffn"]}))
    assert not graph.masks_padding("decoder") and plain.masks_padding("decoder")
    assert definition("token_shift").carries  # the KV cache per position is attention's alone
    assert analyze_kv_cache(graph, 8).per_token == analyze_kv_cache(plain, 8).per_token


def test_token_shift_keeps_one_difference_for_the_backward_pass():
    """What the op declares against what PyTorch's autograd saves for the lowering: x_t - x_{t-1},
    one (2, 5, 16) float32 activation."""
    model = randomised(build_module(tiny(decoder={"layers": 1, "block": SHIFTED})))
    shift = model.get_submodule("decoder.layers.0.ffn_shift")
    kept = saved_bytes(model, shift, torch.randn(2, 5, 16, requires_grad=True))
    graph = build_graph(tiny(decoder={"layers": 1, "block": SHIFTED}))
    node = graph.node("decoder.layers.0.ffn_shift")
    declared = definition("token_shift").saved(graph, node, {"B": 2, "T": 5}, lambda name: 2 * 5 * 16 * 4)
    assert sum(declared.values()) == kept


def test_token_shift_adds_d_model_parameters_per_sublayer_and_no_flops():
    plain, shifted = (build_graph(tiny(decoder={"layers": 1, "block": block}))
                      for block in (["causal_self_attention", "ffn"], SHIFTED))
    assert analyze_params(shifted).total - analyze_params(plain).total == 2 * 16
    assert analyze_flops(shifted, 9).forward == analyze_flops(plain, 9).forward
