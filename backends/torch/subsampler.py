"""PyTorch lowering of a spectrogram's subsampler (``tfspec/ir/ops/subsampler.py``, Speech2Text's
Conv1dSubsampler): convolutions of stride 2 over time, each followed by a GLU."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering


@lowering("conv_subsampler")
class ConvSubsampler(OpModule):
    """(B, F, mels) -> (B, S, d): GLU(conv1d(x, stride 2, pad k // 2)) per kernel, over the channels
    (a * sigmoid(b) of the two halves), the time axis then back in second place, times the scale."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.kernels, self.scale = node.attrs["kernel_sizes"], node.attrs["scale"]

    def forward(self, ctx, features: torch.Tensor) -> torch.Tensor:
        x = features.to(self.w_1.dtype).transpose(1, 2)  # (B, mels, F)
        for i, k in enumerate(self.kernels, 1):
            x = F.glu(F.conv1d(x, getattr(self, f"w_{i}"), getattr(self, f"b_{i}"), stride=2, padding=k // 2), dim=1)
        x = x.transpose(1, 2)  # (B, S, d)
        return x * self.scale if self.scale != 1.0 else x
