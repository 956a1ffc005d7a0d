"""Local 1D self-attention (Parmar et al. 2018, Image Transformer §3.2, "Local 1D Attention").

The sequence (an image's pixels in raster order, or any sequence) is cut into query blocks of
l_q consecutive positions; every query of a block sees the keys of its own block (those not
after it, when causal) and the l_m positions before the block (its memory); without ``causal``
also the l_m positions after it (tensor2tensor's unmasked ``local_attention_1d``), so a stack
connects every position to every other. Unlike restricted
attention (§4 of Vaswani et al.), the window is fixed per block, not centred on each query:
all l_q queries of a block share the same l_q + l_m keys, which is what lets the Image
Transformer batch them. The memory is a whole number of blocks (as tensor2tensor's
``local_attention_1d`` takes whole preceding blocks), so the formulas stay exact.

Visible pairs: about n * (l_q / 2 + l_m) causal, n * (l_q + 2 l_m) otherwise, O(n * (l_q + l_m) * d)
work; a query reaches at most l_q - 1 + l_m positions away, so ``band`` lets both backends
compute it in blocks at linear cost. ``period`` is l_q: the pattern repeats every block, which
lets decoding drop keys a whole number of blocks at a time.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import model_validator

from tfspec.spec.base import field_error
from tfspec.spec.bounds import Positions, Reach

from tfspec.layers.attention import Attention
from tfspec.layers.base import register


@register
class Local1dSelfAttention(Attention):
    """Query blocks of ``block`` positions, each attending to itself and ``memory`` positions before it."""

    kind: Literal["local_1d_self_attention"] = "local_1d_self_attention"
    stem: ClassVar[str] = "self_attn"
    block: Positions
    """l_q: consecutive positions per query block (the paper's 1D models use 256)."""
    memory: Reach = 0
    """l_m: positions before each query block (and after it, unless causal) that its queries
    also see; a multiple of block (the paper's 1D models use 512)."""
    causal: bool = False
    """A query sees only the keys of its block that are not after it, and no memory after the
    block; required in a decoder."""
    symbols: ClassVar[dict[str, str]] = {"l_q": "block", "l_m": "memory"}

    @model_validator(mode="after")
    def _whole_blocks(self) -> Local1dSelfAttention:
        if self.memory % self.block:
            raise field_error("memory", f"memory ({self.memory}) must be a multiple of block ({self.block}): the "
                              f"memory is whole preceding query blocks; use {self.memory // self.block * self.block} "
                              f"or {(self.memory // self.block + 1) * self.block}")
        return self

    @property
    def looks_ahead(self) -> bool:
        return not self.causal

    @property
    def period(self) -> int:
        return self.block

    def visible(self, q, k):
        start = (q // self.block) * self.block  # first position of q's query block
        return (k >= start - self.memory) & (k <= (q if self.causal else start + self.block - 1 + self.memory))

    def band(self) -> tuple[int, int]:
        reach = self.block - 1 + self.memory
        return reach, 0 if self.causal else reach

    def pairs(self, s):
        from sympy import Min, floor

        blocks = floor(s.n / s.l_q)  # full query blocks; the last `rest` queries form a partial one
        rest = s.n - blocks * s.l_q
        if self.causal:
            own = blocks * s.l_q * (s.l_q + 1) / 2 + rest * (rest + 1) / 2
        else:
            own = blocks * s.l_q ** 2 + rest ** 2
        # Block j's memory before it holds min(l_m, j * l_q) positions: the sum over j < J of
        # min(M, j) is K (K - 1) / 2 + M (J - K), K = min(M, J), M = l_m / l_q.
        reached = Min(s.l_m / s.l_q, blocks)
        before = s.l_q ** 2 * (reached * (reached - 1) / 2 + s.l_m / s.l_q * (blocks - reached))
        before += rest * Min(s.l_m, blocks * s.l_q)
        if self.causal:
            return own + before
        # The full block i blocks before the last full one has min(l_m, i * l_q + rest) after it.
        after = s.l_q * (s.l_q * reached * (reached - 1) / 2 + rest * reached + s.l_m * (blocks - reached))
        return own + before + after
