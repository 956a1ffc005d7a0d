"""No positions: for models whose layers see order themselves (recurrent or convolutional
layers), or a layer left unrotated (SmolLM3, Llama 4)."""

from __future__ import annotations

from tfspec.positions import PositionKind, register


@register
class NoPositions(PositionKind):
    name, order, summary = "none", 7, "for models whose layers see order themselves"
    bounded = False  # no table bounds the length
    reads_cache_indices = False

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False
