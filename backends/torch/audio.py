"""PyTorch lowerings of a spectrogram encoder's front (``tfspec/ir/ops/audio.py``, Whisper): the
convolution stem and the stored position table."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering


@lowering("conv_stem")
class ConvStem(OpModule):
    """(B, mels, F) -> (B, S, d): GELU(conv1d(x)) -> GELU(conv1d(., stride)), each zero-padded by
    k // 2 (Whisper's conv1 and conv2), the channels then the time axis swapped."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.stride, self.pad = node.attrs["stride"], node.attrs["kernel_size"] // 2

    def forward(self, ctx, features: torch.Tensor) -> torch.Tensor:
        x = F.gelu(F.conv1d(features.to(self.w_1.dtype), self.w_1, self.b_1, padding=self.pad))  # (B, d, F)
        x = F.gelu(F.conv1d(x, self.w_2, self.b_2, stride=self.stride, padding=self.pad))  # (B, d, S)
        return x.transpose(1, 2)  # (B, S, d)


@lowering("table_positions")
class TablePositions(OpModule):
    """x + weight[:S] (positions from 0: the encoder's sequence is never decoded in steps)."""

    def forward(self, ctx, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] > self.weight.shape[0]:
            raise ValueError(f"{x.shape[1]} encoder positions exceed the table's {self.weight.shape[0]} rows: "
                             "feed at most stride x positions frames")
        return x + self.weight[:x.shape[1]].to(x.dtype)
