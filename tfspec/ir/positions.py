"""Position signals computed once here for every backend: the sinusoidal table of §3.5, the
rotation frequencies of rotary positions, ALiBi's slopes and DeBERTa's relative rows."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from tfspec.ir.rope_scaling import scaled


def sinusoids(length: int, d_model: int, layout: str = "interleaved", spacing: str = "paper") -> np.ndarray:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...): float64 (length, d).
    ``halves`` puts the same values as [all sines | all cosines] (Marian's layout). ``spacing:
    endpoint`` spaces the d/2 frequencies 10000^(-i / (d/2 - 1)), so that the last is exactly
    1/10000 (tensor2tensor's get_timing_signal_1d, fairseq's sinusoids: M2M-100, NLLB-200); an
    odd d's last feature is then 0, as fairseq pads it (a d of 2 or 3: the one frequency 1)."""
    position = np.arange(length, dtype=np.float64)[:, None]
    if spacing == "paper":
        rate = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-math.log(10000.0) / d_model))
    else:
        steps = max(d_model // 2 - 1, 1)
        rate = np.exp(np.arange(0, d_model // 2, dtype=np.float64) * (-math.log(10000.0) / steps))
    sines, cosines = np.sin(position * rate), np.cos(position * rate)[:, : d_model // 2]
    table = np.zeros((length, d_model))  # an odd d with endpoint spacing: the last feature stays 0
    if layout == "halves":
        table[:, :sines.shape[1] + cosines.shape[1]] = np.concatenate([sines, cosines], axis=1)
    else:
        table[:, 0:2 * sines.shape[1]:2], table[:, 1:2 * cosines.shape[1]:2] = sines, cosines
    return table


def rotary_frequencies(d_k: int, positional: Mapping[str, Any], length: int | None = None) -> np.ndarray:
    """float64 (rotated / 2,): the angle per position of each rotated pair of a head's features
    (Su et al. 2021), base^(-2i / rotated) for the first ``rotated`` = int(d_k * fraction)
    features, then the long-context scaling ``positional`` (a ``Positional`` dumped as in the
    IR's attention attrs) asks for (``tfspec.ir.rope_scaling``), for a forward call reaching
    ``length`` positions (None: within the original length)."""
    rotated = int(d_k * positional["fraction"])
    frequencies = positional["base"] ** (-np.arange(0, rotated, 2, dtype=np.float64) / rotated)
    return frequencies if positional.get("scaling") is None else scaled(frequencies, positional, length)


def alibi_slopes(heads: int) -> np.ndarray:
    """float64 (heads,): ALiBi's penalty per unit of distance for each head (Press et al. 2022,
    §3): the geometric sequence 2^(-8/n), 2^(-16/n), ... for n heads, a power of two; for other
    counts, that of the largest power of two below, then every other slope of the next power's
    sequence (BLOOM's ``build_alibi_tensor``, MPT's ``gen_slopes``)."""
    closest = 2 ** math.floor(math.log2(heads))
    slopes = 2.0 ** (-8.0 * np.arange(1, closest + 1) / closest)
    if closest < heads:
        extra = 2.0 ** (-8.0 * np.arange(1, 2 * (heads - closest), 2) / (2 * closest))
        slopes = np.concatenate([slopes, extra])
    return slopes


def disentangled_rows(positions: Mapping[str, Any]) -> np.ndarray:
    """int64 (2 R + 1,): the row of the disentangled attention's relative table (2 x buckets
    rows) that query i reads for key j, for i - j = -R..R; at R and beyond, the table's last
    row, at -R and below its first (the rows saturate: look distances up clipped to [-R, R]).

    DeBERTa's ``make_log_bucket_position`` (He et al. 2021; DeBERTa-v2 and v3): distances up
    to buckets / 2 kept, longer ones log-spaced so that max_distance - 1 reaches the last
    bucket, then offset by buckets and clipped to the table; in its float32 arithmetic, so that
    distances on a ceiling's edge land where transformers puts them."""
    span, top = positions["buckets"], positions["max_distance"]
    mid = span // 2
    reach = top
    while True:
        distance = np.arange(-reach, reach + 1)
        far = np.where(np.abs(distance) < mid, mid - 1, np.abs(distance))
        step = np.log(far.astype(np.float32) / np.float32(mid)) / np.log(np.float32((top - 1) / mid))
        logarithmic = np.ceil(step * np.float32(mid - 1)) + mid
        bucket = np.where(far <= mid, distance, logarithmic * np.sign(distance)).astype(np.int64)
        rows = np.clip(bucket + span, 0, 2 * span - 1)
        if rows[0] == 0 and rows[-1] == 2 * span - 1:
            return rows
        reach *= 2
