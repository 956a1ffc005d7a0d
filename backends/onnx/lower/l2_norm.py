"""ScaleNorm's ONNX lowering (``tfspec/norms/l2.py``), as the PyTorch backend: g * x /
max(||x||_2, eps), the norm in float32."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tfspec.ir import Node

from . import lowering


@lowering("l2_norm", rows=True)
def l2_norm(e, node: Node, x: str) -> str:
    b = e.b
    h = x if b.elem_type == TensorProto.FLOAT else b.op("Cast", x, to=TensorProto.FLOAT)
    norm = b.op("ReduceL2", h, b.ints(-1), keepdims=1)  # (rows, 1)
    h = b.op("Div", h, b.op("Max", norm, b.const(node.attrs["eps"], np.float32)))
    h = h if b.elem_type == TensorProto.FLOAT else b.op("Cast", h, to=b.elem_type)
    return b.op("Mul", h, b.param(node.params["gain"]))
