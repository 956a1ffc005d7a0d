"""PyTorch lowerings of the image encoder ops (``tfspec/ir/ops/patches.py``): the patch embedding,
learned tokens, the patch positions and their bicubic resizing, the per-feature gain, and the
pooling and averaging of the image heads."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering

GRID = ("patch_embedding", "grid")
"""``RunContext.published`` key of the (height, width) patch grid of the call's images."""


@lowering("patch_embedding")
class PatchEmbedding(OpModule):
    """(B, C, H, W) -> (B, N, d): a convolution of kernel and stride p, its (B, d, H/p, W/p) output
    read in raster order (ViT eq. 1's x_p E)."""

    def forward(self, ctx, pixels: torch.Tensor) -> torch.Tensor:
        p = self.weight.shape[-1]
        bias = getattr(self, "bias", None)  # CLIP's convolution has none
        ctx.published[GRID] = (pixels.shape[-2] // p, pixels.shape[-1] // p)  # BEiT's 2-D bias reads it
        return F.conv2d(pixels.to(self.weight.dtype), self.weight, bias, stride=p).flatten(2).transpose(1, 2)


@lowering("learned_tokens")
class LearnedTokens(OpModule):
    """(B, L, d) -> (B, L + count, d): the learned ``tokens`` put in at index ``at``."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.at = node.attrs["at"]

    def forward(self, ctx, x: torch.Tensor) -> torch.Tensor:
        tokens = self.tokens.to(x.dtype).expand(x.shape[0], -1, -1)  # (B, count, d)
        return torch.cat([x[:, :self.at], tokens, x[:, self.at:]], dim=1)


def resized_positions(table: torch.Tensor, prefix: int, grid: int, height: int, width: int) -> torch.Tensor:
    """The (prefix + height * width, d) rows of a (prefix + grid^2, d) table for a height x width
    patch grid: the grid's rows resized bicubically (align_corners false, in float32, as
    transformers' ``interpolate_pos_encoding``), exactly the table when the grids agree."""
    if (height, width) == (grid, grid):
        return table
    d = table.shape[-1]
    patches = table[prefix:].float().reshape(1, grid, grid, d).permute(0, 3, 1, 2)  # (1, d, grid, grid)
    resized = F.interpolate(patches, size=(height, width), mode="bicubic", align_corners=False)
    return torch.cat([table[:prefix], resized.permute(0, 2, 3, 1).reshape(-1, d).to(table.dtype)])


@lowering("patch_positions")
class PatchPositions(OpModule):
    """x + E_pos, the table's patch rows resized to the grid of the image fed (its H // p, W // p)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.prefix, self.grid, self.p = node.attrs["prefix"], node.attrs["grid"], node.attrs["patch_size"]

    def forward(self, ctx, x: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
        height, width = pixels.shape[-2] // self.p, pixels.shape[-1] // self.p
        return x + resized_positions(self.weight, self.prefix, self.grid, height, width).to(x.dtype)


@lowering("channel_gain")
class ChannelGain(OpModule):
    """x * gamma over the last axis (LayerScale)."""

    def forward(self, ctx, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


@lowering("token_pool")
def token_pool(node, graph):
    """(B, S, d) -> (B, k d): the class token, the distillation token or the patches' mean, side by side."""
    prefix, reads = node.attrs["prefix"], node.attrs["reads"]
    parts = {"class": lambda x: x[:, 0], "distillation": lambda x: x[:, 1],
             "patch_mean": lambda x: x[:, prefix:].mean(1)}
    return lambda ctx, x: torch.cat([parts[r](x) for r in reads], dim=-1)


@lowering("average")
def average(node, graph):
    """The mean of the inputs (DeiT's two classifiers)."""
    return lambda ctx, *xs: sum(xs) / len(xs)
