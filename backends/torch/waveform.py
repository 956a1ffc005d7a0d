"""PyTorch lowerings of a waveform encoder's front (``tfspec/ir/ops/waveform.py``, wav2vec 2.0,
HuBERT): the convolutional feature encoder and the position convolution.

The samples' padding comes in as ``ctx.padding["samples"]`` (bool (B, samples), True at padding:
``TorchModel.run`` reads it from the ``attention_mask`` fed with ``input_values``); the feature
encoder turns it into the frames' padding, ``ctx.padding["S"]``, which the position convolution
and attention read after it (transformers' ``_get_feature_vector_attention_mask``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .layers import ACTIVATIONS
from .registry import OpModule, lowering


@lowering("feature_encoder")
class FeatureEncoder(OpModule):
    """(B, samples) -> (B, S, c_last): conv -> [GroupNorm per channel | LayerNorm over channels] -> act, per layer."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.kernels, self.strides, self.norm, self.eps = a["kernels"], a["strides"], a["norm"], a["eps"]
        self.act = ACTIVATIONS[a["activation"]]

    def forward(self, ctx, samples: torch.Tensor) -> torch.Tensor:
        x = samples[:, None].to(self.w_0.dtype)  # (B, 1, samples)
        for i, stride in enumerate(self.strides):
            x = F.conv1d(x, getattr(self, f"w_{i}"), getattr(self, f"b_{i}", None), stride=stride)  # (B, c_i, L_i)
            if self.norm == "group" and i == 0:  # one group per channel: each normalised over time
                x = F.group_norm(x, x.shape[1], self.norm_w_0, self.norm_b_0, self.eps)
            elif self.norm == "layer":
                x = F.layer_norm(x.transpose(1, 2), (x.shape[1],), getattr(self, f"norm_w_{i}"),
                                 getattr(self, f"norm_b_{i}"), self.eps).transpose(1, 2)
            x = self.act(x)
        pad = ctx.padding.get("samples")
        if pad is not None:
            ctx.padding["S"] = self.frame_padding((~pad).sum(1), x.shape[2])
        return x.transpose(1, 2)  # (B, S, c_last)

    def frame_padding(self, lengths: torch.Tensor, frames: int) -> torch.Tensor | None:
        """bool (B, frames), True at frames past those each row's ``lengths`` real samples give."""
        for k, stride in zip(self.kernels, self.strides):
            lengths = torch.div(lengths - k, stride, rounding_mode="floor") + 1
        pad = torch.arange(frames, device=lengths.device)[None, :] >= lengths[:, None]
        return pad if bool(pad.any()) else None


@lowering("conv_positions")
class ConvPositions(OpModule):
    """x (padded frames zeroed) + act(grouped conv(x)), the weight g v / ||v|| over each kernel tap."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.k, self.groups = node.attrs["kernel_size"], node.attrs["groups"]
        self.act = ACTIVATIONS[node.attrs["activation"]]

    def forward(self, ctx, x: torch.Tensor) -> torch.Tensor:
        pad = ctx.padding.get("S")
        if pad is not None:
            x = x.masked_fill(pad[:, :, None], 0.0)
        weight = self.v * (self.g / self.v.norm(dim=(0, 1), keepdim=True))  # (d, d / groups, K)
        y = F.conv1d(x.transpose(1, 2), weight.to(x.dtype), self.bias.to(x.dtype), padding=self.k // 2,
                     groups=self.groups)  # (B, d, S + 1 - K % 2)
        return x + self.act(y[:, :, :x.shape[1]]).transpose(1, 2)
