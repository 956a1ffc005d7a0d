"""Forgetting attention (``tfspec.positions.forget_gates``) in ONNX graphs, as the PyTorch
backend's stage: log sigmoid(w x + b) per head and position, the step graph's past gates joined
before them (``past.<node>.forget`` (batch, past_len, h), ``Variant.append``), their cumulative
sums c and the bias c_i - c_j for the call's queries, the last Lq of the Lk keys."""

from __future__ import annotations

import numpy as np

from . import PositionStage, position_stage

END = np.iinfo(np.int64).max


@position_stage("forget_gates")
class ForgetGates(PositionStage):
    def from_input(self, e, x: str) -> str:
        """(B * L, d) or (B, L, d) input -> (B, h, Lq, Lk) bias."""
        b, node, h = e.b, self.node, self.node.attrs["heads"]
        logits = b.sequence(b.linear(x, node.params["w_forget"], node.params["b_forget"]), h)  # (B, Lq, h)
        gates = b.op("Neg", b.op("Softplus", b.op("Neg", logits)))  # log sigmoid(z) = -softplus(-z)
        new = b.op("Shape", gates, start=1, end=2)  # (1,): Lq
        gates = e.variant.append(e, node, "forget", gates, h)  # (B, Lk, h): the past's gates, then these
        summed = b.op("Transpose", b.op("CumSum", gates, b.const(np.int64(1))), perm=[0, 2, 1])  # (B, h, Lk)
        queries = b.op("Slice", summed, b.op("Neg", new), b.ints(END), b.ints(2))  # (B, h, Lq)
        return b.op("Sub", b.op("Unsqueeze", queries, b.ints(3)), b.op("Unsqueeze", summed, b.ints(2)))
