"""The ONNX lowering of the IR ``moe`` op (``tfspec.layers.moe``), in standard operators: the
router's top_k probabilities scattered into a dense (N, E) weight matrix, every expert run on
every position as one batched MatMul over an (E, ...) weight, and the outputs summed by those
weights. Exact and portable (no contrib MoE op), but it computes all E experts: E / top_k
times the FLOPs a token needs, which small-batch decoding hides better than long prompts.
Mirrors ``MixtureOfExperts`` of the PyTorch backend."""

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
    logits = b.linear(flat, p["w_router"])
    if b.elem_type != TensorProto.FLOAT:
        logits = b.op("Cast", logits, to=TensorProto.FLOAT)
    probs = b.op("Softmax", logits, axis=-1)  # (N, E), float32
    top, chosen = b.op("TopK", probs, b.ints(a["top_k"]), axis=-1, outputs=2)
    if a["normalize"]:
        top = b.op("Div", top, b.op("ReduceSum", top, b.ints(-1), keepdims=1))
    dense = b.op("ScatterElements", b.op("Mul", probs, b.const(np.float32(0))), chosen, top, axis=1)
    if b.elem_type != TensorProto.FLOAT:
        dense = b.op("Cast", dense, to=b.elem_type)
    every = _experts(b, a, flat, p["w_1"], p.get("w_3"), p["w_2"])  # (E, N, d)
    weighted = b.op("Mul", every, b.op("Unsqueeze", b.op("Transpose", dense, perm=[1, 0]), b.ints(2)))
    y = b.op("ReduceSum", weighted, b.ints(0), keepdims=0)  # (N, d)
    if "w_shared_1" in p:
        shared = _ffn(b, a, flat, p["w_shared_1"], p.get("w_shared_3"), p["w_shared_2"])
        if "w_shared_gate" in p:  # Qwen2-MoE: sigmoid(x w_gate) scales it
            shared = b.op("Mul", b.op("Sigmoid", b.linear(flat, p["w_shared_gate"])), shared)
        y = b.op("Add", y, shared)
    b.flat.add(y)
    return y if x in b.flat else b.sequence(y, d)


def _experts(b, a, x: str, w_1: str, w_3: str | None, w_2: str) -> str:
    """Every expert on every row: (N, d) -> (E, N, d) through (E, f, d) and (E, d, f) weights,
    stored transposed for MatMul."""
    def times(h, weight):
        return b.op("MatMul", h, b.const(np.ascontiguousarray(np.swapaxes(b.weights[weight], 1, 2))))
    h = activation(b, times(x, w_1), a["activation"])
    if w_3 is not None:
        h = b.op("Mul", h, times(x, w_3))
    return times(h, w_2)


def _ffn(b, a, x: str, w_1: str, w_3: str | None, w_2: str) -> str:
    h = activation(b, b.linear(x, w_1), a["activation"])
    if w_3 is not None:
        h = b.op("Mul", h, b.linear(x, w_3))
    return b.linear(h, w_2)
