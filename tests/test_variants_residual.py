"""Residual variants (issue 57, part B): LayerDrop (``layer_drop`` on a stack; Fan et al. 2019,
x-transformers' ``layer_dropout``) and hyper-connections (``residual_streams``; Zhu et al. 2024),
the latter against the paper's equations written out (x-transformers' ``num_residual_streams``
computes the later manifold-constrained variant, ``tfspec/spec/streams.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tests import xtransformers_reference as ref
from tests.variants_support import check, randomised, saved_bytes, tiny
from tfspec import build_graph
from tfspec.analysis.flops import analyze_flops
from tfspec.analysis.params import analyze_params
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import RunContext, build_module
from tfspec.backends.torch.model import DecodeState
from tfspec.backends.torch.registry import LOWERINGS
from tfspec.ir.ops import definition
from tfspec.spec import Spec


# --- LayerDrop: whole layers skipped in training ---------------------------------------------

LAYER_DROP = ref.Case({"layer_dropout": 0.5}, spec={"decoder": {
    "layers": ref.DEPTH, "block": ["causal_self_attention", "ffn"], "layer_drop": 0.5}})


def test_layer_drop_leaves_evaluation_as_x_transformers_computes_it(tmp_path):
    """Evaluation runs every layer: PyTorch, cached steps and ONNX equal x-transformers' (its
    ``layer_dropout`` in eval mode) within 1e-4."""
    check(LAYER_DROP, tmp_path)


def skipping(model, spec, dropped: set[int]):
    """An evaluation copy of ``model`` whose ``dropped`` layers are the identity, built without
    LayerDrop: pre-norm layers whose output projections (W^O, b^O, W2, b2) are zero add nothing."""
    copy = build_module(spec.model_copy(update={"decoder": spec.decoder.model_copy(update={"layer_drop": 0.0})}))
    copy.load_state_dict(model.state_dict())
    with torch.no_grad():
        for name, p in copy.named_parameters():
            if any(name.startswith(f"decoder.layers.{i}.") for i in dropped) and name.rsplit(".", 1)[1] in (
                    "w_o", "b_o", "w_2", "b_2"):
                p.zero_()
    return copy.eval()


@torch.no_grad()
def test_layer_drop_skips_whole_layers_at_its_rate_in_training():
    """Fan et al. 2019, §3: every training output is the model with some set of whole layers
    replaced by the identity (nothing rescaled); over 160 calls each layer is skipped at rate
    p = 0.5 (within 4.5 standard deviations), both together about p^2 of the time."""
    spec = tiny(dropout=0.0, decoder={"layers": 2, "block": ["causal_self_attention", "ffn"], "layer_drop": 0.5})
    model = randomised(build_module(spec)).train()
    ids = ref.tokens(2, 6)
    cases = [frozenset(s) for s in ({0, 1}, {0}, {1}, set())]
    want = {s: ref.logits_tf(skipping(model, spec, s), ids) for s in cases}
    assert all(np.abs(want[a] - want[b]).max() > 1e-3 for a in cases for b in cases if a != b)
    torch.manual_seed(1)
    seen = []
    for _ in range(160):
        got = model(ids).numpy()
        match = [s for s in cases if np.allclose(got, want[s], atol=1e-5, rtol=0)]
        assert len(match) == 1
        seen.append(match[0])
    sigma = 4.5 * math.sqrt(0.25 / 160)
    for layer in (0, 1):
        assert abs(np.mean([layer in s for s in seen]) - 0.5) < sigma
    assert abs(np.mean([len(s) == 2 for s in seen]) - 0.25) < 4.5 * math.sqrt(0.25 * 0.75 / 160)
    assert ref.logits_tf(model.eval(), ids) == pytest.approx(want[frozenset()], abs=1e-6)


def test_layer_drop_adds_no_parameters_or_flops_and_is_refused_with_act():
    plain = build_graph(tiny())
    dropped = build_graph(tiny(decoder={"layers": 2, "block": ["causal_self_attention", "ffn"], "layer_drop": 0.2}))
    assert analyze_params(dropped).total == analyze_params(plain).total
    assert analyze_flops(dropped, 9).forward == analyze_flops(plain, 9).forward
    assert dropped.masks_padding("decoder")
    assert tiny(decoder={"layers": 2, "block": ["causal_self_attention", "ffn"], "layer_drop": 0.2}) != tiny()
    with pytest.raises(ValidationError, match="layer_drop skips whole steps"):
        tiny(decoder={"layers": 2, "block": ["causal_self_attention", "ffn"], "shared": True,
                      "act": {"threshold": 0.99, "penalty": 0.01}, "layer_drop": 0.2})


# --- hyper-connections: n residual streams ------------------------------------------------------

def hyper(count: int = 3, dynamic: bool = True, **fields) -> Spec:
    return tiny(residual_streams={"count": count, "dynamic": dynamic}, **fields)


def paper_connections(H, p, n, norm_type="layer", eps=1e-5):
    """Zhu et al. 2024, §2.1-2.2, in float64 numpy for one sub-layer: H (R, n, d) -> A_m (R, n),
    A_r (R, n, n), B (R, n) with H_bar = norm(H) per stream (dynamic when ``p`` has w_m)."""
    R = H.shape[0]
    A_m, A_r, B = (np.broadcast_to(p[k], (R, *p[k].shape)).copy() for k in ("a_m", "a_r", "b"))
    if "w_m" in p:
        if norm_type == "layer":
            Hb = (H - H.mean(-1, keepdims=True)) / np.sqrt(H.var(-1, keepdims=True) + eps) * p["norm_weight"] \
                + p.get("norm_bias", 0.0)
        else:
            Hb = H / np.sqrt((H ** 2).mean(-1, keepdims=True) + eps) * p["norm_weight"]
        A_m = A_m + p["s_alpha"] * np.tanh(Hb @ p["w_m"])
        A_r = A_r + p["s_alpha"] * np.tanh(Hb @ p["w_r"])
        B = B + p["s_beta"] * np.tanh(Hb @ p["w_b"])
    return A_m, A_r, B


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("norm_type", ["layer", "rms"])
@torch.no_grad()
def test_streams_ops_are_the_papers_connections(dynamic, norm_type):
    """A sub-layer's reads h_0 = A_m^T H and writes H' = B^T y + A_r^T H, against numpy over
    random connections (the dynamic ones from norm(H))."""
    n, d = 3, 16
    model = randomised(build_module(hyper(n, dynamic, norm_type=norm_type)))
    ctx = RunContext(training=False, padding={})
    weights = model.get_submodule("decoder.layers.0.ffn_streams")
    read, write = (LOWERINGS[f"streams_{part}"](model.graph.node(f"decoder.layers.0.ffn_{part}"), model.graph)
                   for part in ("read", "write"))
    H, y = torch.randn(2, 5, n * d), torch.randn(2, 5, d)
    p = {name: t.double().numpy() for name, t in weights.named_parameters()}
    p = {k: (v.item() if v.size == 1 and k.startswith("s_") else v) for k, v in p.items()}
    Hn, yn = H.double().numpy().reshape(10, n, d), y.double().numpy().reshape(10, d)
    A_m, A_r, B = paper_connections(Hn, p, n, norm_type)
    w = weights(ctx, H)
    h0 = np.einsum("rk,rkd->rd", A_m, Hn)
    H1 = np.einsum("rkj,rkd->rjd", A_r, Hn) + B[..., None] * yn[:, None, :]
    np.testing.assert_allclose(read(ctx, H, w).numpy().reshape(10, d), h0, atol=1e-5, rtol=0)
    np.testing.assert_allclose(write(ctx, H, y, w).numpy().reshape(10, n, d), H1, atol=1e-5, rtol=0)


def hyper_case(count: int = 3, dynamic: bool = True) -> ref.Case:
    return ref.Case(spec={"residual_streams": {"count": count, "dynamic": dynamic}})


@torch.no_grad()
def paper_forward(model, spec, ids) -> np.ndarray:
    """The logits by the paper's loop (§2): n copies of the embeddings; per sub-layer its
    connections (``paper_connections``), h_0 = A_m^T H, y = T(Norm(h_0)) by tfspec's own
    sub-layer and norm modules, H = B^T y + A_r^T H; the streams' sum, the final norm, the
    projection."""
    ctx, n, d = RunContext(training=False, padding={}), spec.residual_streams.count, spec.d_model
    x = model.get_submodule("decoder.embed")(ctx, ids)
    H = np.repeat(x.double().numpy()[:, :, None, :], n, 2)  # (B, L, n, d)
    for name in (name for layer in spec.plan("decoder") for name in layer.names):
        p = {k: t.double().numpy() for k, t in model.get_submodule(f"{name}_streams").named_parameters()}
        p = {k: (v.item() if k.startswith("s_") else v) for k, v in p.items()}
        A_m, A_r, B = paper_connections(H.reshape(-1, n, d), p, n, spec.norm_type, spec.norm_eps)
        h0 = np.einsum("rk,rkd->rd", A_m, H.reshape(-1, n, d)).reshape(*H.shape[:2], d)
        h = model.get_submodule(f"{name}_norm")(ctx, torch.tensor(h0, dtype=torch.float32))
        y = model.get_submodule(name)(ctx, h).double().numpy().reshape(-1, d)
        H = (np.einsum("rkj,rkd->rjd", A_r, H.reshape(-1, n, d)) + B[..., None] * y[:, None, :]).reshape(H.shape)
    out = model.get_submodule("decoder.norm")(ctx, torch.tensor(H.sum(2), dtype=torch.float32))
    return model.get_submodule("output")(ctx, out).numpy()


@pytest.mark.parametrize("dynamic", [True, False])
def test_hyper_connections_equal_the_papers_loop_in_torch_cached_steps_and_onnx(dynamic, tmp_path):
    """Random connections (3 streams): tfspec's PyTorch logits, its KV-cached decoding one token
    a step and the ONNX export (its parity checks, then onnxruntime) equal the paper's loop."""
    case = hyper_case(3, dynamic)
    spec, ids = ref.spec(case), ref.tokens()
    model = randomised(build_module(spec))
    want = paper_forward(model, spec, ids)
    np.testing.assert_allclose(ref.logits_tf(model, ids), want, atol=ref.TOLERANCE, rtol=0)
    state, rows = DecodeState(), []
    with torch.no_grad():
        for t in range(ids.shape[1]):
            rows.append(model.run({"tgt": ids[:, t:t + 1]}, state=state)["logits"][:, -1].numpy())
    np.testing.assert_allclose(np.stack(rows, 1), want, atol=ref.TOLERANCE, rtol=0)
    result = export(model, tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]
    np.testing.assert_allclose(OnnxModel(tmp_path, device="cpu").logits(tgt=ids.numpy()), want,
                               atol=ref.TOLERANCE, rtol=0)


