"""ALiBi (Press et al. 2022) in PyTorch: each head's logits minus its slope times the
distance |i - j| between query and key; no parameters, so a model reads sequences longer
than it was trained on. Under a causal mask this is slope * (j - i), which differs from
BLOOM's slope * j only by a constant per query row, which softmax ignores."""

from __future__ import annotations

import torch

from tfspec.ir.positions import alibi_slopes

from . import score_term


@score_term("alibi")
class Alibi:
    def __init__(self, node):
        self.slopes = torch.from_numpy(alibi_slopes(node.attrs["heads"])).float()

    def __call__(self, ctx, module, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(1, h, Lq, Lk); the queries are the last lq of the lk key positions."""
        lq, lk, device = q.shape[2], k.shape[2], q.device

        def build():
            queries = torch.arange(lk - lq, lk, device=device)[:, None]
            distance = (torch.arange(lk, device=device)[None, :] - queries).abs()
            return -self.slopes.to(device)[:, None, None] * distance[None]
        return ctx.cached(("alibi", len(self.slopes), lq, lk), build)[None]
