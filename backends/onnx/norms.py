"""ONNX lowerings of the normalisations: LayerNorm (the paper's) and RMSNorm."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node

from .lowerings import lowering


@lowering("layer_norm")
def layer_norm(e, node: Node, x: str) -> str:
    p = node.params
    return e.b.op("LayerNormalization", x, e.b.param(p["weight"]), e.b.param(p["bias"]), axis=-1,
                  epsilon=node.attrs["eps"])


@lowering("rms_norm")
def rms_norm(e, node: Node, x: str) -> str:
    """x / sqrt(mean(x^2) + eps) * weight, in float32 even in fp16 graphs (as the PyTorch
    backend): squares of half-precision activations overflow. Opset 23's RMSNormalization
    would do the same in one op; the decomposition runs on every opset and runtime."""
    b = e.b
    y = b.op("Cast", x, to=1) if b.np_dtype != np.float32 else x
    mean = b.op("ReduceMean", b.op("Mul", y, y), b.ints(-1), keepdims=1)
    y = b.op("Div", y, b.op("Sqrt", b.op("Add", mean, b.const(np.float32(node.attrs["eps"]), np.float32))))
    if b.np_dtype != np.float32:
        y = b.op("Cast", y, to=10)
    return b.op("Mul", y, b.param(node.params["weight"]))
