"""Norm kinds and a learned gain on each sub-layer's output (issue 57, part B) against
x-transformers and their papers' math, each a spec option named after what it computes.

``norm_type`` (``tfspec/norms``, one module per kind): ``l2`` is ScaleNorm (Nguyen & Salazar 2019;
x-transformers' ``use_scalenorm``), ``tanh`` is dynamic tanh (Zhu et al. 2025;
``use_dynamic_tanh``); ``sublayer_gain`` is LayerScale (Touvron et al. 2021; ``use_layerscale``).
The shared pieces (x-transformers pairs read through its wrappers) are
``tests/variants_support.py``; the feed-forward variants are ``test_variants_ffn.py``, the
residual ones ``test_variants_residual.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from tests import xtransformers_reference as ref
from tests.variants_support import check, counts_match, differs, randomised, saved_bytes, tiny, wrapper
from tfspec import build_graph
from tfspec.backends.onnx import export
from tfspec.backends.onnx.lower import lowerings
from tfspec.backends.torch import build_module
from tfspec.backends.torch.registry import LOWERINGS
from tfspec.ir.ops import definition
from tfspec.norms import NORMS, ordered
from tfspec.registry import discover


# --- the norm kinds' registry --------------------------------------------------------------

@pytest.mark.parametrize("kind", [k.name for k in ordered()])
def test_every_norm_kind_is_a_position_wise_op_lowered_by_both_backends_with_parity(kind, tmp_path):
    """Each kind's op is defined, position-wise (it caches nothing, so decoding needs no state of
    its own) and lowered by both backends; a pre-norm decoder with it exports with parity (full
    sequences, steps after pasts, greedy tokens)."""
    discover("tfspec.backends.torch")
    op = definition(NORMS[kind].op)
    assert op.position_wise and not op.carries and op.name in LOWERINGS and op.name in lowerings()
    spec = tiny(norm_type=kind)
    assert {n.op for n in build_graph(spec).nodes() if n.component == "norm"} == {op.name}
    result = export(randomised(build_module(spec)), tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]


# --- the ops against the papers' formulas ----------------------------------------------------

def norm_module(kind: str, **fields):
    """A randomised model of ``kind`` and its first norm's PyTorch lowering."""
    model = randomised(build_module(tiny(norm_type=kind, **fields)))
    return model, model.get_submodule("decoder.layers.0.self_attn_norm")


@torch.no_grad()
def test_l2_norm_is_scalenorm_g_x_over_its_l2_norm():
    """Nguyen & Salazar 2019, §2.2: g * x / ||x||_2 (a zero row stays zero: the norm is clamped
    at eps, as the paper's code does), in float64 numpy."""
    _, norm = norm_module("l2", norm_eps=1e-5)
    x = torch.randn(3, 5, 16, dtype=torch.float32)
    x[0, 0] = 0.0
    h = x.double().numpy()
    want = norm.gain.item() * h / np.maximum(np.linalg.norm(h, axis=-1, keepdims=True), 1e-5)
    np.testing.assert_allclose(norm(None, x).numpy(), want, atol=1e-6, rtol=0)


@torch.no_grad()
def test_tanh_norm_is_dynamic_tanh():
    """Zhu et al. 2025, eq. 1: gamma * tanh(alpha * x) + beta, elementwise, in float64 numpy."""
    _, norm = norm_module("tanh")
    x = torch.randn(3, 5, 16)
    want = norm.weight.double().numpy() * np.tanh(norm.alpha.item() * x.double().numpy()) + norm.bias.double().numpy()
    np.testing.assert_allclose(norm(None, x).numpy(), want, atol=1e-6, rtol=0)


def test_norm_kinds_start_as_their_papers_say():
    """ScaleNorm's g starts at sqrt(d) (§2.2); dynamic tanh's alpha at 0.5, gamma ones, beta zeros
    (Zhu et al. 2025, §7)."""
    torch.manual_seed(0)
    scale = build_module(tiny(norm_type="l2")).get_submodule("decoder.norm")
    assert scale.gain.tolist() == pytest.approx([math.sqrt(16)])
    dyt = build_module(tiny(norm_type="tanh")).get_submodule("decoder.norm")
    assert dyt.alpha.tolist() == [0.5] and dyt.weight.eq(1).all() and dyt.bias.eq(0).all()


def test_tanh_norm_keeps_its_input_and_tanh_for_the_backward_pass():
    """What the op declares (``report --train``) against what PyTorch's autograd saves for the
    lowering: the input and tanh's output, each a float32 activation (parameters left out)."""
    model, norm = norm_module("tanh")
    activations = saved_bytes(model, norm, torch.randn(2, 5, 16, requires_grad=True))
    graph = build_graph(tiny(norm_type="tanh"))
    node = graph.node("decoder.layers.0.self_attn_norm")
    out = lambda name: 2 * 5 * 16 * 4  # noqa: E731 - every tensor here is one (2, 5, 16) float32 activation
    assert sum(definition("tanh_norm").saved(graph, node, {"B": 2, "T": 5}, out).values()) == activations


# --- against x-transformers ------------------------------------------------------------------

def copy_l2(xt_norm, copier, name):
    """x-transformers' ScaleNorm is sqrt(d) * (g_xt + offset) * x / ||x|| (its 2.x default stores
    the gain's offset from 1, ``unit_offset``): the paper's g is sqrt(d) * (g_xt + offset)."""
    copier.set(f"{name}.gain", (xt_norm.g + float(xt_norm.unit_offset)) * xt_norm.scale)


