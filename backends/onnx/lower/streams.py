"""Hyper-connections' ONNX lowerings (``tfspec/ir/ops/streams.py``), as the PyTorch backend, over
flat rows: the streams (R, n d), R = B * L, viewed as (R, n, d); the connections (R, n + n^2 + n)."""

from __future__ import annotations

from tfspec.ir import Node

from . import lowering
from .norms import normalize


def _streams(b, h: str, n: int, d: int) -> str:
    return b.op("Reshape", h, b.ints(-1, n, d))  # (R, n d) -> (R, n, d)


def _part(b, w: str, start: int, stop: int) -> str:
    return b.op("Slice", w, b.ints(start), b.ints(stop), b.ints(1))  # (R, stop - start)


@lowering("streams_expand", rows=True)
def streams_expand(e, node: Node, x: str) -> str:
    return e.b.op("Tile", x, e.b.ints(1, node.attrs["streams"]))  # (R, d) -> (R, n d)


@lowering("streams_merge", rows=True)
def streams_merge(e, node: Node, h: str) -> str:
    n, d = node.attrs["streams"], node.shape[-1]
    return e.b.op("ReduceSum", _streams(e.b, h, n, d), e.b.ints(1), keepdims=0)  # (R, d)


@lowering("streams_weights", rows=True)
def streams_weights(e, node: Node, h: str) -> str:
    b, p, a, n = e.b, node.params, node.attrs, node.attrs["streams"]
    d = e.graph.node(node.inputs[0]).shape[-1] // n
    if not a["dynamic"]:  # the static connections, one copy per row
        static = b.op("Concat", b.param(p["a_m"]), b.op("Reshape", b.param(p["a_r"]), b.ints(-1)), b.param(p["b"]),
                      axis=0)  # (n + n^2 + n,)
        shape = b.op("Concat", b.op("Shape", h, start=0, end=1), b.ints(n * (n + 2)), axis=0)
        return b.op("Expand", static, shape)  # (R, n + n^2 + n)
    normed = normalize(b, _streams(b, h, n, d), a["norm"]["kind"], a["norm"]["eps"], p.get("norm_weight"),
                       p.get("norm_bias"), size=d)  # (R, n, d)
    w = b.op("Concat", b.op("Unsqueeze", b.param(p["w_m"]), b.ints(1)), b.param(p["w_r"]),
             b.op("Unsqueeze", b.param(p["w_b"]), b.ints(1)), axis=1)  # (d, n + 2)
    t = b.op("Tanh", b.op("MatMul", normed, w))  # (R, n, n + 2)
    a_m = b.op("Add", b.param(p["a_m"]), b.op("Mul", b.param(p["s_alpha"]), _column(b, t, 0, 1, n)))
    a_r = b.op("Add", b.param(p["a_r"]), b.op("Mul", b.param(p["s_alpha"]), _slice(b, t, 1, n + 1)))
    b_ = b.op("Add", b.param(p["b"]), b.op("Mul", b.param(p["s_beta"]), _column(b, t, n + 1, n + 2, n)))
    return b.op("Concat", a_m, b.op("Reshape", a_r, b.ints(-1, n * n)), b_, axis=1)  # (R, n + n^2 + n)


def _slice(b, t: str, start: int, stop: int) -> str:
    return b.op("Slice", t, b.ints(start), b.ints(stop), b.ints(2))  # (R, n, stop - start)


def _column(b, t: str, start: int, stop: int, n: int) -> str:
    return b.op("Reshape", _slice(b, t, start, stop), b.ints(-1, n))  # (R, n)


@lowering("streams_read", rows=True)
def streams_read(e, node: Node, h: str, w: str) -> str:
    b, n, d = e.b, node.attrs["streams"], node.shape[-1]
    a_m = b.op("Unsqueeze", _part(b, w, 0, n), b.ints(1))  # (R, 1, n)
    return b.op("Reshape", b.op("MatMul", a_m, _streams(b, h, n, d)), b.ints(-1, d))  # (R, d)


@lowering("streams_write", rows=True)
def streams_write(e, node: Node, h: str, y: str, w: str) -> str:
    b, n, scale = e.b, node.attrs["streams"], node.attrs["scale"]
    d = node.shape[-1] // n
    a_r = b.op("Reshape", _part(b, w, n, n + n * n), b.ints(-1, n, n))  # (R, n, n)
    mixed = b.op("MatMul", b.op("Transpose", a_r, perm=[0, 2, 1]), _streams(b, h, n, d))  # (R, n, d)
    y = y if scale == 1.0 else b.op("Mul", y, b.const(scale))
    written = b.op("Mul", b.op("Unsqueeze", _part(b, w, n + n * n, 2 * n + n * n), b.ints(2)),
                   b.op("Unsqueeze", y, b.ints(1)))  # (R, n, 1) * (R, 1, d)
    return b.op("Reshape", b.op("Add", mixed, written), b.ints(-1, n * d))  # (R, n d)
