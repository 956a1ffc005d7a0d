"""The ONNX lowering of the IR ``moe`` op (``tfspec.layers.moe``), in standard operators, as
``MixtureOfExperts`` of the PyTorch backend computes it: the router's top_k probabilities
(float32 softmax over all E experts, renormalised when asked), then, expert by expert, only
the rows routed to it (NonZero, Gather) through its feed-forward network, scattered back
weighted (ScatterND with add). A token pays for top_k experts, and a decoding step reads the
weights of the experts its rows chose only: a step with one row runs top_k of E networks.
``tools/bench_moe.py`` times this against running every expert on every row."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tfspec.ir import Node

from .lowerings import activation, lowering


@lowering("moe")
def moe(e, node: Node, x: str) -> str:
    b, a, p = e.b, node.attrs, node.params
    d = b.weights[p["w_router"]].shape[1]
    flat = b.rows(x, d)  # (N, d)
    top, chosen = route(b, a, flat, p["w_router"])  # (N, k) weights and experts
    y = b.op("Mul", flat, b.const(0.0))  # (N, d) zeros, made from the input's shape
    for expert in range(a["experts"]):
        hit = b.op("Equal", chosen, b.const(np.int64(expert)))  # (N, k): at most one slot per row
        rows = b.op("NonZero", b.op("ReduceMax", b.op("Cast", hit, to=TensorProto.INT64), b.ints(1), keepdims=0))
        index = b.op("Transpose", rows)  # (M, 1): the rows routed to this expert
        weight = b.op("ReduceSum", b.op("Mul", b.op("GatherND", top, index),
                                        b.op("Cast", b.op("GatherND", hit, index), to=b.elem_type)), b.ints(1),
                      keepdims=1)  # (M, 1): its router weight in each row
        weights = [b.const(b.weights[p[role]][expert]) if p.get(role) else None for role in ("w_1", "w_3", "w_2")]
        out = _ffn(b, a, b.op("GatherND", flat, index), *weights)  # (M, d)
        y = b.op("ScatterND", y, index, b.op("Mul", out, weight), reduction="add")
    if "w_shared_1" in p:
        shared = _ffn(b, a, flat, *(b.param(p[r]) if r in p else None for r in ("w_shared_1", "w_shared_3",
                                                                                "w_shared_2")))
        if "w_shared_gate" in p:  # Qwen2-MoE: sigmoid(x w_gate) scales it
            shared = b.op("Mul", b.op("Sigmoid", b.linear(flat, p["w_shared_gate"])), shared)
        y = b.op("Add", y, shared)
    b.flat.add(y)
    return y if x in b.flat else b.sequence(y, d)


def route(b, a: dict, flat: str, router: str) -> tuple[str, str]:
    """(N, k) weights in the graph's float type and (N, k) expert ids: the top_k of the
    router's float32 softmax, divided by their sum with ``normalize`` (Mixtral)."""
    logits = b.linear(flat, router)
    if b.elem_type != TensorProto.FLOAT:
        logits = b.op("Cast", logits, to=TensorProto.FLOAT)
    top, chosen = b.op("TopK", b.op("Softmax", logits, axis=-1), b.ints(a["top_k"]), axis=-1, outputs=2)
    if a["normalize"]:
        top = b.op("Div", top, b.op("ReduceSum", top, b.ints(-1), keepdims=1))
    return (top if b.elem_type == TensorProto.FLOAT else b.op("Cast", top, to=b.elem_type)), chosen


def _ffn(b, a: dict, x: str, w_1: str, w_3: str | None, w_2: str) -> str:
    """act(x W1) (* x W3 when gated), then W2; weights in PyTorch's (out, in) layout, no biases."""
    def times(h, weight):
        return b.op("Gemm", h, weight, transB=1)
    h = activation(b, times(x, w_1), a["activation"])
    if w_3 is not None:
        h = b.op("Mul", h, times(x, w_3))
    return times(h, w_2)
