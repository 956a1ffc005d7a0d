"""Attention built from registered stages (issue 28, item 2): every position kind that acts inside
attention is one stage or score term per backend, the two backends' stages agree, score modifiers
apply after the position terms, and plain rotary attention still takes the fused kernels.

References: a numpy computation of ALiBi + soft-capped attention by hand; onnxruntime against the
PyTorch backend through the export's parity check (full sequences, steps after pasts, greedy
decoding); which kernels run, counted on torch's own scaled_dot_product_attention and in the
ONNX graph (opset 23's fused Attention op).
"""

from __future__ import annotations

import typing

import numpy as np
import pytest
from pydantic import ValidationError
import torch

from tfspec import build_graph
from tfspec.backends.onnx import export
from tfspec.backends.onnx.lower import modifiers as onnx_modifiers, positions as onnx_positions, scores as onnx_scores
from tfspec.backends.onnx.graphs import emit
from tfspec.backends.torch import RunContext, TorchDecoder, build_module
from tfspec.backends.torch import modifiers as torch_modifiers, positions as torch_positions, scores as torch_scores
from tfspec.ir.positions import alibi_slopes
from tfspec.layers.attention import SCORE_MODIFIERS
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec
from tfspec.spec.positions import Positional

BASE = {"name": "m", "family": "decoder-only", "vocab": 100, "d_model": 32, "heads": 4, "d_ff": 48, "dropout": 0.0,
        "norm": "pre", "norm_type": "rms", "decoder": {"layers": 2, "block": ["causal_self_attention", "ffn"]}}
IN_ATTENTION = [kind for kind in typing.get_args(Positional.model_fields["kind"].annotation)
                if Positional.model_construct(kind=kind).in_attention]
"""Every position kind the schema lets into attention."""
POSITIONS = {"relative": {"max_distance": 3}, "relative_bias": {"buckets": 4, "max_distance": 6},
             "disentangled": {"buckets": 4, "max_distance": 6}}
"""Distances short enough that the test's 10-token inputs reach past the clipping."""


PATCHES = {"name": "m", "family": "encoder-only", "vocab": 4, "d_model": 32, "heads": 4, "d_ff": 48, "dropout": 0.0,
           "norm": "pre", "patches": {"image_size": 16, "patch_size": 4}}
"""The spec of a kind reading an image's patch grid (BEiT's relative_bias_2d): a 4 x 4 patch encoder."""


def spec(**fields) -> Spec:
    """BASE with ``fields``; for a kind that reads an image's patches, or that the causal blocks
    refuse (WavLM's gated bias attends both ways), the same blocks attending both ways in an
    encoder (over patches, or over tokens)."""
    kind = fields.get("positional", {}).get("kind")
    patches = kind is not None and Positional.model_construct(kind=kind).definition.over_patches
    if not patches:
        try:
            return Spec.model_validate(BASE | fields)
        except ValidationError:
            if kind is None:
                raise
    decoder = fields.pop("decoder", BASE["decoder"])
    block = [{**b, "kind": "self_attention"} if isinstance(b, dict) else b.removeprefix("causal_")
             for b in decoder["block"]]
    base = PATCHES if patches else {k: v for k, v in BASE.items() if k != "decoder"} | {"family": "encoder-only"}
    return Spec.model_validate(base | fields | {"encoder": {"layers": decoder["layers"], "block": block}})


def hooks(stage) -> tuple[bool, bool, bool]:
    return stage.turn is not None, stage.logits is not None, stage.output is not None


@pytest.mark.parametrize("kind", IN_ATTENTION)
def test_every_position_kind_is_one_stage_per_backend_and_both_agree(kind):
    """Registered once per backend (a position stage or a score term, not both), with the same
    hooks in both backends."""
    for stages, terms in ((torch_positions.POSITION_STAGES, torch_scores.SCORE_TERMS),
                          (onnx_positions.POSITION_STAGES, onnx_scores.SCORE_TERMS)):
        assert (kind in stages) != (kind in terms), kind
    node = next(n for n in build_graph(spec(positional={"kind": kind, **POSITIONS.get(kind, {})})).nodes()
                if n.op == "attention")
    assert hooks(torch_positions.stage_of(node)) == hooks(onnx_positions.stage_of(node))
    assert set(SCORE_MODIFIERS) <= set(torch_modifiers.SCORE_MODIFIERS) & set(onnx_modifiers.SCORE_MODIFIERS)


