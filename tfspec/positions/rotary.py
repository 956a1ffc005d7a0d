"""Rotary positions (Su et al. 2021, RoFormer): queries and keys of self-attention rotated by
position, optionally only a fraction of each head's features and with a frequency scaling for
long contexts (``tfspec.spec.scalings``; the backends' stages ``backends/{torch,onnx}/positions/
rotary.py``), optionally with a decay of the scores with distance (``decay_length``: xPos)."""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
from pydantic import Field

from tfspec.positions import PositionKind, register
from tfspec.spec.base import field_error
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


XPOS_OFFSET = 0.4
"""xPos's gamma (Sun et al. 2022, §3.2): zeta_i = (2i / r + 0.4) / 1.4 for rotated pair i of r."""
DECAY_RANGE = 64 * math.log(2)
"""The largest |log| of a scale decay puts on a query or key: 2^64 and 2^-64 stay far inside
float32's (and bfloat16's) range whatever the vectors they multiply (``Rotary.check``)."""


def decay_bases(rotated: int) -> np.ndarray:
    """float64 (rotated / 2,): xPos's zeta_i = (2i / r + gamma) / (1 + gamma) per rotated pair
    (Sun et al. 2022, eq. 9; torchscale's and x-transformers' ``scale``), all in (0, 1): the
    pair's share of the score q_n k_m decays as zeta_i^((n - m) / decay_length)."""
    return (np.arange(0, rotated, 2, dtype=np.float64) / rotated + XPOS_OFFSET) / (1 + XPOS_OFFSET)


def decay_centre(max_len: int) -> int:
    """The position whose queries and keys decay leaves unscaled: max_len // 2. The paper scales
    a query at n by zeta^(n / length) and a key at m by zeta^(-m / length); any centre c cancels in
    q_n k_m (zeta^((n - c) / length) zeta^(-(m - c) / length) = zeta^((n - m) / length)), and the
    middle of the bounded range halves the exponents (x-transformers and torchscale centre each
    call on its own middle, which a cache of scaled keys could not follow)."""
    return max_len // 2


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
        "decay_length": (Annotated[float, Field(ge=1.0, le=1e9)] | None, Field(None, description=(
            "rotary: the scores of each rotated pair i also decay with the distance n - m as\n"
            "zeta_i^((n - m) / decay_length), zeta_i = (2i / r + 0.4) / 1.4: queries scaled by\n"
            "zeta^(n / decay_length), keys by its inverse (xPos, Sun et al. 2022, §3.2; x-transformers'\n"
            "rotary_xpos_scale_base, 512), causal attention only; None: rotation alone (Su et al.)."))),
    }

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        """Dynamic NTK and LongRoPE scalings pick their frequencies per call."""
        return positional.scaling is not None and positional.scaling.depends_on_length

    @classmethod
    def check(cls, positional) -> None:
        if positional.decay_length is None:
            return
        reach = (positional.max_len - decay_centre(positional.max_len)) / positional.decay_length * math.log(
            (1 + XPOS_OFFSET) / XPOS_OFFSET)
        if reach > DECAY_RANGE:
            raise field_error("decay_length", f"decay_length ({positional.decay_length:g}) scales keys at max_len "
                              f"({positional.max_len}) by e^{reach:.0f}, past the 2^64 float32 keeps safely: raise "
                              f"decay_length to at least {math.ceil(positional.decay_length * reach / DECAY_RANGE)} "
                              "or lower max_len")

    @classmethod
    def saved_tables(cls, positions: dict, d_k: int, length: int) -> int:
        """The cosines and sines of every position, one per rotated pair each (float32); with
        ``decay_length``, those times the query's scale and those over it, for the keys."""
        tables = 2 if positions.get("decay_length") is None else 4
        return 4 * length * tables * (int(d_k * positions["fraction"]) // 2)

    @classmethod
    def layer_problem(cls, layer) -> str | None:
        positions, turned = layer.positions, rotated(layer.positions, layer.d_k)
        if turned % 2 or turned == 0:
            return (f"rotary positions rotate pairs of query/key features: int(d_k ({layer.d_k}) x fraction "
                    f"({positions.fraction})) = {turned} must be even and positive; pick an even d_k or another "
                    "fraction")
        if positions.decay_length is not None and layer.looks_ahead:
            return (f"rotary decay_length ({positions.decay_length:g}) decays scores as zeta^((n - m) / length), "
                    f"which grows without bound for keys ahead of the query (m > n), and {layer.kind} looks ahead: "
                    "use causal attention or remove decay_length")
        return scaling_problem(positions, turned)
