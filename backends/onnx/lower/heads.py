"""ONNX lowerings of the output side: the pre-softmax projection, the pooler, dense transforms and the
task heads' ops (``tfspec.spec.heads``), as the PyTorch backend's ``backends/torch/heads.py``
computes them."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node

from . import lowering
from .ffn import activation


@lowering("mean_pool")
def mean_pool(e, node: Node, x: str) -> str:
    """(B, S, d) -> (B, d): the mean over each sequence's non-padded positions."""
    b, pad = e.b, e.padding("S")
    if pad is None:
        return b.op("ReduceMean", x, b.ints(1), keepdims=0)
    keep = b.op("Unsqueeze", b.op("Cast", b.op("Not", pad), to=b.elem_type), b.ints(-1))  # (B, S, 1)
    total = b.op("ReduceSum", b.op("Mul", x, keep), b.ints(1), keepdims=0)
    count = b.op("Max", b.op("ReduceSum", keep, b.ints(1), keepdims=0), b.const(1.0))
    return b.op("Div", total, count)


@lowering("first")
def first(e, node: Node, x: str) -> str:
    """(B, S, d) -> (B, d): the first position."""
    return e.b.op("Gather", x, e.b.const(np.int64(0)), axis=1)


@lowering("projector")
def projector(e, node: Node, x: str) -> str:
    """x W^T + b: (B, d) -> (B, width), a pooled vector narrowed for the classifier."""
    return e.b.gemm(x, node.params["weight"], e.b.param(node.params["bias"]))


@lowering("classifier")
def classifier(e, node: Node, x: str) -> str:
    """logits = x W^T + b, for one vector per sequence (B, d) or one per position (B, S, d)."""
    p = node.params
    if len(node.shape) == 2:
        return e.b.gemm(x, p["weight"], e.b.param(p["bias"]))
    return e.b.linear(x, p["weight"], p["bias"])


@lowering("pooler")
def pooler(e, node: Node, x: str) -> str:
    """tanh(x_1 W^T + b) of the first position: (B, L, d) -> (B, d)."""
    b, p = e.b, node.params
    first = b.op("Gather", x, b.const(np.int64(0)), axis=1)
    return b.op("Tanh", b.gemm(first, p["w_pool"], b.param(p["b_pool"])))


@lowering("dense", rows=True)
def dense(e, node: Node, x: str) -> str:
    """act(x W^T + b) on each position, or on one vector per sequence (B, d) (a task head's transform)."""
    b, p = e.b, node.params
    if len(node.shape) == 2:
        y = b.gemm(x, p["weight"], b.param(p["bias"]) if "bias" in p else None)
    else:
        y = b.linear(x, p["weight"], p.get("bias"))
    return activation(b, y, node.attrs["activation"])


def next_rows(e, x: str, d: int) -> str:
    """The rows of ``x`` (flat, d wide) the output side reads: in step graphs, only the last
    position's, the next token's (B, d); elsewhere all of them."""
    if not e.variant.step or e.variant.every_position:
        return x
    b = e.b
    last = b.op("Slice", b.sequence(x, d), b.ints(-1), b.ints(np.iinfo(np.int64).max), b.ints(1))
    x = b.op("Reshape", last, b.ints(-1, d))
    b.flat.add(x)
    return x


@lowering("projection", rows=True)
def projection(e, node: Node, x: str) -> str:
    """The pre-softmax linear layer, its input times the spec's output_scale (T5: d_model^-0.5):
    flat (B * L, vocab) logits; in step graphs (B, vocab), the last position's only, or the
    shortlist's candidates' only (B, n) in the shortlist step graph (``variants.shortlist``)."""
    b, d = e.b, e.b.shape(node.params["weight"])[1]
    x = next_rows(e, x, d)
    if node.attrs["scale"] != 1.0:
        x = b.op("Mul", x, b.const(node.attrs["scale"]))
    weight, bias = node.params["weight"], node.params.get("bias")
    logits = e.variant.logits(e, x, weight, bias)
    if (cap := node.attrs.get("softcap")) is None:
        return logits
    return b.op("Mul", b.op("Tanh", b.op("Div", logits, b.const(float(cap)))), b.const(float(cap)))  # Gemma 2
