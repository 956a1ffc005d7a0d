"""Local 2D self-attention (Parmar et al. 2018, Image Transformer §3.2, "Local 2D Attention").

The sequence is an image in raster order, ``width`` positions per row (pixels x channels when
each channel intensity is a position, as the image input lays them out: row r, column c,
channel ch at position (r * W + c) * C + ch). The grid is cut into query blocks of h x w
positions; each query block sees a memory block around it: h_m rows above it and w_m columns
left and right of it (unless causal, also h_m rows below). When causal a query sees no key
after it in raster order, so a stack is an autoregressive model of the image.

The paper generates an image block by block (raster order over blocks, and within each block);
here the order is the plain raster order of the image, shared with 1D local attention and every
other kind, so a decoder-only spec over an image samples pixel by pixel from the top left. The
memory block and the causal mask are the paper's; only the order in which the image is
generated (and so which pixels of the memory block are earlier) differs.

Each query sees at most (h + h_m) x (w + 2 w_m) keys (2 h_m rows when not causal): the cost is
linear in the number of positions for fixed blocks. The keys' reach along the flattened sequence
is (h - 1 + h_m) * width + w - 1 + w_m, the ``band``; the pattern repeats every h rows
(``period``). Backends gather each query block's memory block (``blocks``), not the band,
which would be O(width) keys per query.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, Literal

from tfspec.spec.bounds import Positions, Reach

from tfspec.layers.attention import Attention
from tfspec.layers.base import register

if TYPE_CHECKING:
    from tfspec.spec.schema import Spec


@register
class Local2dSelfAttention(Attention):
    """Query blocks of h x w image positions attending to the memory block around them."""

    kind: Literal["local_2d_self_attention"] = "local_2d_self_attention"
    stem: ClassVar[str] = "self_attn"
    block: tuple[Positions, Positions]
    """[h, w]: rows and columns (positions) of a query block (the paper: 8 x 32 with channels)."""
    memory: tuple[Reach, Reach] = (0, 0)
    """[h_m, w_m]: rows above (and below, unless causal) and columns left and right of a query
    block that its queries also see (the paper's memory flange)."""
    width: Positions | None = None
    """Positions per image row; defaults to the spec's ``image`` width x channels."""
    causal: bool = False

    @property
    def mixes_positions(self) -> bool:
        """Its blocks are laid over the padded sequence, so padding moves a row's blocks."""
        return True
    """A query sees no key after it in raster order; required in a decoder."""

    @property
    def looks_ahead(self) -> bool:
        return not self.causal

    def check(self, spec: Spec) -> str | None:
        if self.width is None and getattr(spec, "image", None) is None:
            return "local_2d_self_attention needs the image row length: set width, or declare the spec's image"
        return None

    def resolved(self, spec: Spec) -> Local2dSelfAttention:
        layer = super().resolved(spec)
        if layer.width is not None:
            return layer
        return layer.model_copy(update={"width": spec.image.width * spec.image.channels})

    def lower(self, b, name, x):
        return Attention.lower(self.resolved(b.spec), b, name, x)

    @property
    def row(self) -> int:
        if self.width is None:
            raise ValueError("local_2d_self_attention has no width: resolve it against its spec first")
        return self.width

    @property
    def rows_seen(self) -> int:
        """Rows of a memory block: h + h_m, or h + 2 h_m when not causal."""
        return self.block[0] + self.memory[0] * (1 if self.causal else 2)

    @property
    def cols_seen(self) -> int:
        """Columns of a memory block: w + 2 w_m."""
        return self.block[1] + 2 * self.memory[1]

    @property
    def period(self) -> int:
        return self.block[0] * self.row

    def visible(self, q, k):
        (h, w), (h_m, w_m), W = self.block, self.memory, self.row
        top, left = (q // W) // h * h, (q % W) // w * w  # q's query block's first row and column
        row, col = k // W, k % W
        seen = (row >= top - h_m) & (row <= top + h - 1 + (0 if self.causal else h_m))
        seen = seen & (col >= left - w_m) & (col <= left + w - 1 + w_m)
        return (seen & (k <= q)) if self.causal else seen

    def band(self) -> tuple[int, int]:
        (h, w), (h_m, w_m) = self.block, self.memory
        reach = (h - 1 + h_m) * self.row + w - 1 + w_m
        return reach, 0 if self.causal else reach

    def pairs(self, s):
        """Exact when n is a whole number of block rows (h x width positions each) and the image
        is at least as tall as a memory block; a linear function of n either way."""
        h, W = self.block[0], self.row
        steady = self._block_row_pairs(self.memory[0], self.memory[0])
        edges = sum(steady - self._block_row_pairs(min(self.memory[0], j * h), self.memory[0])
                    for j in range(math.ceil(self.memory[0] / h)))
        if not self.causal:  # the last block rows have fewer rows below
            edges *= 2
        return s.n * steady / (h * W) - edges

    def _block_row_pairs(self, above: int, below: int) -> int:
        """Visible pairs of one block row (h full image rows) with ``above`` and ``below`` rows of
        memory present."""
        (h, w), (_, w_m), W = self.block, self.memory, self.row
        lo = [max(0, c // w * w - w_m) for c in range(W)]  # first column a query at column c sees
        seen = [min(W - 1, c // w * w + w - 1 + w_m) - lo[c] + 1 for c in range(W)]
        if not self.causal:
            return h * (h + above + below) * sum(seen)
        # Row t of the block: t + above full rows before it, then its own row up to the query.
        return sum((t + above) * sum(seen) for t in range(h)) + h * sum(c - lo[c] + 1 for c in range(W))

    def computed_pairs(self, s):
        """Each query block of h x w against its memory block, padded blocks included."""
        from sympy import ceiling

        (h, w), W = self.block, self.row
        blocks = ceiling(ceiling(s.n / W) / h) * math.ceil(W / w)
        return blocks * h * w * self.rows_seen * self.cols_seen