@torch.no_grad()
def test_hyper_connections_start_as_the_plain_residual_stream():
    """§2.3's start (A_m = e_{k mod n}, A_r = I, B = 1, W = 0): every stream carries x + f(x), so
    the logits equal those of the same weights with one stream (the final norm removes the
    streams' sum's factor n); with random connections they differ."""
    ids = ref.tokens()
    torch.manual_seed(0)
    wide = build_module(ref.spec(hyper_case(4))).eval()
    plain = build_module(ref.spec(ref.Case())).eval()
    plain.load_state_dict({k: v for k, v in wide.state_dict().items() if k in plain.state_dict()})
    np.testing.assert_allclose(ref.logits_tf(wide, ids), ref.logits_tf(plain, ids), atol=ref.TOLERANCE, rtol=0)
    randomised(wide)
    plain.load_state_dict({k: v for k, v in wide.state_dict().items() if k in plain.state_dict()})
    assert np.abs(ref.logits_tf(wide, ids) - ref.logits_tf(plain, ids)).max() > 1e-3


@pytest.mark.parametrize("dynamic", [True, False])
def test_hyper_connections_parameters_flops_and_saved_tensors(dynamic):
    """Per sub-layer n + n^2 + n static connections, dynamic adding the streams' norm (gain) and
    W_m, W_r, W_beta (d (n + 2)) and s_alpha, s_beta; FLOPs against torch's counter over the
    PyTorch model; what ``report --train`` declares for each op against what autograd keeps."""
    n, d, count = 3, ref.DIM, 2 * ref.DEPTH  # sub-layers
    spec, plain = ref.spec(hyper_case(n, dynamic)), ref.spec(ref.Case())
    graph = build_graph(spec)
    extra = n + n * n + n + ((d + d * (n + 2) + 2) if dynamic else 0)
    assert analyze_params(graph).total - analyze_params(build_graph(plain)).total == count * extra
    model = randomised(build_module(spec))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(ref.tokens(1, 9))
    assert analyze_flops(graph, 9).forward == pytest.approx(counter.get_total_flops(), rel=0.01)
    weights = model.get_submodule("decoder.layers.0.ffn_streams")
    ctx, sizes = RunContext(training=False, padding={}), {"B": 2, "T": 5}
    H, y = (torch.randn(2, 5, width, requires_grad=True) for width in (n * d, d))
    w, H2, y2 = weights(ctx, H), torch.cat([H, H]), torch.cat([y, y])
    w2 = weights(ctx, H2)  # static connections: one copy for every position, at any batch
    calls = {"streams": (weights, (H,), None), "read": (LOWERINGS["streams_read"], (H, w), (H2, w2)),
             "write": (LOWERINGS["streams_write"], (H, y, w), (H2, y2, w2))}
    for part, (fn, inputs, doubled) in calls.items():
        node = graph.node(f"decoder.layers.0.ffn_{part}")
        fn = fn if part == "streams" else fn(node, graph)
        declared = definition(node.op).saved(graph, node, sizes, lambda name: 4 * 2 * 5 * graph.node(name).shape[-1])
        assert sum(declared.values()) == saved_bytes(model, fn, *inputs, doubled=doubled), part


