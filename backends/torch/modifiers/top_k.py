"""Explicit sparse attention (Zhao et al. 2019) in PyTorch: scores below each row's k-th largest
masked. The threshold is ranked without gradient: the kept scores' gradients are those of the softmax
over them, as in the paper."""

from __future__ import annotations

import torch

from . import score_modifier


@score_modifier("top_k")
def top_k(k: int):
    def keep_top(scores: torch.Tensor) -> torch.Tensor:  # (B, h, Lq, Lk), masked keys at the minimum
        kth = scores.detach().topk(min(k, scores.shape[-1]), -1).values[..., -1:]  # (B, h, Lq, 1)
        return scores.masked_fill(scores < kth, torch.finfo(scores.dtype).min)
    return keep_top
