"""Rotary positions (Su et al. 2021, RoFormer): queries and keys of self-attention rotated by
position, optionally only a fraction of each head's features and with a frequency scaling for
long contexts (``tfspec.spec.scalings``; the backends' stages ``backends/{torch,onnx}/positions/
rotary.py``)."""

from __future__ import annotations

from pydantic import Field

from tfspec.positions import PositionKind, register
from tfspec.spec.bounds import Fraction, RotaryBase
from tfspec.spec.scalings import RotaryScaling


def rotated(positional, d_k: int) -> int:
    """How many of a head's d_k query/key features rotary positions rotate."""
    return int(d_k * positional.fraction)


def scaling_problem(positional, rotated: int) -> str | None:
    """Why ``scaling`` cannot scale ``rotated`` features (a layer's, known once sizes are
    resolved), or None."""
    s = positional.scaling
    if s is not None and s.type == "longrope" and len(s.short_factor) != rotated // 2:
        return (f"positional.scaling.short_factor and long_factor hold {len(s.short_factor)} values; the layer "
                f"rotates {rotated} features, {rotated // 2} pairs: give one factor per pair")
    if s is not None and s.type == "dynamic" and rotated <= 2:
        return (f"dynamic scaling raises the base to r / (r - 2) for r rotated features; the layer rotates "
                f"{rotated}: rotate more features")
    return None


@register
class Rotary(PositionKind):
    name, order, summary = "rotary", 2, "queries and keys of self-attention rotated by position (Su et al. 2021)"
    in_attention = True
    adds_to_scores = False  # turns queries and keys only: fused kernels apply
    reads_cache_indices = False  # each row's own position ids

    fields = {
        "base": (RotaryBase, Field(10000.0, description=(
            "rotary: the wavelength base of the rotation frequencies (transformers' rope_theta)."))),
        "fraction": (Fraction, Field(1.0, description=(
            "rotary: the share of each head's d_k query/key features that is rotated, the first\n"
            "int(d_k * fraction); the rest pass unchanged (GPT-NeoX's rotary_pct, transformers'\n"
            "partial_rotary_factor)."))),
        "scaling": (RotaryScaling | None, Field(None, description=(
            "rotary: frequency scaling for long contexts (``type``: llama3, linear, dynamic, yarn,\n"
            "longrope); None: plain frequencies."))),
    }

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        """Dynamic NTK and LongRoPE scalings pick their frequencies per call."""
        return positional.scaling is not None and positional.scaling.depends_on_length

    @classmethod
    def saved_tables(cls, positions: dict, d_k: int, length: int) -> int:
        """The cosines and sines of every position, one per rotated pair each (float32)."""
        return 4 * length * 2 * (int(d_k * positions["fraction"]) // 2)

    @classmethod
    def layer_problem(cls, layer) -> str | None:
        positions, turned = layer.positions, rotated(layer.positions, layer.d_k)
        if turned % 2 or turned == 0:
            return (f"rotary positions rotate pairs of query/key features: int(d_k ({layer.d_k}) x fraction "
                    f"({positions.fraction})) = {turned} must be even and positive; pick an even d_k or another "
                    "fraction")
        return scaling_problem(positions, turned)
