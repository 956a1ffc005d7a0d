"""Self-attention restricted to a neighbourhood of radius r around each position (§4, Table 1).

Position i sees positions j with |i - j| <= r (i - r <= j <= i when causal), so a stack of L
such layers connects positions at most L*r apart: the O(n/r) maximum path length of Table 1.
About n*(2r + 1) query-key pairs are visible instead of n^2: the O(r*n*d) complexity. The
``band`` lets both backends compute only those pairs (blocks of queries against their keys'
neighbourhood), so time and memory really grow linearly in n.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tfspec.spec.bounds import Positions

from tfspec.layers.attention import Attention
from tfspec.layers.base import register


@register
class RestrictedSelfAttention(Attention):
    """Local self-attention over the window [i - r, i + r] (or [i - r, i] when causal)."""

    kind: Literal["restricted_self_attention"] = "restricted_self_attention"
    stem: ClassVar[str] = "self_attn"
    r: Positions
    """Neighbourhood radius: each query sees keys at distance <= r (window of 2r + 1)."""
    causal: bool = False
    """Only look back (window [i - r, i]); required in a decoder."""
    symbols: ClassVar[dict[str, str]] = {"r": "r"}

    @property
    def looks_ahead(self) -> bool:
        return not self.causal

    def visible(self, q, k):
        return (k >= q - self.r) & (k <= (q if self.causal else q + self.r))

    def band(self) -> tuple[int, int]:
        return self.r, 0 if self.causal else self.r

    def pairs(self, s):
        from sympy import Min

        # Each of the w = min(r, n - 1) offsets 1..w on a side is visible in n - offset rows.
        w = Min(s.r, s.n - 1)
        one_side = w * s.n - w * (w + 1) / 2
        return s.n + one_side * (1 if self.causal else 2)
