"""PyTorch lowerings of memory tokens (``tfspec/ir/ops/memory_tokens.py``): the learned vectors put
before a stack's sequence, with the call's padding and positions widened to match, and dropped
again before the head.

A decoding step after the first finds the memory's keys and values in the cache (the first call
computed them), so it puts nothing in; its padding still gains the m cached memory columns."""

from __future__ import annotations

import torch

from .patches import LearnedTokens
from .registry import OpModule, lowering

SEQ = {"encoder": "S", "decoder": "T"}


@lowering("memory_tokens")
class MemoryTokens(LearnedTokens):
    """(B, L, d) -> (B, m + L, d), or x itself in a later decoding step; the stack's padding gains
    m unpadded columns first and its positions (read inside attention) -m..-1 before the tokens'."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.seq, self.m = SEQ[node.stack], node.attrs["count"]

    def forward(self, ctx, x: torch.Tensor) -> torch.Tensor:
        B, L = x.shape[:2]
        put = ctx.start(self.seq) == 0  # the first call (or no decoding): the memory is not cached yet
        pad = ctx.padding.get(self.seq)
        if pad is not None:
            ctx.padding[self.seq] = torch.cat([pad.new_zeros(B, self.m), pad], 1)
        if not put:  # the tokens' positions continue from the offset, as without memory
            return x
        rows = ctx.positions.get(self.seq)
        if rows is None:  # the tokens' own positions 0..L-1
            rows = torch.arange(L, device=x.device).expand(B, L)
        ctx.positions[self.seq] = torch.cat([torch.arange(-self.m, 0, device=x.device).expand(B, self.m), rows], 1)
        return super().forward(ctx, x)


@lowering("drop_tokens")
class DropTokens(OpModule):
    """(B, m + L, d) -> (B, L, d), the stack's padding and positions back to the tokens'."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.seq, self.m = SEQ[node.stack], node.attrs["count"]

    def forward(self, ctx, x: torch.Tensor) -> torch.Tensor:
        pad = ctx.padding.get(self.seq)
        if pad is not None:
            ctx.padding[self.seq] = pad[:, self.m:]
        if ctx.start(self.seq):  # a later decoding step: no memory rows in x
            return x
        ctx.positions[self.seq] = ctx.positions[self.seq][:, self.m:]
        return x[:, self.m:]
