"""PyTorch lowerings of the normalisations: LayerNorm (the paper's) and RMSNorm."""

from __future__ import annotations

import torch.nn.functional as F

from .registry import OpModule, lowering


@lowering("layer_norm")
class LayerNorm(OpModule):
    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.shape, self.eps = node.shape[-1:], node.attrs["eps"]

    def forward(self, ctx, x):
        return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)


@lowering("rms_norm")
class RMSNorm(OpModule):
    """x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019), computed in float32 as
    Llama and T5 do, so half-precision inputs keep their small values."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.eps = node.attrs["eps"]

    def forward(self, ctx, x):
        y = x.float()
        y = y * (y.pow(2).mean(-1, keepdim=True) + self.eps).rsqrt()
        return self.weight * y.to(x.dtype)
