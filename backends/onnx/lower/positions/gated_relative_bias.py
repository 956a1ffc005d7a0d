"""WavLM's gated relative position bias (``tfspec.positions.gated_relative_bias``) in ONNX graphs,
as the PyTorch backend's stage: the stack's table looked up by the bucket of each key's distance
from each query (built once per graph, shared by the layers tying the table), times each layer's
gate from its input per head and query."""

from __future__ import annotations

import numpy as np

from tfspec.layers.relative_bias import bucket_table
from tfspec.positions.gated_relative_bias import GATE_B, GATE_OUTPUTS, GATE_SCALE, GATE_W, TABLE

from . import PositionStage, position_stage


@position_stage("gated_relative_bias")
class GatedRelativeBias(PositionStage):
    def table_bias(self, e, length: str) -> str:
        """(h, L, L) for the int64 scalar L: each head's entry for the bucket of j - i."""
        node = self.node

        def build():
            b, positions = e.b, node.attrs["positions"]
            reach = np.int64(positions["max_distance"])
            index = b.op("Range", b.const(np.int64(0)), length, b.const(np.int64(1)))  # (L,)
            distance = b.op("Sub", b.op("Unsqueeze", index, b.ints(0)), b.op("Unsqueeze", index, b.ints(1)))
            shifted = b.op("Add", b.op("Clip", distance, b.const(-reach), b.const(reach)), b.const(reach))
            buckets = b.op("Gather", b.const(bucket_table(positions, bidirectional=True)), shifted)  # (L, L)
            return b.op("Transpose", b.op("Gather", b.param(node.params[TABLE]), buckets), perm=[2, 0, 1])
        return e.cached((TABLE, node.params[TABLE]), build)

    def from_input(self, e, x: str) -> str:
        """(B * L, d) or (B, L, d) input -> (B, h, L, L) bias: (a (b w_h - 1) + 2) r_{j-i}."""
        b, node, h = e.b, self.node, self.node.attrs["heads"]
        p = node.params
        width = b.shape(p[GATE_W])[1]  # d / h
        sequence = b.sequence(x, width * h)  # (B, L, d)
        outputs = b.gemm(b.op("Reshape", sequence, b.ints(-1, width)), p[GATE_W], b.param(p[GATE_B]))  # (B L h, 8)
        grouped = b.op("Reshape", outputs, b.batched(-1, h, 2, GATE_OUTPUTS // 2))  # (B, L, h, 2, 4)
        gates = b.op("Transpose", b.op("Sigmoid", b.op("ReduceSum", grouped, b.ints(-1), keepdims=0)),
                     perm=[0, 2, 1, 3])  # (B, h, L, 2)
        first, second = (b.op("Gather", gates, b.const(np.int64(i)), axis=3) for i in (0, 1))  # (B, h, L)
        scale = b.op("Unsqueeze", b.param(p[GATE_SCALE]), b.ints(1))  # (h, 1)
        one, two = b.const(1.0), b.const(2.0)
        gate = b.op("Add", b.op("Mul", first, b.op("Sub", b.op("Mul", second, scale), one)), two)
        return b.op("Mul", b.op("Unsqueeze", gate, b.ints(3)), self.table_bias(e, b.shape_of(sequence, 1)))