@pytest.mark.parametrize("kind", IN_ATTENTION)
def test_every_position_kind_with_a_softcap_exports_with_parity(kind, tmp_path):
    """Each position kind under a soft-cap low enough to bend the scores: onnxruntime equals the
    PyTorch backend on full sequences, steps after pasts and greedy tokens."""
    torch.manual_seed(0)
    capped = {"layers": 2, "block": [{"kind": "causal_self_attention", "softcap": 0.8}, "ffn"]}
    model = build_module(spec(positional={"kind": kind, **POSITIONS.get(kind, {})}, decoder=capped))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    result = export(model, tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]


def test_softcap_bounds_the_logits_after_the_position_terms():
    """One layer of ALiBi attention capped at c against numpy: c * tanh((q·k/sqrt(d_k) -
    slope * |i - j|) / c), causal, softmax, times V, through W^O: the cap bounds the whole logit."""
    c = 0.5
    s = spec(positional={"kind": "alibi", "max_len": 64}, norm="post", final_norm=False,
             decoder={"layers": 1, "block": [{"kind": "causal_self_attention", "softcap": c}]})
    attn = dict(build_module(s).named_modules())["decoder.layers.0.self_attn"]
    torch.manual_seed(0)
    for p in attn.parameters():
        p.data.normal_(0, 0.3)
    x = torch.randn(1, 7, 32)
    ours = attn(RunContext(training=False, padding={}), x)[0].detach().numpy().astype(np.float64)
    w, b = attn.w_qkv.detach().numpy().astype(np.float64), attn.b_qkv.detach().numpy().astype(np.float64)
    q, k, v = np.split(x[0].numpy() @ w.T + b, 3, axis=-1)
    i, j = np.arange(7)[:, None], np.arange(7)[None, :]
    outs = []
    for head, slope in enumerate(alibi_slopes(4)):
        cols = slice(8 * head, 8 * head + 8)
        scores = c * np.tanh((q[:, cols] @ k[:, cols].T / np.sqrt(8) - slope * np.abs(i - j)) / c)
        weights = np.exp(np.where(j <= i, scores, -np.inf))
        outs.append(weights / weights.sum(1, keepdims=True) @ v[:, cols])
    expected = np.concatenate(outs, 1) @ attn.w_o.detach().numpy().T + attn.b_o.detach().numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-5)


@pytest.mark.parametrize("fields,fused", [
    ({"positional": {"kind": "rotary", "max_len": 64}, "kv_heads": 2}, True),
    ({"positional": {"kind": "rotary", "max_len": 64}, "kv_heads": 2,
      "decoder": {"layers": 2, "block": [{"kind": "causal_self_attention", "qk_norm": "head", "clip": 4.0}, "ffn"]}},
     True),
    ({"positional": {"kind": "rotary", "max_len": 64},
      "decoder": {"layers": 2, "block": [{"kind": "causal_self_attention", "softcap": 5.0}, "ffn"]}}, False),
    ({"positional": {"kind": "relative", "max_distance": 4}}, False),
], ids=["rotary-gqa", "rotary-qk-norm-clip", "softcap", "relative"])
def test_plain_rotary_attention_takes_the_fused_kernels(fields, fused, monkeypatch):
    """Rotary positions and the projection options leave the scores alone: PyTorch runs its fused
    kernel once per layer on full sequences and on each cached step, and the opset-23 graph emits
    the fused Attention op per layer; a softcap or relative positions spell the scores out."""
    torch.manual_seed(0)
    model = build_module(spec(**fields)).eval()
    calls = []
    kernel = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *args, **kw: calls.append(1) or kernel(*args, **kw))
    tokens = torch.randint(4, 100, (2, 6))
    with torch.no_grad():
        model(tokens)
    assert len(calls) == (2 if fused else 0)
    calls.clear()
    search(TorchDecoder(model), None, SearchOptions(beam=1, max_length=3, min_length=3, max_extra=3),
           prefix=tokens[:, :4].numpy())  # the prompt, then 2 cached steps (the third token needs none)
    assert len(calls) == (2 * 3 if fused else 0)
    weights = {name: p.detach().numpy() for name, p in model.named_parameters()}
    ops = [n.op_type for n in emit(model.graph, "model", weights, opset=23).graph.node]
    assert ops.count("Attention") == (2 if fused else 0)