@pytest.mark.parametrize("fields, field", [
    ({"norm": "post"}, "residual_streams"),
    ({"norm_type": "l2"}, "residual_streams.dynamic"),
    ({"decoder": {"layers": 2, "block": ["causal_self_attention", "ffn"], "shared": True}}, "decoder.shared"),
])
def test_hyper_connections_refuse_what_they_cannot_carry(fields, field):
    with pytest.raises(ValidationError) as info:
        hyper(**fields)
    assert info.value.errors()[0]["ctx"]["field"] == field


@pytest.mark.parametrize("count", [0, 17])
def test_stream_count_is_bounded(count):
    with pytest.raises(ValidationError, match="count"):
        hyper(count)


def test_every_variant_here_trains_every_parameter():
    """One training step of a model with all of this issue's layer variants (dynamic streams,
    token shift, half steps, the FFN's inner norm, LayerScale; LayerDrop's skipped layers would
    get none): the loss is finite and every parameter gets a finite gradient."""
    block = [{"kind": "ffn", "step": 0.5, "token_shift": True}, {"kind": "causal_self_attention", "token_shift": True},
             {"kind": "ffn", "step": 0.5, "inner_norm": True}]
    spec = tiny(norm_type="rms", sublayer_gain=0.1, residual_streams={"count": 2},
                decoder={"layers": 2, "block": block})
    torch.manual_seed(0)
    model = build_module(spec).train()
    ids = ref.tokens(2, 7)
    loss = torch.nn.functional.cross_entropy(model(ids)[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    assert torch.isfinite(loss)
    missing = [name for name, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert missing == []
