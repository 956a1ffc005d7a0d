"""Activation functions as ONNX ops, for every opset tfspec emits."""

from __future__ import annotations

import math


def activation(b, x: str, kind: str) -> str:
    """relu, gelu (erf), gelu_tanh, silu; opset 20 has Gelu, older opsets get its formula."""
    if kind == "relu":
        return b.op("Relu", x)
    if kind == "silu":
        return b.op("Mul", x, b.op("Sigmoid", x))
    if b.opset >= 20:
        return b.op("Gelu", x, approximate="tanh" if kind == "gelu_tanh" else None)
    if kind == "gelu":  # x/2 (1 + erf(x / sqrt 2))
        inner = b.op("Erf", b.op("Mul", x, b.const(1 / math.sqrt(2))))
    else:  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = b.op("Mul", b.op("Mul", x, x), x)
        inner = b.op("Tanh", b.op("Mul", b.op("Add", x, b.op("Mul", cube, b.const(0.044715))),
                                  b.const(math.sqrt(2 / math.pi))))
    return b.op("Mul", b.op("Mul", x, b.const(0.5)), b.op("Add", inner, b.const(1.0)))
