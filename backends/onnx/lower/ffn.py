"""The ONNX lowering of the position-wise feed-forward network (eq. 2), and the activations other
lowerings share."""

from __future__ import annotations

import math

from tfspec.ir import Node

from . import lowering
from .norms import normalize


def activation(b, x: str, kind: str) -> str:
    """relu, relu2 (squared), gelu (erf), gelu_tanh, silu, quick_gelu (x sigmoid(1.702 x)); opset 20
    has Gelu, older opsets get its formula."""
    if kind == "tanh":  # task heads' dense layers (RoBERTa's classifier)
        return b.op("Tanh", x)
    if kind in ("relu", "relu2"):
        y = b.op("Relu", x)
        return y if kind == "relu" else b.op("Mul", y, y)
    if kind in ("silu", "quick_gelu"):
        return b.op("Mul", x, b.op("Sigmoid", x if kind == "silu" else b.op("Mul", x, b.const(1.702))))
    if b.opset >= 20:
        return b.op("Gelu", x, approximate="tanh" if kind == "gelu_tanh" else None)
    if kind == "gelu":  # x/2 (1 + erf(x / sqrt 2))
        inner = b.op("Erf", b.op("Mul", x, b.const(1 / math.sqrt(2))))
    else:  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = b.op("Mul", b.op("Mul", x, x), x)
        inner = b.op("Tanh", b.op("Mul", b.op("Add", x, b.op("Mul", cube, b.const(0.044715))),
                                  b.const(math.sqrt(2 / math.pi))))
    return b.op("Mul", b.op("Mul", x, b.const(0.5)), b.op("Add", inner, b.const(1.0)))


@lowering("ffn", rows=True)
def ffn(e, node: Node, x: str) -> str:
    """act(x W1 + b1) W2 + b2 (eq. 2), or gated: act(x W1 + b1) * (x W3 + b3), then W2 + b2."""
    p = node.params
    h = activation(e.b, e.b.linear(x, p["w_1"], p.get("b_1")), node.attrs["activation"])
    if node.attrs["gated"]:
        h = e.b.op("Mul", h, e.b.linear(x, p["w_3"], p.get("b_3")))
    if norm := node.attrs.get("inner_norm"):  # NormFormer's norm over the d_ff features
        h = normalize(e.b, h, norm["kind"], norm["eps"], p.get("inner_norm"), p.get("inner_norm_bias"),
                      size=node.attrs["d_ff"])
    return e.b.linear(h, p["w_2"], p.get("b_2"))
