"""ONNX lowerings of the position-wise layers: the feed-forward network (plain or gated) and
the dense layer of BERT's masked-LM head."""

from __future__ import annotations

from tfspec.ir import Node

from .activations import activation
from .lowerings import lowering


@lowering("ffn")
def ffn(e, node: Node, x: str) -> str:
    """act(x W1 + b1) W2 + b2 (eq. 2), or act(x W1 + b1) * (x W3 + b3) W2 + b2 when gated."""
    p = node.params
    h = activation(e.b, e.b.linear(x, p["w_1"], p.get("b_1")), node.attrs["activation"])
    if node.attrs.get("gated"):
        h = e.b.op("Mul", h, e.b.linear(x, p["w_3"], p.get("b_3")))
    return e.b.linear(h, p["w_2"], p.get("b_2"))


@lowering("dense")
def dense(e, node: Node, x: str) -> str:
    return activation(e.b, e.b.linear(x, node.params["weight"], node.params["bias"]), node.attrs["activation"])
