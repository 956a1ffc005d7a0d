"""Dynamic position bias (``tfspec.positions.distance_mlp``) in ONNX graphs, as the PyTorch
backend's ``DistanceMlp``: the layer's MLP over the distinct distances i - j between the
queries' and keys' positions (``Emit.grid``: in step graphs the queries follow the past, in a
preallocated cache the keys are its slots), gathered into each head's (Lq, Lk) bias."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node
from tfspec.positions.distance_mlp import NORM_EPS

from . import score_term


def mlp(b, node: Node, x: str) -> str:
    """(D, 1) distances -> (D, h): hidden Gemm (LayerNormalization) activation layers, output Gemm."""
    p, param = node.attrs["positions"], (lambda role: b.param(node.params[role]))
    if p["log_distance"]:  # sign(x) log(1 + |x|)
        x = b.op("Mul", b.op("Sign", x), b.op("Log", b.op("Add", b.op("Abs", x), b.const(1.0))))
    for k in range(p["mlp_depth"]):
        x = b.op("Gemm", x, param(f"dpb_w{k}"), param(f"dpb_b{k}"), transB=1)
        if p["mlp_norm"]:
            x = b.op("LayerNormalization", x, param(f"dpb_g{k}"), param(f"dpb_s{k}"), axis=-1, epsilon=NORM_EPS)
        x = b.op("Relu", x) if p["mlp_activation"] == "relu" else b.op("Mul", x, b.op("Sigmoid", x))
    return b.op("Gemm", x, param("dpb_w_out"), param("dpb_b_out"), transB=1)


@score_term("distance_mlp")
def distance_mlp(e, node: Node, q: str, k: str) -> str:
    """(1, h, Lq, Lk) logit bias for (B, h, Lq, d) queries and (B, h, Lk, d) keys."""
    def build():
        b = e.b
        rows, cols = e.grid(node.shape[1], node.attrs["kv_seq"], q, k)
        distance = b.op("Sub", rows, cols)  # (Lq, Lk) int64: i - j
        low, high = b.op("ReduceMin", distance, keepdims=0), b.op("ReduceMax", distance, keepdims=0)
        values = b.op("Range", low, b.op("Add", high, b.const(np.int64(1))), b.const(np.int64(1)))  # (D,)
        bias = mlp(b, node, b.op("Unsqueeze", b.op("Cast", values, to=b.elem_type), b.ints(-1)))  # (D, h)
        gathered = b.op("Gather", bias, b.op("Sub", distance, low), axis=0)  # (Lq, Lk, h)
        return b.op("Unsqueeze", b.op("Transpose", gathered, perm=[2, 0, 1]), b.ints(0))
    return e.cached(("distance_mlp", node.params["dpb_w0"]), build)

