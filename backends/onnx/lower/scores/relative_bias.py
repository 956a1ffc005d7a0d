"""T5's relative attention bias (``tfspec.layers.relative_bias``) in ONNX graphs, as the
PyTorch backend's ``RelativeBias``: the stack's table looked up by the bucket of each key's
distance from each query, built once per graph and shared by the layers tying the table. In
step graphs the queries are the last new_len of the past_len + new_len positions (``Emit.grid``)."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node
from tfspec.layers.relative_bias import ROLE, bucket_table

from . import score_term


@score_term("relative_bias")
def relative_bias(e, node: Node, q: str, k: str) -> str:
    """(1, h, Lq, Lk) logit bias for (B, h, Lq, d) queries and (B, h, Lk, d) keys."""
    def build():
        b, positions = e.b, node.attrs["positions"]
        reach = np.int64(positions["max_distance"])
        rows, cols = e.grid(node.shape[1], node.attrs["kv_seq"], q, k)
        distance = b.op("Add", b.op("Clip", b.op("Sub", cols, rows), b.const(-reach), b.const(reach)), b.const(reach))
        buckets = b.op("Gather", b.const(bucket_table(positions, node.layer.looks_ahead)), distance)  # (Lq, Lk)
        bias = b.op("Gather", b.param(node.params[ROLE]), buckets)  # (Lq, Lk, h)
        return b.op("Unsqueeze", b.op("Transpose", bias, perm=[2, 0, 1]), b.ints(0))
    return e.cached((ROLE, node.params[ROLE], node.layer), build)
