"""Dynamic tanh's PyTorch lowering (``tfspec/norms/tanh.py``): weight * tanh(alpha * x) + bias."""

from __future__ import annotations

import torch

from .registry import OpModule, lowering


@lowering("tanh_norm")
class TanhNorm(OpModule):
    """Zhu et al. 2025, eq. 1, elementwise: a learned scalar ``alpha`` inside the tanh, the gain
    and the shift per feature where the spec has them (``norm_gain``, ``norm_bias``)."""

    def forward(self, ctx, x):
        y = torch.tanh(self.alpha * x)
        if getattr(self, "weight", None) is not None:
            y = y * self.weight
        return y if getattr(self, "bias", None) is None else y + self.bias
