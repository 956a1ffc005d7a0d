"""ONNX lowerings of the task heads' ops (``tfspec.spec.heads``), as the PyTorch backend's
``backends/torch/heads.py`` computes them."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node

from .lowerings import lowering


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


@lowering("classifier")
def classifier(e, node: Node, x: str) -> str:
    """logits = x W^T + b, for one vector per sequence (B, d) or one per position (B, S, d)."""
    p = node.params
    if len(node.shape) == 2:
        return e.b.gemm(x, p["weight"], e.b.param(p["bias"]))
    return e.b.linear(x, p["weight"], p["bias"])
