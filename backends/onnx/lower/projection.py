"""The projection stage of attention in ONNX graphs, as the PyTorch backend's
``backends/torch/projection.py``: queries, keys and values as they leave the fused W^Q, W^K,
W^V GEMM, with the projection options ``clip`` and ``qk_norm``."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node
from tfspec.layers.attention import fused_bias as bias_pieces

from .norms import normalize


def project(b, node: Node, x: str) -> tuple[str, str, str]:
    """Self-attention's inputs -> (B * L, h*d_k) queries, (B * L, g*d_k) keys and (B * L,
    g*d_v) values (flat views), clipped; qk_norm comes after (``normed``)."""
    a = node.attrs
    qkv = clipped(b, node, b.linear(x, node.params["w_qkv"], fused_bias(b, node, "qkv")))
    return b.split(qkv, a["heads"] * a["d_k"], a["kv_heads"] * a["d_k"], a["kv_heads"] * a["d_v"])


def project_queries(b, node: Node, x: str) -> str:
    """Cross-attention's decoder states -> queries, clipped and normed."""
    q = clipped(b, node, b.linear(x, node.params["w_q"], node.params.get("b_q")))
    return q if node.attrs["qk_norm"] == "none" else normed(b, node, q, "q")


def project_kv(b, node: Node, memory: str) -> tuple[str, str]:
    """Cross-attention keys and values of the encoder output: (B, g, S, d_k), (B, g, S, d_v)."""
    a, p = node.attrs, node.params
    g, d_k, d_v = a["kv_heads"], a["d_k"], a["d_v"]
    k, v = b.split(clipped(b, node, b.linear(memory, p["w_kv"], fused_bias(b, node, "kv"))), g * d_k, g * d_v)
    if a["qk_norm"] != "none":
        k = normed(b, node, k, "k")
    return split_heads(b, k, g, d_k), split_heads(b, v, g, d_v)


def split_heads(b, x: str, heads: int, size: int) -> str:
    """(B, L, h*size), or its flat (B * L, h*size) view -> (B, h, L, size)."""
    return b.op("Transpose", b.op("Reshape", x, b.batched(-1, heads, size)), perm=[0, 2, 1, 3])


def fused_bias(b, node: Node, role: str) -> str | None:
    """The bias of the fused projection ``role`` (``fused_bias`` of tfspec.layers.attention):
    the parameter, or the parts' biases and zeros concatenated into one constant; an
    initializer name either way, which ``Builder.linear`` takes as it takes a parameter's."""
    pieces = bias_pieces(node.params, role, node.attrs)
    if pieces is None:
        return None
    if len(pieces) == 1:
        return node.params[pieces[0][0]]
    return b.const(np.concatenate([b.weights[node.params[name]] if name else np.zeros(rows, np.float32)
                                   for name, rows in pieces]))


def clipped(b, node: Node, x: str) -> str:
    """Projected queries, keys or values clamped to [-clip, clip] (OLMo's clip_qkv), or ``x``."""
    clip = node.attrs.get("clip")
    return x if clip is None else b.op("Clip", x, b.const(np.float32(-clip)), b.const(np.float32(clip)))


def normed(b, node: Node, x: str, part: str) -> str:
    """``qk_norm`` of (B, L, heads*d) queries or keys (or their flat view): over each head's d
    features with one gain for all heads, one per head or none, or over the whole projection; as the
    PyTorch backend's ``normed``."""
    a, p = node.attrs, node.params
    bias = p.get(f"{part}_norm_bias")
    if a["qk_norm"] == "all":
        return normalize(b, x, a["norm_type"], a["norm_eps"], p[f"{part}_norm"], bias)
    if a["qk_norm"] == "l2":  # each head's features by their root mean square, no gain (Llama 4)
        heads = b.op("Reshape", x, b.ints(-1, a["d_k"]))
        return b.op("Reshape", normalize(b, heads, "rms", a["norm_eps"], None, size=a["d_k"]), b.op("Shape", x))
    if a["qk_norm"] == "per_head":  # normalised without a gain, then times the (heads, d) gains
        heads = b.op("Reshape", x, b.ints(-1, a["heads"] if part == "q" else a["kv_heads"], a["d_k"]))
        plain = normalize(b, heads, a["norm_type"], a["norm_eps"], None, size=a["d_k"])
        return b.op("Reshape", b.op("Mul", plain, b.param(p[f"{part}_norm"])), b.op("Shape", x))
    heads = b.op("Reshape", x, b.ints(-1, a["d_k"]))  # every head's features a row
    return b.op("Reshape", normalize(b, heads, a["norm_type"], a["norm_eps"], p[f"{part}_norm"], bias),
                b.op("Shape", x))
