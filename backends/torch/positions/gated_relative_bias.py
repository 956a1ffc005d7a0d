"""WavLM's gated relative position bias (``tfspec.positions.gated_relative_bias``) in PyTorch: the
stack's table looked up by the bucket of each key's distance from each query, built once per call
and shared by the layers, times each layer's gate computed from its input per head and query."""

from __future__ import annotations

import torch

from tfspec.layers.relative_bias import bucket_table
from tfspec.positions.gated_relative_bias import GATE_B, GATE_OUTPUTS, GATE_SCALE, GATE_W, TABLE

from . import PositionStage, position_stage


@position_stage("gated_relative_bias")
class GatedRelativeBias(PositionStage):
    def __init__(self, node):
        positions = node.attrs["positions"]
        self.name, self.heads, self.reach = node.params[TABLE], node.attrs["heads"], positions["max_distance"]
        self.buckets = torch.from_numpy(bucket_table(positions, bidirectional=True))

    def table_bias(self, ctx, table: torch.Tensor, length: int) -> torch.Tensor:
        """(h, L, L): each head's entry for the bucket of key j's distance j - i from query i."""
        def build():
            positions = torch.arange(length, device=table.device)
            distance = (positions[None, :] - positions[:, None]).clamp(-self.reach, self.reach)
            return table[self.buckets.to(table.device)[distance + self.reach]].permute(2, 0, 1)
        return ctx.cached((TABLE, self.name, length), build)

    def from_input(self, ctx, module, x: torch.Tensor) -> torch.Tensor:
        """(B, L, d_model) input -> (B, h, L, L) bias: (a (b w_h - 1) + 2) r_{j-i}, a and b the
        sigmoids of the two sums of four of the head's slice x_i^h through the layer's Linear."""
        B, L, _ = x.shape
        slices = x.view(B, L, self.heads, -1).transpose(1, 2)  # (B, h, L, d / h)
        outputs = torch.nn.functional.linear(slices, getattr(module, GATE_W), getattr(module, GATE_B))
        a, b = torch.sigmoid(outputs.view(B, self.heads, L, 2, GATE_OUTPUTS // 2).sum(-1)).unbind(-1)  # (B, h, L)
        gate = a * (b * getattr(module, GATE_SCALE)[:, None] - 1.0) + 2.0
        return gate[..., None] * self.table_bias(ctx, getattr(module, TABLE), L)
