"""CoPE (``tfspec.positions.contextual``) in ONNX graphs, as the PyTorch backend's stage: after
the additive mask (masked keys' logits far below any score, so their gates are 0), gates
sigmoid of the logits, positions their reversed cumulative sums clamped at P - 1, and q · e[p]
interpolated between the products q · e[t] with the two table rows around p (eq. 5)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from . import PositionStage, position_stage


@position_stage("contextual")
class Contextual(PositionStage):
    def masked(self, e, q: str, k: str, scores: str) -> str:
        """(B, h, Lq, d_k) queries, (B, h, Lk, d_k) keys, (B, h, Lq, Lk) masked logits -> the term."""
        b, node = e.b, self.node
        p, h = node.attrs["positions"], node.attrs["heads"]
        logits = scores
        if p["count_mix_heads"]:  # out head g = sum_h W[g, h] logits_h, then masked keys hidden again
            mixed = b.op("MatMul", b.param(node.params["cope_mix"]),
                         b.op("Reshape", scores, b.ints(0, h, -1)))  # (h, h) x (B, h, Lq * Lk)
            logits = b.op("Reshape", mixed, b.op("Shape", scores))
            mask = e.mask(node.layer, node.shape[1], node.attrs["kv_seq"], q, k)
            if mask is not None:  # the additive mask is 0 where visible
                logits = b.op("Where", b.op("Less", mask, b.const(-1.0)), b.neg(), logits)
        gates = b.op("Sigmoid", logits)
        positions = b.op("Min", b.op("CumSum", gates, b.const(np.int64(3)), reverse=1),
                         b.const(float(p["count_limit"] - 1)))  # p_ij = sum_{t >= j} g_it
        table = b.op("MatMul", q, b.op("Transpose", b.param(node.params["cope_table"]), perm=[1, 0]))  # (B, h, Lq, P)
        low = b.op("Floor", positions)
        above = b.op("Sub", positions, low)  # the weight of the row above

        def row(at: str) -> str:
            return b.op("GatherElements", table, b.op("Cast", at, to=TensorProto.INT64), axis=3)

        upper, lower = row(b.op("Ceil", positions)), row(low)
        return b.op("Add", b.op("Mul", upper, above), b.op("Mul", lower, b.op("Sub", b.const(1.0), above)))
