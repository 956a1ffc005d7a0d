"""The mixture of softmaxes' ONNX lowering (``tfspec/spec/softmax_mixture.py``), as
``backends/torch/softmax_mixture.py`` computes it."""

from __future__ import annotations

from tfspec.ir import Node

from . import lowering
from .heads import next_rows


@lowering("softmax_mixture", rows=True)
def softmax_mixture(e, node: Node, x: str) -> str:
    """Flat (N, d) rows -> (N, vocab) log sum_k pi_k softmax(act(h W_k^T) w^T + b): the K
    components as N K rows through the token projection (the variant's: a shortlist's candidates
    only, each component's softmax then over them), a stable logsumexp over k."""
    b, a, p = e.b, node.attrs, node.params
    k, width = a["components"], b.shape(p["weight"])[1]
    x = next_rows(e, x, width)
    h = b.gemm(x, p["components"])  # (N, K w)
    h = b.op("Tanh", h) if a["activation"] == "tanh" else h
    h = b.op("Reshape", h, b.ints(-1, width))  # (N K, w): component k of row r at r K + k
    b.flat.add(h)
    if a["scale"] != 1.0:
        h = b.op("Mul", h, b.const(a["scale"]))
    log_p = b.op("LogSoftmax", e.variant.logits(e, h, p["weight"], p.get("bias")), axis=-1)  # (N K, V)
    columns = b.op("Shape", log_p, start=1, end=2)
    log_p = b.op("Reshape", log_p, b.op("Concat", b.ints(-1, k), columns, axis=0))  # (N, K, V)
    log_prior = b.op("LogSoftmax", b.gemm(x, p["prior"]), axis=-1)  # (N, K)
    joint = b.op("Add", log_p, b.op("Unsqueeze", log_prior, b.ints(-1)))
    top = _over_components(b, "ReduceMax", joint, keep=True)  # (N, 1, V): exp never overflows
    total = _over_components(b, "ReduceSum", b.op("Exp", b.op("Sub", joint, top)))
    out = b.op("Add", b.op("Squeeze", top, b.ints(1)), b.op("Log", total))  # (N, V)
    b.flat.add(out)
    return out


def _over_components(b, op: str, x: str, keep: bool = False) -> str:
    """``op`` over axis 1 (the components); ReduceMax takes its axes as an input from opset 18."""
    if op == "ReduceMax" and b.opset < 18:
        return b.op(op, x, axes=[1], keepdims=int(keep))
    return b.op(op, x, b.ints(1), keepdims=int(keep))
