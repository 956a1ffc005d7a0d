"""Query temperature by position (``tfspec/positions/temperature.py``: Llama 4's NoPE layers) in
PyTorch: queries times 1 + s log(1 + floor((i + 1) / f)) as they leave the projection; keys
unchanged, so the fused kernels still apply."""

from __future__ import annotations

import torch

from . import PositionStage, position_stage


@position_stage("temperature")
class Temperature(PositionStage):
    def __init__(self, node):
        positions = node.attrs["positions"]
        self.seq, self.floor, self.scale = node.shape[1], positions["temperature_floor"], positions["temperature_scale"]

    def turn(self, ctx, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L, h, d) queries scaled by their positions' temperature; (B, L, g, d) keys as they are."""
        rows = ctx.positions.get(self.seq)
        at = rows if rows is not None else ctx.start(self.seq) + torch.arange(q.shape[1], device=q.device)
        factor = torch.log1p(torch.div(at + 1, self.floor, rounding_mode="floor").float()) * self.scale + 1
        return (q * factor.to(q.device)[..., None, None]).to(q.dtype), k
