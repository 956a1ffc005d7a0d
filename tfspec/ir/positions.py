"""Position encodings computed once here for every backend: the sinusoid table of §3.5 and the
rotary frequencies (Su et al. 2021), with Llama 3's scaling of them."""

from __future__ import annotations

import math

import numpy as np


def sinusoids(length: int, d_model: int) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...): float64 (length, d)."""
    position = np.arange(length, dtype=np.float64)[:, None]
    rate = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-math.log(10000.0) / d_model))
    table = np.zeros((length, d_model))
    table[:, 0::2] = np.sin(position * rate)
    table[:, 1::2] = np.cos(position * rate)[:, : d_model // 2]
    return table


def rotary_frequencies(d: int, positional: dict) -> np.ndarray:
    """Angle per position of each of the d/2 rotated pairs: base^(-2i/d), float64; with
    ``scaling: {type: llama3, ...}`` Llama 3.1's long-context rescaling (transformers'
    ``_compute_llama3_parameters``): wavelengths beyond original_max_len / low_freq_factor are
    stretched by ``factor``, those below original_max_len / high_freq_factor kept, the band
    between interpolated."""
    frequencies = positional["base"] ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    scaling = positional.get("scaling")
    if not scaling:
        return frequencies
    factor, low, high, context = (scaling[k] for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                         "original_max_len"))
    wavelength = 2 * math.pi / frequencies
    scaled = np.where(wavelength > context / low, frequencies / factor, frequencies)
    smooth = (context / wavelength - low) / (high - low)
    medium = (wavelength >= context / high) & (wavelength <= context / low)
    return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
