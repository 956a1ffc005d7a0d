"""T5's relative attention bias (``tfspec.layers.relative_bias``) in PyTorch: the logit bias
of a stack's (buckets, heads) table, built once per call and shared by the layers tying it."""

from __future__ import annotations

import torch

from tfspec.layers.relative_bias import ROLE, bucket_table

from . import score_term


@score_term("relative_bias")
class RelativeBias:
    """What one attention node needs to look its bias up: its table's name and bucket table."""

    def __init__(self, node):
        self.name, self.layer, self.reach = node.params[ROLE], node.layer, node.attrs["positions"]["max_distance"]
        self.buckets = torch.from_numpy(bucket_table(node.attrs["positions"], node.layer.looks_ahead))

    def __call__(self, ctx, module, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(1, h, Lq, Lk): each head's entry for the bucket of key j's distance from query i;
        the queries are the last lq of the lk positions (a decoding step follows its cache)."""
        table, lq, lk = getattr(module, ROLE), q.shape[2], k.shape[2]

        def build():
            device = table.device
            queries = torch.arange(lk - lq, lk, device=device)[:, None]
            distance = (torch.arange(lk, device=device)[None, :] - queries).clamp(-self.reach, self.reach)
            return table[self.buckets.to(device)[distance + self.reach]].permute(2, 0, 1)[None]  # (1, h, Lq, Lk)
        return ctx.cached((ROLE, self.name, self.layer, lq, lk), build)
