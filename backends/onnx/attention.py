"""The ONNX lowering of the IR ``attention`` op, for every attention kind.

Opset 18 spells attention out (MatMul, Softmax, MatMul); opset 23 emits the fused
``Attention`` op. Either way the kind's mask comes from its own ``visible(q, k)`` (see
``graphs.Emit.mask``), step graphs append new keys/values to the past ones they are fed, and
cross-attention in a step graph reads keys/values the encoder graph computed once.
"""

from __future__ import annotations

import math

from tfspec.ir import Node

from .lowerings import lowering


def split_heads(b, x: str, heads: int, size: int) -> str:
    """(B, L, h*size) -> (B, h, L, size)."""
    return b.op("Transpose", b.op("Reshape", x, b.ints(0, 0, heads, size)), perm=[0, 2, 1, 3])


def project_kv(b, node: Node, memory: str) -> tuple[str, str]:
    """Cross-attention keys and values of the encoder output: (B, h, S, d_k), (B, h, S, d_v)."""
    a, p = node.attrs, node.params
    h, d_k, d_v = a["heads"], a["d_k"], a["d_v"]
    k, v = b.op("Split", b.linear(memory, p["w_kv"], p.get("b_kv")), b.ints(h * d_k, h * d_v), axis=-1, outputs=2)
    return split_heads(b, k, h, d_k), split_heads(b, v, h, d_v)


@lowering("attention")
def attention(e, node: Node, x: str, memory: str | None = None) -> str:
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (§3.2.2)."""
    b, a, p = e.b, node.attrs, node.params
    h, d_k, d_v = a["heads"], a["d_k"], a["d_v"]
    if node.layer.needs_memory:
        q = b.linear(x, p["w_q"], p.get("b_q"))
        if e.kind == "step":  # computed by the encoder graph
            k = e.state(node, "key", ["batch", h, "src_len", d_k], prefix="cross")
            v = e.state(node, "value", ["batch", h, "src_len", d_v], prefix="cross")
        else:
            k, v = project_kv(b, node, memory)
    else:
        q, k, v = b.op("Split", b.linear(x, p["w_qkv"], p.get("b_qkv")), b.ints(h * d_k, h * d_k, h * d_v),
                       axis=-1, outputs=3)
        k, v = split_heads(b, k, h, d_k), split_heads(b, v, h, d_v)
        if e.carries(node):  # keys and values of earlier positions, then these
            k = b.op("Concat", e.state(node, "key", ["batch", h, "past_len", d_k]), k, axis=2)
            v = b.op("Concat", e.state(node, "value", ["batch", h, "past_len", d_v]), v, axis=2)
            k = e.present(node, "key", k, ["batch", h, "total_len", d_k])
            v = e.present(node, "value", v, ["batch", h, "total_len", d_v])
    q = split_heads(b, q, h, d_k)  # (B, h, Lq, d_k)
    mask = e.mask(node.layer, node.shape[1], a["kv_seq"], q, k)
    if b.opset >= 23:
        if mask is not None:  # onnxruntime's CPU kernel wants the mask as (B, 1, Lq, Lk)
            full = b.op("Concat", b.op("Shape", q, start=0, end=1), b.ints(1), b.op("Shape", q, start=2, end=3),
                        b.op("Shape", k, start=2, end=3), axis=0)
            mask = b.op("Expand", mask, full)
        y = b.op("Attention", q, k, v, mask)
    else:
        scores = b.op("MatMul", b.op("Mul", q, b.const(1 / math.sqrt(d_k))), b.op("Transpose", k, perm=[0, 1, 3, 2]))
        if mask is not None:
            scores = b.op("Add", scores, mask)
        y = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)  # (B, h, Lq, d_v)
    y = b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 1, 3]), b.ints(0, 0, h * d_v))
    return b.linear(y, p["w_o"], p.get("b_o"))
