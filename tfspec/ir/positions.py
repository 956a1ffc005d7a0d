"""The sinusoidal position table of §3.5, computed once here for every backend."""

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
