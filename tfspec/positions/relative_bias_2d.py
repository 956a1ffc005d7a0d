"""BEiT's relative position bias over image patches (Bao et al. 2022, "BEiT: BERT Pre-Training of
Image Transformers", §2.5, after Swin's): positional kind ``relative_bias_2d``.

Each head adds a learned scalar to the logit of query patch i and key patch j, chosen by their
2-D offset (dy, dx) = (y_i - y_j, x_i - x_j) on the patch grid: a table of (2g - 1)^2 offsets for
the g x g grid of training images, plus three entries for the class token (class to patch, patch
to class, class to class). One table per stack shared by every self-attention layer (BEiT's
use_shared_relative_position_bias) or one per layer (use_relative_position_bias), as
``tables`` says (relative_bias's field). An image of another size, an h x w grid, reads the
offset table resized bilinearly to (2h - 1) x (2w - 1) (align_corners false, as transformers'
BeitRelativePositionBias always does: MiDaS v3.1's arbitrary window sizes); the class entries
stay as they are. The bias is a lookup, no products (as T5's): attention stays Table 1's
O(n^2 d), n = 1 + h w; the table is ((2g - 1)^2 + 3) x heads parameters. The lookup index is
written once here for both backends (``offset_index``); the backends' score terms are
``backends/{torch,onnx}/scores/relative_bias_2d.py``.
"""

from __future__ import annotations

from tfspec.positions import PositionKind, register

ROLE = "rel_bias_2d"
"""The attention node's parameter role of the table."""
CLASS_ENTRIES = 3
"""The table's last rows: class token to patch, patch to class, class to class."""


def offsets(grid: int) -> int:
    """Rows of the offset part of a table for a grid x grid training image: (2 grid - 1)^2."""
    return (2 * grid - 1) ** 2


def trained_grid(rows: int) -> int:
    """The training grid g of a table of ``rows`` = (2g - 1)^2 + 3 rows (its shape says it)."""
    return (int(round((rows - CLASS_ENTRIES) ** 0.5)) + 1) // 2


def offset_index(np_like, height: int, width: int):
    """(1 + h w, 1 + h w) int64 rows of the resized table ((2h - 1)(2w - 1) offsets, then the class
    entries) for each query (row) and key (column), position 0 the class token, the patches in
    raster order; ``np_like`` is numpy or torch, ``height``/``width`` the image's patch grid."""
    pos = np_like.clip(np_like.arange(1 + height * width) - 1, 0, None)  # the class token: patch 0, replaced below
    y, x = pos // width, pos % width
    index = (y[:, None] - y[None, :] + height - 1) * (2 * width - 1) + (x[:, None] - x[None, :] + width - 1)
    first = (2 * height - 1) * (2 * width - 1)
    is_class = np_like.arange(1 + height * width) == 0
    to_class = np_like.where(is_class[None, :], first + 1, index)  # patch -> class
    return np_like.where(is_class[:, None], np_like.where(is_class[None, :], first + 2, first), to_class)


@register
class RelativeBias2d(PositionKind):
    name, order = "relative_bias_2d", 13
    summary = ("a learned scalar per head and 2-D offset between image patches (three more for the class "
               "token) added to self-attention's logits, resized bilinearly for other grids (BEiT, Bao et "
               "al. 2022; needs patches)")
    in_attention = per_stack = over_patches = True
    reads = ("tables",)
    reads_cache_indices = False  # an encoder over patches: no cache

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False

    @classmethod
    def attention_params(cls, b, name: str, layer) -> dict:
        """The ((2g - 1)^2 + 3, heads) table: the stack's, declared by its first self-attention
        and tied by the others, or the layer's own (``tables: layer``)."""
        shape, init = (offsets(b.spec.patches.grid) + CLASS_ENTRIES, layer.heads), "normal:0.02"  # timm's std
        return {ROLE: (shape, init) if layer.positions.tables == "layer" else b.stack_param(name, ROLE, shape, init)}

