"""BEiT's relative position bias over image patches (``tfspec.positions.relative_bias_2d``) in
PyTorch: the offset table resized bilinearly to the grid of the call's images (which the patch
embedding publishes), its class entries appended, looked up by ``offset_index``; built once per
call and table, shared by the layers tying a stack's table."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tfspec.positions.relative_bias_2d import CLASS_ENTRIES, ROLE, offset_index, trained_grid

from ..patches import GRID
from . import score_term


def resized_table(table: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """((2h - 1)(2w - 1) + 3, heads): the (2g - 1)^2 offsets of ``table`` resized bilinearly to
    (2h - 1, 2w - 1) (align_corners false: transformers' BeitRelativePositionBias), exactly the
    table when the grid is the training one, then the class entries."""
    g = trained_grid(table.shape[0])
    if (height, width) == (g, g):
        return table
    side, heads = 2 * g - 1, table.shape[1]
    offsets = table[:-CLASS_ENTRIES].float().reshape(1, side, side, heads).permute(0, 3, 1, 2)  # (1, h, dy, dx)
    resized = F.interpolate(offsets, size=(2 * height - 1, 2 * width - 1), mode="bilinear", align_corners=False)
    return torch.cat([resized.permute(0, 2, 3, 1).reshape(-1, heads).to(table.dtype), table[-CLASS_ENTRIES:]])


@score_term("relative_bias_2d")
class RelativeBias2d:
    """What one attention node needs to look its bias up: its table's name."""

    def __init__(self, node):
        self.name = node.params[ROLE]

    def __call__(self, ctx, module, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(1, heads, L, L) for L = 1 + h w: each head's entry for the offset of key patch j from
        query patch i (the class token's own entries in row and column 0)."""
        table = getattr(module, ROLE)
        height, width = ctx.published[GRID]

        def build():
            index = offset_index(torch, height, width).to(table.device)
            return resized_table(table, height, width)[index].permute(2, 0, 1)[None]  # (1, heads, L, L)
        return ctx.cached((ROLE, self.name, height, width), build)
