"""Rotary frequency scaling for long contexts: how each ``positional.scaling`` type turns the
plain frequencies base^(-2i / r) of r rotated features into the ones a layer rotates by, and
the factor its cos and sin are multiplied by. Each rule is transformers' (``modeling_rope_utils``:
``ROPE_INIT_FUNCTIONS``), computed here once, in float64, for both backends.

Two rules depend on the length a forward call reaches, its last position + 1 (transformers'
``dynamic_rope_update``): ``dynamic`` grows the base past the original length, ``longrope``
switches from its short to its long factors there. ``length`` None is a call within the
original length (transformers' frequencies at initialisation).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from tfspec.spec.scalings import SCALINGS


def scaled(frequencies: np.ndarray, positional: Mapping[str, Any], length: int | None = None) -> np.ndarray:
    """``frequencies`` (r / 2,) as ``positional["scaling"]`` (a dumped ``RotaryScaling``) says,
    for a call reaching ``length`` positions."""
    scaling = positional["scaling"]
    kind = scaling.get("type", "llama3")
    if kind == "linear":  # position interpolation: p / factor, the same as every frequency / factor
        return frequencies / scaling["factor"]
    if kind == "dynamic":
        return frequencies * ntk_growth(scaling, length) ** -ntk_exponents(len(frequencies))
    if kind == "longrope":
        return frequencies / np.asarray(scaling["long_factor" if longrope_long(scaling, length) else "short_factor"])
    if kind == "yarn":
        return _yarn(frequencies, positional["base"], scaling)
    return _llama3(frequencies, scaling)


def length_dependent(positional: Mapping[str, Any] | None) -> bool:
    """Whether the frequencies depend on the length a call reaches, as the rule's class
    declares (``depends_on_length``: dynamic, longrope)."""
    scaling = (positional or {}).get("scaling")
    return scaling is not None and SCALINGS[scaling.get("type", "llama3")].depends_on_length


def ntk_growth(scaling: Mapping[str, Any], length: int | None) -> float:
    """Dynamic NTK's base multiplier to the power (r - 2) / r: factor n / L - (factor - 1) for a
    call reaching n > L = original_max_position_embeddings positions, 1 up to L."""
    original = scaling["original_max_position_embeddings"]
    n = max(length or original, original)
    return scaling["factor"] * n / original - (scaling["factor"] - 1)


def ntk_exponents(pairs: int) -> np.ndarray:
    """(pairs,) 2i / (r - 2), r = 2 * pairs: base' = base g^(r / (r - 2)) turns base'^(-2i / r)
    into base^(-2i / r) g^(-2i / (r - 2)), so frequency i is multiplied by g^-exponent_i."""
    return np.arange(pairs, dtype=np.float64) * 2 / (2 * pairs - 2)


def longrope_long(scaling: Mapping[str, Any], length: int | None) -> bool:
    """Whether LongRoPE uses its long factors: the call reaches past the original length (and
    the scaling switches its frequencies there: not PhiMoE's, ``long_frequencies``)."""
    return (scaling.get("long_frequencies", True) and length is not None
            and length > scaling["original_max_position_embeddings"])


def long_attention_factor(positional: Mapping[str, Any]) -> float | None:
    """LongRoPE's multiplier of cos and sin in calls past the original length where it differs
    from ``attention_factor``'s (PhiMoE's long_mscale), else None: one factor for every call."""
    factor = (positional.get("scaling") or {}).get("long_attention_factor")
    return None if factor is None or factor == attention_factor(positional) else factor


def attention_factor(positional: Mapping[str, Any], length: int | None = None) -> float:
    """The factor cos and sin are multiplied by (so every q·k of rotated features by its
    square) in a call reaching ``length`` positions: YaRN's and LongRoPE's, given or derived from
    ``factor`` (LongRoPE's ``long_attention_factor`` past the original length); 1 for the other rules."""
    scaling = positional.get("scaling") or {}
    if (scaling.get("long_attention_factor") is not None and length is not None
            and length > scaling["original_max_position_embeddings"]):
        return scaling["long_attention_factor"]
    if scaling.get("attention_factor") is not None:
        return scaling["attention_factor"]
    if scaling.get("type") == "yarn":
        factor, mscale, all_dim = scaling["factor"], scaling.get("mscale"), scaling.get("mscale_all_dim")
        if mscale and all_dim:
            return yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dim)
        return yarn_mscale(factor)
    if scaling.get("type") == "longrope":
        original = scaling["original_max_position_embeddings"]
        factor = scaling["factor"] if scaling.get("factor") is not None else positional["max_len"] / original
        return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    return 1.0


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction 0.1 mscale ln(factor) + 1 (1 for factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn(frequencies: np.ndarray, base: float, scaling: Mapping[str, Any]) -> np.ndarray:
    """YaRN's blend (Peng et al. 2023, §3.2): dimension d turns L f_d / 2 pi times over the
    original context L; dimensions below beta_slow turns are interpolated (f / factor), above
    beta_fast kept, a linear ramp over the dimension index between (ends rounded outward
    with ``truncate``, clipped to [0, r - 1])."""
    r, original = 2 * len(frequencies), scaling["original_max_position_embeddings"]

    def dimension(turns: float) -> float:  # the dimension index turning ``turns`` times over L
        return r * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = dimension(scaling["beta_fast"]), dimension(scaling["beta_slow"])
    if scaling["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    ramp = np.clip((np.arange(len(frequencies), dtype=np.float64) - low) / ((high - low) or 0.001), 0, 1)
    return frequencies / scaling["factor"] * ramp + frequencies * (1 - ramp)


def _llama3(frequencies: np.ndarray, scaling: Mapping[str, Any]) -> np.ndarray:
    """Llama 3.1's rule (transformers' ``_compute_llama3_parameters``): wavelengths longer than
    L / low_freq_factor divided by ``factor``, shorter than L / high_freq_factor kept, those
    between interpolated by how many times they fit into the original context L. Equal factors
    leave no wavelength between (the quotient, 0 / 0 at the one wavelength L / low, is transformers'
    too, and picked there only)."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    context = scaling["original_max_position_embeddings"]
    wavelength = 2 * math.pi / frequencies
    with np.errstate(divide="ignore", invalid="ignore"):
        smooth = (context / wavelength - low) / (high - low)
        between = (1 - smooth) * frequencies / factor + smooth * frequencies
    return np.where(wavelength > context / low, frequencies / factor,
                    np.where(wavelength < context / high, frequencies, between))
