"""ScaleNorm's PyTorch lowering (``tfspec/norms/l2.py``): g * x / max(||x||_2, eps)."""

from __future__ import annotations

import torch

from .registry import OpModule, lowering


@lowering("l2_norm")
class L2Norm(OpModule):
    """Nguyen & Salazar 2019, §2.2: the norm of each position's features in float32 (as RMSNorm's
    statistics), clamped below at eps, one learned scalar ``gain``."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.eps = node.attrs["eps"]

    def forward(self, ctx, x):
        h = x.float()
        norm = torch.linalg.vector_norm(h, dim=-1, keepdim=True).clamp_min(self.eps)  # (..., 1)
        return (h / norm).to(x.dtype) * self.gain
