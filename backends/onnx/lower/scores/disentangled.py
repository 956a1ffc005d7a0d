"""DeBERTa's disentangled attention (``tfspec.layers.disentangled``) in ONNX graphs, as the
PyTorch backend's ``Disentangled``: the stack's relative table (normalised) through the layer's
query and key projections, each query's and key's products with it read at the table row of
every pair's distance i - j (GatherElements)."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node
from tfspec.ir.positions import disentangled_rows
from tfspec.layers.disentangled import NORM, NORM_BIAS, TABLE

from ..norms import normalize
from ..projection import fused_bias
from . import score_term


@score_term("disentangled")
def disentangled(e, node: Node, q: str, k: str) -> str:
    """(B, h, Lq, Lk) logit terms for (B, h, Lq, d) queries and (B, h, Lk, d) keys."""
    b, a, p = e.b, node.attrs, node.params
    h, d, positions = a["heads"], a["d_k"], a["positions"]
    rows = disentangled_rows(positions)
    reach = np.int64(len(rows) // 2)
    queries, keys = e.grid(node.shape[1], a["kv_seq"], q, k)
    distance = b.op("Add", b.op("Clip", b.op("Sub", queries, keys), b.const(-reach), b.const(reach)), b.const(reach))
    row = b.op("Gather", b.const(rows), distance)  # (Lq, Lk): the table row of i - j
    table = b.param(p[TABLE])
    if NORM in p:
        table = normalize(b, table, a["norm_type"], a["norm_eps"], p[NORM], p.get(NORM_BIAS))
    projected = b.op("Gemm", table, b.param(p["w_qkv"]), fused_bias(b, node, "qkv"), transB=1)  # (R, (h + 2g) d)
    pos_q, pos_k = (b.op("Transpose", b.op("Reshape", part, b.ints(-1, h, d)), perm=[1, 2, 0])  # (h, d, R)
                    for part in b.op("Split", projected, b.ints(h * d, h * d, h * a["d_v"]), axis=-1, outputs=3)[:2])
    terms = []
    if "c2p" in positions["terms"]:  # q_i · P^K_row(i, j)
        terms.append(_read(b, b.op("MatMul", q, pos_k), row))
    if "p2c" in positions["terms"]:  # k_j · P^Q_row(i, j), read as (key j, query i), then turned
        by_key = _read(b, b.op("MatMul", k, pos_q), b.op("Transpose", row, perm=[1, 0]))
        terms.append(b.op("Transpose", by_key, perm=[0, 1, 3, 2]))
    score = terms[0] if len(terms) == 1 else b.op("Add", *terms)
    return b.op("Mul", score, b.const(float(a["scale"])))


def _read(b, products: str, row: str) -> str:
    """(B, h, L, R) products read at ``row`` (L, L') along their last axis: (B, h, L, L')."""
    shape = b.op("Concat", b.op("Shape", products, start=0, end=3), b.op("Shape", row, start=1, end=2), axis=0)
    return b.op("GatherElements", products, b.op("Expand", row, shape), axis=-1)
