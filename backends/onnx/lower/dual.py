"""ONNX lowerings of the embedding heads' and dual encoders' ops (``tfspec/ir/ops/dual.py``), as the
PyTorch backend's (``backends/torch/dual.py``): the text's pooled position by ``ArgMax`` and ``GatherND``,
the attention probe written out (one query, so no attention kernel is needed), the projections
as ``Gemm``, unit vectors and the scores as one ``MatMul`` of every text against every image."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from tfspec.ir import Node

from . import lowering
from .ffn import activation


@lowering("token_select")
def token_select(e, node: Node, memory: str, ids: str) -> str:
    """(B, S, d), ids (B, S) -> (B, d); ArgMax takes the first of equal values (select_last_index 0)."""
    b, select = e.b, node.attrs["select"]
    if select == "last_token":
        return b.op("Gather", memory, b.const(np.int64(-1)), axis=1)
    ids = b.op("Cast", ids, to=TensorProto.INT32)  # as transformers: ArgMax of int32
    if select == "eos_token":
        ids = b.op("Cast", b.op("Equal", ids, b.const(np.int32(node.attrs["eos_id"]))), to=TensorProto.INT32)
    index = b.op("ArgMax", ids, axis=1, keepdims=1, select_last_index=0)  # (B, 1) int64
    return b.op("GatherND", memory, index, batch_dims=1)  # (B, d)


@lowering("attention_probe")
def attention_probe(e, node: Node, x: str) -> str:
    """The learned query's attention over x (B, V, d) per head, its output projection, then
    y + MLP(LayerNorm(y))."""
    b, p, h = e.b, node.params, node.attrs["heads"]
    d = b.shape(p["probe"])[0]
    part = lambda role, i: b.stored(f"{p[role]}#{i}", lambda: np.ascontiguousarray(  # noqa: E731
        b.weights[p[role]][i * d:(i + 1) * d].astype(b.np_dtype)))
    q = b.op("Add", b.op("MatMul", b.op("Unsqueeze", b.param(p["probe"]), b.ints(0)),
                         b.op("Transpose", part("w_qkv", 0), perm=[1, 0])), part("b_qkv", 0))  # (1, d)
    q = b.op("Reshape", b.op("Mul", q, b.const(1 / math.sqrt(d // h))), b.ints(1, h, 1, d // h))
    heads = lambda y: b.op("Transpose", b.op("Reshape", y, b.ints(0, -1, h, d // h)),  # noqa: E731
                           perm=[0, 2, 1, 3])  # (B, h, V, d_h)
    k, v = (heads(b.op("Add", b.op("MatMul", x, b.op("Transpose", part("w_qkv", i), perm=[1, 0])),
                       part("b_qkv", i))) for i in (1, 2))
    weights = b.op("Softmax", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])), axis=-1)  # (B, h, 1, V)
    y = b.op("Reshape", b.op("MatMul", weights, v), b.ints(-1, d))  # (B, h, 1, d_h) -> (B, d)
    y = b.gemm(y, p["w_o"], b.param(p["b_o"]))
    z = b.op("LayerNormalization", y, b.param(p["norm_weight"]), b.param(p["norm_bias"]), axis=-1,
             epsilon=node.attrs["eps"])
    z = activation(b, b.gemm(z, p["w_1"], b.param(p["b_1"])), node.attrs["activation"])
    return b.op("Add", y, b.gemm(z, p["w_2"], b.param(p["b_2"])))


@lowering("pooled_projection")
def pooled_projection(e, node: Node, x: str) -> str:
    p = node.params
    return e.b.gemm(x, p["weight"], e.b.param(p["bias"]) if "bias" in p else None)


@lowering("unit_vectors")
def unit_vectors(e, node: Node, x: str) -> str:
    b = e.b
    return b.op("Div", x, b.op("Sqrt", b.op("ReduceSum", b.op("Mul", x, x), b.ints(-1), keepdims=1)))


@lowering("pair_logits")
def pair_logits(e, node: Node, rows: str, columns: str) -> str:
    b, p = e.b, node.params
    cosines = b.op("MatMul", rows, b.op("Transpose", columns, perm=[1, 0]))  # (B, N)
    logits = b.op("Mul", cosines, b.op("Exp", b.param(p["scale"])))
    return b.op("Add", logits, b.param(p["bias"])) if "bias" in p else logits
