"""The ONNX lowering of the IR ``moe`` op (``tfspec.layers.moe``), in standard operators, as
``MixtureOfExperts`` of the PyTorch backend computes it: the router's top_k probabilities
(float32 softmax or sigmoid scores, chosen among groups and with a bias as DeepSeek-V3 does, renormalised
and scaled when asked), then, expert by expert, only the rows routed to it (NonZero, Gather) through its
feed-forward network, scattered back weighted (ScatterND with add). A token pays for top_k experts, and a
decoding step reads the weights of the experts its rows chose only: a step with one row runs top_k of E
networks. Switch's expert capacity (a CumSum along the sequence) drops the positions past it.
``tools/bench/bench_moe.py`` times this against running every expert on every row."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tfspec.ir import Node

from . import lowering
from .ffn import activation


@lowering("moe")
def moe(e, node: Node, x: str) -> str:
    b, a, p = e.b, node.attrs, node.params
    d = b.weights[p["w_router"]].shape[1]
    flat = b.rows(x, d)  # (N, d)
    top, chosen = route(b, a, flat, p["w_router"], p.get("score_bias"), p.get("b_router"))  # (N, k) weights and experts
    kept = _within_capacity(b, a["experts"], chosen, a["capacity"]) if a.get("capacity") else None
    y = b.op("Mul", flat, b.const(0.0))  # (N, d) zeros, made from the input's shape
    for expert in range(a["experts"]):
        hit = b.op("Equal", chosen, b.const(np.int64(expert)))  # (N, k): at most one slot per row
        if kept is not None:
            hit = b.op("And", hit, kept)
        rows = b.op("NonZero", b.op("ReduceMax", b.op("Cast", hit, to=TensorProto.INT64), b.ints(1), keepdims=0))
        index = b.op("Transpose", rows)  # (M, 1): the rows routed to this expert
        weight = b.op("ReduceSum", b.op("Mul", b.op("GatherND", top, index),
                                        b.op("Cast", b.op("GatherND", hit, index), to=b.elem_type)), b.ints(1),
                      keepdims=1)  # (M, 1): its router weight in each row
        biases = [b.const(b.weights[p[role]][expert]) if p.get(role) else None for role in ("b_1", "b_2", "b_3")]
        matrices = (p["w_1"], p.get("w_3"), p["w_2"])
        routed = b.op("GatherND", flat, index)  # (M, d)
        if a.get("input_weighted"):  # Llama 4: expert(p x)
            out = _ffn(b, a, b.op("Mul", routed, weight), *matrices, *biases, expert=expert)
        else:
            out = b.op("Mul", _ffn(b, a, routed, *matrices, *biases, expert=expert), weight)
        y = b.op("ScatterND", y, index, out, reduction="add")
    if "w_shared_1" in p:
        shared = _ffn(b, a, flat, *(p.get(r) for r in ("w_shared_1", "w_shared_3", "w_shared_2")))
        if "w_shared_gate" in p:  # Qwen2-MoE: sigmoid(x w_gate) scales it
            shared = b.op("Mul", b.op("Sigmoid", b.linear(flat, p["w_shared_gate"])), shared)
        y = b.op("Add", y, shared)
    b.flat.add(y)
    return y if x in b.flat else b.sequence(y, d)


def route(b, a: dict, flat: str, router: str, score_bias: str | None = None,
          router_bias: str | None = None) -> tuple[str, str]:
    """(N, k) weights in the graph's float type and (N, k) expert ids, in float32: the router's
    softmax (or sigmoid) scores of the top_k experts ``_choose`` picks, divided by their sum
    (with DeepSeek-V3's 1e-20 floor) with ``normalize``, times ``routed_scale``."""
    logits = b.linear(flat, router, router_bias)
    if b.elem_type != TensorProto.FLOAT:
        logits = b.op("Cast", logits, to=TensorProto.FLOAT)
    scores = b.op("Softmax", logits, axis=-1) if a["scoring"] != "sigmoid" else b.op("Sigmoid", logits)
    chosen = _choose(b, a, scores, score_bias)
    top = b.op("GatherElements", scores, chosen, axis=1) if a["scoring"] != "sparsemixer" else \
        _mixed(b, a, logits, chosen)
    if a["normalize"]:
        top = b.op("Div", top, b.op("Add", b.op("ReduceSum", top, b.ints(-1), keepdims=1), _f32(b, 1e-20)))
    if a["routed_scale"] != 1:
        top = b.op("Mul", top, _f32(b, a["routed_scale"]))
    return (top if b.elem_type == TensorProto.FLOAT else b.op("Cast", top, to=b.elem_type)), chosen


def _choose(b, a: dict, scores: str, score_bias: str | None) -> str:
    """(N, k) expert ids: the top_k of the scores plus the score bias, among the top_groups
    groups whose two best sum highest (DeepSeek-V3), as the PyTorch backend's ``_choose``."""
    if score_bias is not None:
        scores = b.op("Add", scores, b.const(b.weights[score_bias], dtype=np.float32))
    groups, top_groups = a["groups"], a["top_groups"]
    if top_groups < groups:
        grouped = b.op("Reshape", scores, b.ints(0, groups, -1))  # (N, G, E / G)
        best = b.op("ReduceSum", b.op("TopK", grouped, b.ints(2), axis=-1, outputs=2)[0], b.ints(-1),
                    keepdims=0)  # (N, G): each group's two best scores summed
        picked = b.op("TopK", best, b.ints(top_groups), axis=-1, outputs=2)[1]  # (N, top_groups)
        ones = b.op("Add", b.op("Mul", b.op("Cast", picked, to=TensorProto.FLOAT), _f32(b, 0.0)), _f32(b, 1.0))
        keep = b.op("ScatterElements", b.op("Mul", best, _f32(b, 0.0)), picked, ones, axis=1)  # (N, G): 1 kept
        keep = b.op("Unsqueeze", b.op("Cast", keep, to=TensorProto.BOOL), b.ints(-1))
        grouped = b.op("Where", keep, grouped, _f32(b, -np.inf))
        scores = b.op("Reshape", grouped, b.ints(0, -1))
    return b.op("TopK", scores, b.ints(a["top_k"]), axis=-1, outputs=2)[1]


def _mixed(b, a: dict, logits: str, chosen: str) -> str:
    """(N, k) SparseMixer weights, as the PyTorch backend's ``_mixed``: for the t-th chosen expert,
    1 / the sum of exp(s - s_t) over the experts not chosen before it within 2 eps of s_t."""
    weights, earlier, experts = [], None, b.const(np.arange(a["experts"], dtype=np.int64))
    for t in range(a["top_k"]):
        index = b.op("Slice", chosen, b.ints(t), b.ints(t + 1), b.ints(1))  # (N, 1)
        top = b.op("GatherElements", logits, index, axis=1)
        far = b.op("Greater", b.op("Div", b.op("Sub", top, logits), b.op("Max", b.op("Abs", logits), top)),
                   _f32(b, 2 * a["mixer_eps"]))
        hidden = far if earlier is None else b.op("Or", far, earlier)
        near = b.op("Where", hidden, _f32(b, 0.0), b.op("Exp", b.op("Sub", logits, top)))
        weights.append(b.op("Reciprocal", b.op("ReduceSum", near, b.ints(-1), keepdims=1)))
        this = b.op("Equal", index, experts)  # (N, E): the t-th choice
        earlier = this if earlier is None else b.op("Or", earlier, this)
    return b.op("Concat", *weights, axis=1)


def _within_capacity(b, experts: int, chosen: str, capacity: int) -> str:
    """(N, 1) bool: whether the position's top-1 expert took fewer than ``capacity`` earlier
    positions of its sequence (the PyTorch backend's ``_within_capacity``): the one-hot choices
    reshaped to (B, L, E) and summed cumulatively along the sequence."""
    routed = b.op("Cast", b.op("Equal", chosen, b.const(np.arange(experts, dtype=np.int64))),
                  to=TensorProto.INT64)  # (N, E)
    counts = b.op("CumSum", b.op("Reshape", routed, b.batched(-1, experts)), b.const(np.int64(1)))  # (B, L, E)
    rank = b.op("ReduceSum", b.op("Mul", b.op("Reshape", counts, b.ints(-1, experts)), routed), b.ints(1),
                keepdims=1)  # (N, 1): 1 for an expert's first position
    return b.op("LessOrEqual", rank, b.const(np.int64(capacity)))


def _f32(b, value: float) -> str:
    return b.const(np.float32(value), dtype=np.float32)


def _ffn(b, a: dict, x: str, w_1: str, w_3: str | None, w_2: str, b_1: str | None = None,
         b_2: str | None = None, b_3: str | None = None, expert: int | None = None) -> str:
    """act(x W1 + b1) (* (x W3 + b3) when gated), then W2 (+ b2): ``w_*`` the IR parameters, in
    PyTorch's (out, in) layout, or with ``expert`` that routed expert's matrices of them (then
    clamped and shifted as the PyTorch backend's ``_ffn``); ``b_*`` the biases' graph values."""
    routed = expert is not None

    def times(h, weight, bias=None):
        if not routed:
            return b.gemm(h, weight, bias)
        return b.gemm(h, f"{weight}.{expert}", bias, make=lambda: b.weights[weight][expert])
    gate = times(x, w_1, b_1)
    if w_3 is None:
        return times(activation(b, gate, a["activation"]), w_2, b_2)
    up, limit, shift = times(x, w_3, b_3), a.get("glu_limit"), a.get("glu_shift", 0.0)
    if routed and limit is not None:
        gate, up = b.op("Min", gate, b.const(float(limit))), b.op("Clip", up, b.const(-float(limit)),
                                                                     b.const(float(limit)))
    if routed and shift:
        up = b.op("Add", up, b.const(float(shift)))
    return times(b.op("Mul", activation(b, gate, a["activation"]), up), w_2, b_2)
