"""Talking heads (Shazeer et al. 2020) in PyTorch: a learned h x h matrix mixing the heads of each
query-key pair, of the logits (``mix_logits``) or of the weights (``mix_weights``)."""

from __future__ import annotations

import torch

from . import score_modifier


def mix(role: str):
    """The modifier of field ``role``, whose (h, h) matrix the attention module holds under that role."""
    def make(_):
        def modify(scores: torch.Tensor, module) -> torch.Tensor:  # (B, h, Lq, Lk) -> the same
            # One batched (h, h) @ (B, h, Lq * Lk) product over a view of the scores: the backward
            # keeps the scores themselves, no transposed copy (what einsum would make).
            flat = scores.flatten(2)  # (B, h, Lq * Lk)
            return torch.bmm(getattr(module, role).expand(len(flat), -1, -1), flat).view_as(scores)
        return modify
    return make


score_modifier("mix_logits")(mix("mix_logits"))
