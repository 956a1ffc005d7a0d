"""BEiT's relative position bias over image patches (``tfspec.positions.relative_bias_2d``) in ONNX
graphs, as the PyTorch backend's ``RelativeBias2d``: the offset table resized to the images' patch
grid (published by the patch embedding; ``Resize`` linear with half-pixel centres, PyTorch's
bilinear with align_corners false, unchanged at the training grid), its class entries appended,
gathered by ``offset_index`` written out in graph ops (the grid is dynamic); built once per graph
and table."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node
from tfspec.positions.relative_bias_2d import CLASS_ENTRIES, ROLE, trained_grid

from ..patches import GRID
from . import score_term


def resized_table(b, table: str, g: int, heads: int, grid: str) -> str:
    """((2h - 1)(2w - 1) + 3, heads) from the ((2g - 1)^2 + 3, heads) table and the int64 (2,) grid."""
    side, end = 2 * g - 1, b.ints(np.iinfo(np.int64).max)
    offsets = b.op("Slice", table, b.ints(0), b.ints(side * side), b.ints(0))
    offsets = b.op("Transpose", b.op("Reshape", offsets, b.ints(1, side, side, heads)), perm=[0, 3, 1, 2])
    sides = b.op("Sub", b.op("Mul", grid, b.ints(2)), b.ints(1))  # (2h - 1, 2w - 1)
    resized = b.op("Resize", offsets, None, None, b.op("Concat", b.ints(1, heads), sides, axis=0), mode="linear",
                   coordinate_transformation_mode="half_pixel")  # (1, heads, 2h - 1, 2w - 1)
    rows = b.op("Reshape", b.op("Transpose", resized, perm=[0, 2, 3, 1]), b.ints(-1, heads))
    return b.op("Concat", rows, b.op("Slice", table, b.ints(-CLASS_ENTRIES), end, b.ints(0)), axis=0)


def offset_index(b, grid: str) -> str:
    """(1 + h w, 1 + h w) int64 rows of the resized table (``tfspec.positions.relative_bias_2d.
    offset_index``, in graph ops): patch offsets, then the class token's three entries."""
    one, zero = b.const(np.int64(1)), b.const(np.int64(0))
    height, width = (b.op("Gather", grid, b.const(np.int64(i))) for i in (0, 1))
    across = b.op("Sub", b.op("Mul", width, b.const(np.int64(2))), one)  # 2w - 1
    places = b.op("Range", zero, b.op("Add", b.op("Mul", height, width), one), one)  # (L,)
    pos = b.op("Max", b.op("Sub", places, one), zero)  # the class token: patch 0, replaced below
    y, x = b.op("Div", pos, width), b.op("Mod", pos, width)

    def offset(v: str, extent: str) -> str:  # v_i - v_j + extent - 1, (L, L)
        pairs = b.op("Sub", b.op("Unsqueeze", v, b.ints(1)), b.op("Unsqueeze", v, b.ints(0)))
        return b.op("Add", pairs, b.op("Sub", extent, one))
    index = b.op("Add", b.op("Mul", offset(y, height), across), offset(x, width))
    first = b.op("Mul", b.op("Sub", b.op("Mul", height, b.const(np.int64(2))), one), across)
    is_class = b.op("Equal", places, zero)
    rows, cols = b.op("Unsqueeze", is_class, b.ints(1)), b.op("Unsqueeze", is_class, b.ints(0))
    to_class = b.op("Where", cols, b.op("Add", first, one), index)
    return b.op("Where", rows, b.op("Where", cols, b.op("Add", first, b.const(np.int64(2))), first), to_class)


@score_term("relative_bias_2d")
def relative_bias_2d(e, node: Node, q: str, k: str) -> str:
    """(1, heads, L, L) logit bias over the class token and the patches."""
    def build():
        b, param = e.b, e.graph.params[node.params[ROLE]]
        rows, heads = param.shape
        grid = e.cached(GRID, _unpublished)
        table = resized_table(b, b.param(node.params[ROLE]), trained_grid(rows), heads, grid)
        bias = b.op("Gather", table, offset_index(b, grid), axis=0)  # (L, L, heads)
        return b.op("Unsqueeze", b.op("Transpose", bias, perm=[2, 0, 1]), b.ints(0))
    return e.cached((ROLE, node.params[ROLE]), build)


def _unpublished():
    raise AssertionError("relative_bias_2d reads the patch grid, which no patch embedding has published")
