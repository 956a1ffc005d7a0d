"""Token shift's PyTorch lowering (``tfspec/ir/ops/token_shift.py``): mu * x_t + (1 - mu) * x_{t-1}."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering


@lowering("token_shift")
class TokenShift(OpModule):
    """Peng et al. 2023, eqs. 11-15: padded positions are zeroed first, so the first real position
    of a left-padded row reads zeros, as it would unpadded; a decoding state carries each row's
    last input (B, 1, d) into the next call, zeros before the first."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.seq = node.shape[1]

    def forward(self, ctx, x):
        pad = ctx.padding.get(self.seq)
        if pad is not None:
            x = x.masked_fill(pad[..., None], 0.0)
        if ctx.state is not None and self.seq == "T":
            past = ctx.state.cache.get(self.node_name, (x.new_zeros(x.shape[0], 1, x.shape[2]),))[0]
            ctx.state.cache[self.node_name] = (x[:, -1:],)
            previous = torch.cat([past, x[:, :-1]], 1)  # (B, L, d)
        else:
            previous = F.pad(x, (0, 0, 1, 0))[:, :-1]  # (B, L, d): x_{t-1}, zeros at t = 0
        return previous + self.mix * (x - previous)
