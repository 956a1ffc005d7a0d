"""Relative position representations (Shaw et al. 2018) in PyTorch: the layer's tables a_K and
a_V (``rel_k``, ``rel_v``: one row per clipped distance j - i in [-k, k]) enter the logits as
q_i·a_K(j - i) (eq. 4, scaled as q·k is) and the output as sum_j w_ij a_V(j - i) (eq. 3)."""

from __future__ import annotations

import torch

from . import PositionStage, position_stage


@position_stage("relative")
class Relative(PositionStage):
    def __init__(self, node):
        self.far = node.attrs["positions"]["max_distance"]

    def logits(self, ctx, module, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(B, h, Lq, Lk): q_i · a_K(clip(j - i)), each query's products with the R rows read at its keys' rows."""
        index = self._rows(ctx, q.shape[2], k.shape[2], q.device).expand(*q.shape[:3], k.shape[2])
        return (q @ module.rel_k.T * module.scale).gather(-1, index)

    def output(self, ctx, module, weights: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y + sum_j w_ij a_V(clip(j - i)), the (B, h, Lq, Lk) weights summed per distance first."""
        index = self._rows(ctx, *weights.shape[2:], weights.device).expand(*weights.shape)
        per_distance = torch.zeros(*weights.shape[:-1], module.rel_v.shape[0], dtype=weights.dtype,
                                   device=weights.device).scatter_add_(-1, index, weights)
        return y + per_distance @ module.rel_v

    def _rows(self, ctx, lq: int, lk: int, device) -> torch.Tensor:
        """(Lq, Lk) int64: the table row of each pair's distance j - i, clipped to [-k, k]; the
        queries are the last lq of the lk positions (a decoding step follows its cache)."""
        def build():
            offsets = torch.arange(lk, device=device)[None, :] - torch.arange(lk - lq, lk, device=device)[:, None]
            return offsets.clamp(-self.far, self.far) + self.far
        return ctx.cached(("relative", self.far, lq, lk), build)
