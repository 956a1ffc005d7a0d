"""Forgetting attention (``tfspec.positions.forget_gates``, Lin et al. 2025, eq. 4-6) in PyTorch:
each head's log forget gates log sigmoid(w x_l + b) from the layer's input, their cumulative sums
c, and the logit bias c_i - c_j = sum_{l=j+1..i} log f_l. A decoding state keeps every earlier
key's log gate (``DecodeState.cache['<node>.forget']``, (B, h, L)) and the sums are taken again
over the cached gates, so a step's bias is the full sequence's row."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import PositionStage, position_stage


@position_stage("forget_gates")
class ForgetGates(PositionStage):
    def __init__(self, node):
        self.key = f"{node.name}.forget"

    def from_input(self, ctx, module, x: torch.Tensor) -> torch.Tensor:
        """(B, Lq, d_model) input -> (B, h, Lq, Lk) bias; the Lq queries are the last of the Lk keys."""
        gates = F.logsigmoid(F.linear(x, module.w_forget, module.b_forget)).transpose(1, 2)  # (B, h, Lq)
        lq = gates.shape[-1]
        if ctx.state is not None:  # the cached keys' gates, then these
            if self.key in ctx.state.cache:
                gates = torch.cat([ctx.state.cache[self.key][0], gates], -1)  # (B, h, Lk)
            ctx.state.cache[self.key] = (gates,)
        summed = gates.cumsum(-1)  # (B, h, Lk): c_t = sum_{l <= t} log f_l
        return summed[..., -lq:, None] - summed[..., None, :]  # (B, h, Lq, Lk): c_i - c_j
