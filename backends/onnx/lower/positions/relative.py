"""Relative position representations (Shaw et al. 2018) in ONNX graphs, as the PyTorch
backend's ``Relative``: q_i·a_K(j - i) joins the logits (eq. 4) and sum_j w_ij a_V(j - i) the
output (eq. 3), both through a one-hot (Lq, Lk, R) of each pair's clipped distance."""

from __future__ import annotations

import numpy as np

from . import PositionStage, position_stage


@position_stage("relative")
class Relative(PositionStage):
    onehot: str | None = None
    """(Lq, Lk, R) one-hot distances, built by ``logits`` and read by ``output``."""

    def logits(self, e, q: str, k: str) -> str:
        """(B, h, Lq, Lk): q_i · a_K(clip(j - i)) x scale."""
        b, a, p = e.b, self.node.attrs, self.node.params
        far = a["positions"]["max_distance"]
        rows, cols = e.grid(self.node.shape[1], a["kv_seq"], q, k)
        distance = b.op("Add", b.op("Clip", b.op("Sub", cols, rows), b.const(np.int64(-far)), b.const(np.int64(far))),
                        b.const(np.int64(far)))
        self.onehot = b.op("Cast", b.op("Equal", b.op("Unsqueeze", distance, b.ints(2)),
                                        b.const(np.arange(2 * far + 1, dtype=np.int64))), to=b.elem_type)
        by_distance = b.op("MatMul", b.op("Mul", q, b.const(a["scale"])),
                           b.op("Transpose", b.param(p["rel_k"])))  # (B, h, Lq, R)
        spread = b.op("MatMul", b.op("Unsqueeze", by_distance, b.ints(3)),
                      b.op("Transpose", self.onehot, perm=[0, 2, 1]))  # (B, h, Lq, 1, Lk)
        return b.op("Squeeze", spread, b.ints(3))

    def output(self, e, weights: str, y: str) -> str:
        """y + sum_j w_ij a_V(clip(j - i)), the weights summed per distance first."""
        b = e.b
        per_distance = b.op("Squeeze", b.op("MatMul", b.op("Unsqueeze", weights, b.ints(3)), self.onehot), b.ints(3))
        return b.op("Add", y, b.op("MatMul", per_distance, b.param(self.node.params["rel_v"])))