def copy_tanh(xt_norm, copier, name):
    """x-transformers' DynamicTanh stores alpha and gamma as offsets from their starts where
    ``unit_offset`` is on (its default): the values it multiplies by are the sums."""
    copier.set(f"{name}.alpha", (xt_norm.pre_tanh_scale + xt_norm.pre_tanh_scale_offset).reshape(1))
    copier.set(f"{name}.weight", xt_norm.gamma + xt_norm.gamma_offset)
    copier.set(f"{name}.bias", xt_norm.beta)


NORM_CASES = {"l2": (ref.Case({"use_scalenorm": True}, spec={"norm_type": "l2"}), copy_l2),
              "tanh": (ref.Case({"use_dynamic_tanh": True}, spec={"norm_type": "tanh", "norm_bias": True}), copy_tanh)}
"""x-transformers' option, tfspec's spelling and how the norm's parameters map."""


@pytest.mark.parametrize("kind", NORM_CASES)
def test_norm_kind_equals_x_transformers_in_torch_cached_and_onnx(kind, tmp_path):
    check(*NORM_CASES[kind][:1], tmp_path, NORM_CASES[kind][1])


@pytest.mark.parametrize("kind", NORM_CASES)
def test_norm_kind_changes_the_logits_from_layernorm(kind):
    """The same weights under LayerNorm (gains copied where they exist): other logits, so the
    kind is not silently lowered as LayerNorm."""
    differs(*NORM_CASES[kind])


@pytest.mark.parametrize("kind", NORM_CASES)
def test_norm_kind_parameters_and_flops_equal_x_transformers(kind):
    """tfspec's parameter count equals x-transformers' model's; its forward FLOPs equal what
    torch's counter sees x-transformers compute (the norms add no matrix products)."""
    counts_match(NORM_CASES[kind][0])


# --- refusals --------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, field, words", [
    ({"norm_type": "l2", "norm_bias": True}, "norm_bias", "norm_type l2 has no bias"),
    ({"norm_type": "l2", "norm_gain": False}, "norm_gain", "one parameter, its gain"),
    ({"norm_type": "rms", "norm_bias": True}, "norm_bias", "RMSNorm has no bias"),
    ({"norm_type": "tanh", "decoder": {"layers": 1, "block": [
        {"kind": "causal_self_attention", "qk_norm": "head"}, "ffn"]}},
     "decoder.block.0.qk_norm", "do not compute norm_type tanh"),
    ({"norm_type": "tanh", "positional": {"kind": "disentangled", "buckets": 4, "max_distance": 6, "table_norm": True},
      "family": "encoder-only", "decoder": None, "encoder": {"layers": 1, "block": ["self_attention", "ffn"]}},
     "positional.table_norm", "set table_norm: false"),
    ({"norm_type": "scale"}, "norm_type", "'layer', 'rms', 'l2' or 'tanh'"),
])
def test_norm_fields_that_do_not_fit_the_kind_are_field_errors(fields, field, words):
    with pytest.raises(ValidationError) as info:
        tiny(**fields)
    error = info.value.errors()[0]
    assert words in error["msg"]
    assert error.get("ctx", {}).get("field", ".".join(map(str, error["loc"]))) == field


def test_qk_norm_l2_needs_no_norm_kind_and_is_allowed_under_every_one():
    """``qk_norm: l2`` is RMS without a gain whatever the norm_type, so dynamic tanh allows it."""
    block = [{"kind": "causal_self_attention", "qk_norm": "l2"}, "ffn"]
    assert tiny(norm_type="tanh", decoder={"layers": 1, "block": block}).norm_type == "tanh"


# --- a learned gain on each sub-layer's output (LayerScale) ------------------------------------

def copy_layer_scale(xt, copier):
    """LayerScale's gamma, as it multiplies (x-transformers stores its offset from 1)."""
    for layer in ref.xt_layers(xt):
        scale = wrapper(layer.block, "LayerScale")
        copier.set(f"{layer.prefix}_gain.gain", scale.gamma + float(scale.unit_offset))


def layer_scale_hook(xt, copier):
    """The gammas moved off their start (0.1 everywhere) so that each feature's own gain shows."""
    with torch.no_grad():
        for layer in ref.xt_layers(xt):
            wrapper(layer.block, "LayerScale").gamma.add_(0.3 * torch.randn(ref.DIM))
    copy_layer_scale(xt, copier)


LAYER_SCALE = ref.Case({"use_layerscale": True, "layerscale_init_value": 0.1}, spec={"sublayer_gain": 0.1},
                       hooks=(layer_scale_hook,))
"""Touvron et al. 2021 (CaiT, §2): x + diag(lambda) f(Norm(x)), lambda per feature, here from 0.1."""


def test_sublayer_gain_is_layerscale_as_x_transformers_computes_it(tmp_path):
    """``sublayer_gain`` (LayerScale) against x-transformers' ``use_layerscale``: PyTorch, cached
    steps and ONNX within 1e-4; without it the logits move; each sub-layer has d_model gains."""
    check(LAYER_SCALE, tmp_path)
    differs(LAYER_SCALE)
    counts_match(LAYER_SCALE)


def test_sublayer_gain_starts_at_its_value_per_feature():
    """CaiT's lambda starts at epsilon for every feature (§2: 0.1 up to depth 18)."""
    torch.manual_seed(0)
    model = build_module(tiny(sublayer_gain=0.1))
    assert torch.equal(model.get_submodule("decoder.layers.1.ffn_gain").gain, torch.full((16,), 0.1))
