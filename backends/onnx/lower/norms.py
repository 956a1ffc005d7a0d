"""ONNX lowerings of LayerNorm and RMSNorm (``tfspec/ir/ops/norms.py``), and the normalisation other
lowerings share."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tfspec.ir import Node

from . import lowering


@lowering("layer_norm", rows=True)
def layer_norm(e, node: Node, x: str) -> str:
    p = node.params
    return normalize(e.b, x, "layer", node.attrs["eps"], p.get("weight"), p.get("bias"), node.shape[-1])


@lowering("rms_norm", rows=True)
def rms_norm(e, node: Node, x: str) -> str:
    return normalize(e.b, x, "rms", node.attrs["eps"], node.params.get("weight"), size=node.shape[-1])


def normalize(b, x: str, kind: str, eps: float, weight: str | None, bias: str | None = None,
              size: int | None = None) -> str:
    """LayerNorm, or RMSNorm: x / sqrt(mean(x^2) + eps) * weight in float32, as the PyTorch
    backend (the RMSNormalization op at opset 23, its formula before), over the last axis of
    ``size`` features; without a gain (``weight`` None) its scale is ones."""
    scale = b.param(weight) if weight is not None else b.const(np.ones(size))
    if kind == "layer":
        return b.op("LayerNormalization", x, scale, b.param(bias) if bias else None, axis=-1, epsilon=eps)
    if b.opset >= 23:
        return b.op("RMSNormalization", x, scale, axis=-1, epsilon=eps, stash_type=TensorProto.FLOAT)
    h = x if b.elem_type == TensorProto.FLOAT else b.op("Cast", x, to=TensorProto.FLOAT)
    mean_square = b.op("ReduceMean", b.op("Mul", h, h), b.ints(-1), keepdims=1)
    h = b.op("Div", h, b.op("Sqrt", b.op("Add", mean_square, b.const(eps, np.float32))))
    h = h if b.elem_type == TensorProto.FLOAT else b.op("Cast", h, to=b.elem_type)
    return h if weight is None else b.op("Mul", h, scale)
