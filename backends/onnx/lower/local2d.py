"""Local 2D attention (``tfspec.layers.local2d``) in ONNX graphs: each query block of h x w
image positions against its memory block, gathered with two ``Gather`` ops (block rows, then
block columns), so work and memory grow with the number of positions. The length stays
dynamic: the number of block rows is computed from it. Mirrors ``backends/torch/local2d.py``."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node

from .attention import attend, tiled
from ..builder import Index


@tiled("local_2d_self_attention")
def local_2d(e, node: Node, q: str, k: str, v: str) -> str:
    """(B, L, h*d) queries and (B, L, g*d) keys and values -> (B, L, h*d_v)."""
    b, a, layer = e.b, node.attrs, node.layer
    h, g, d_k, d_v = a["heads"], a["kv_heads"], a["d_k"], a["d_v"]
    (bh, bw), W = layer.block, layer.row
    cols, length = -(-W // bw), b.shape_of(q, 1)
    rows = _ceil(b, _ceil(b, length, W), bh)  # block rows (int64 scalar)
    queries = b.op("Reshape", _frame(b, layer, q, h * d_k, rows, False), b.ints(0, -1, bh, cols, bw, h, d_k))
    queries = b.op("Reshape", b.op("Transpose", queries, perm=[0, 1, 3, 5, 2, 4, 6]), b.ints(-1, h, bh * bw, d_k))
    keys, values = (_heads_first(b, layer, _gather(b, layer, _frame(b, layer, t, g * size, rows, True), rows), g, size)
                    for t, size in ((k, d_k), (v, d_v)))
    mask = e.cached(("local2d", layer, node.shape[1]), lambda: _mask(e, node, rows, length))  # shared by layers
    y = attend(b, queries, keys, values, mask, node)  # (B * blocks, h, bh*bw, d_v)
    y = b.op("Reshape", y, b.op("Concat", b.batch, b.ints(-1, cols, h, bh, bw, d_v), axis=0))
    y = b.op("Reshape", b.op("Transpose", y, perm=[0, 1, 4, 2, 5, 3, 6]), b.ints(0, -1, cols * bw, h * d_v))
    y = b.op("Reshape", b.op("Slice", y, b.ints(0), b.ints(W), b.ints(2)), b.ints(0, -1, h * d_v))
    return b.op("Slice", y, b.ints(0), b.op("Unsqueeze", length, b.ints(0)), b.ints(1))


def _ceil(b, x: str, by: int) -> str:
    return b.op("Div", b.op("Add", x, b.const(np.int64(by - 1))), b.const(np.int64(by)))


def _frame(b, layer, x: str, features: int, rows: str, flange: bool, fill=None) -> str:
    """(B, L, F) in raster order -> (B, frame rows, frame columns, F): the image grid of whole
    block rows and columns, missing positions and (with ``flange``) the memory flange around it
    filled with ``fill`` (zeros by default)."""
    (bh, bw), (h_m, w_m), W = layer.block, layer.memory if flange else (0, 0), layer.row
    missing = b.op("Sub", b.op("Mul", rows, b.const(np.int64(bh * W))), b.shape_of(x, 1))
    x = b.op("Pad", x, b.op("Concat", b.ints(0), b.op("Unsqueeze", missing, b.ints(0)), axis=0), fill, b.ints(1))
    x = b.op("Reshape", x, b.ints(0, -1, W, features))
    below = h_m if flange and not layer.causal else 0
    right = w_m + (-(-W // bw)) * bw - W
    return b.op("Pad", x, b.ints(h_m, w_m, below, right), fill, b.ints(1, 2))


def _gather(b, layer, frame: str, rows: str) -> str:
    """(B, frame rows, frame columns, F) -> (B, block rows, rows_seen, block columns, cols_seen,
    F): every query block's memory block."""
    (bh, bw), W = layer.block, layer.row
    starts = b.op("Mul", b.op("Range", b.const(np.int64(0)), rows, b.const(np.int64(1))), b.const(np.int64(bh)))
    row_index = b.op("Add", b.op("Unsqueeze", starts, b.ints(1)),
                     b.const(np.arange(layer.rows_seen, dtype=np.int64)[None]))  # (R, rows_seen)
    col_index = (np.arange(-(-W // bw))[:, None] * bw + np.arange(layer.cols_seen)[None]).astype(np.int64)
    return b.op("Gather", b.op("Gather", frame, row_index, axis=1), b.const(col_index), axis=3)


def _heads_first(b, layer, blocks: str, heads: int, size: int) -> str:
    """(B, R, rows_seen, C, cols_seen, heads*size) -> (B * blocks, heads, memory block, size)."""
    split = b.op("Reshape", blocks, b.ints(0, 0, 0, 0, 0, heads, size))
    return b.op("Reshape", b.op("Transpose", split, perm=[0, 1, 3, 5, 2, 4, 6]),
                b.ints(-1, heads, layer.rows_seen * layer.cols_seen, size))


def _mask(e, node: Node, rows: str, length: str) -> str:
    """Additive (B * blocks, 1, h*w, memory block): the kind's ``visible`` on each block's true
    positions, keys outside the image or padded hidden; queries outside the image see their
    whole memory block (their outputs are dropped), as the PyTorch backend's mask."""
    b, layer = e.b, node.layer
    (bh, bw), (h_m, w_m), W = layer.block, layer.memory, layer.row
    cols, seen = -(-W // bw), (layer.rows_seen, layer.cols_seen)
    top = b.op("Mul", b.op("Range", b.const(np.int64(0)), rows, b.const(np.int64(1))), b.const(np.int64(bh)))
    top = Index(b, b.op("Unsqueeze", top, b.ints(1, 2, 3)))  # (R, 1, 1, 1)
    left = np.arange(cols).reshape(1, cols, 1, 1) * bw
    qr = top + Index(b, b.const(np.repeat(np.arange(bh), bw).reshape(1, 1, -1, 1).astype(np.int64)))
    qc = Index(b, b.const((left + np.tile(np.arange(bw), bh).reshape(1, 1, -1, 1)).astype(np.int64)))
    kr = top + Index(b, b.const((np.repeat(np.arange(seen[0]), seen[1]) - h_m).reshape(1, 1, 1, -1).astype(np.int64)))
    kc_values = left - w_m + np.tile(np.arange(seen[1]), seen[0]).reshape(1, 1, 1, -1)
    kc = Index(b, b.const(kc_values.astype(np.int64)))
    q, k, n = qr * W + qc, kr * W + kc, Index(b, length)
    inside = (kr >= 0) & Index(b, b.const((kc_values >= 0) & (kc_values < W))) & (k < n)
    mask = (layer.visible(q, k) & inside) | ~((qc < W) & (q < n))
    mask = b.op("Where", mask.name, b.const(0.0), b.neg())  # (R, C, h*w, M)
    mask = b.op("Reshape", mask, b.ints(1, -1, bh * bw, seen[0] * seen[1]))  # (1, blocks, h*w, M)
    pad = e.padding(node.shape[1])
    if pad is not None:
        bias = b.op("Unsqueeze", b.op("Where", pad, b.neg(), b.const(0.0)), b.ints(2))  # (B, L, 1)
        bias = _gather(b, layer, _frame(b, layer, bias, 1, rows, True, b.neg()), rows)  # (B, R, rs, C, cs, 1)
        bias = b.op("Reshape", b.op("Transpose", bias, perm=[0, 1, 3, 5, 2, 4]), b.ints(0, -1, 1, seen[0] * seen[1]))
        mask = b.op("Add", mask, bias)
    return b.op("Reshape", b.op("Expand", mask, b.op("Concat", b.batch, b.ints(1, 1, 1), axis=0)),
                b.ints(-1, 1, bh * bw, seen[0] * seen[1]))
