"""T5's relative attention bias (Raffel et al. 2020, §2.1): positional kind ``relative_bias``.

Each head adds a learned scalar to the logit of query i and key j, chosen by the bucket of
the distance j - i: buckets / 2 exact distances, then buckets log-spaced up to max_distance,
from where on every distance shares the last bucket (Mesh TensorFlow's
``_relative_position_bucket``). Attention that may look ahead (T5's encoder) gives each sign
of the distance half the buckets; attention that never does (its decoder) spends them all on
distances behind. One (buckets, heads) table serves every self-attention layer of a stack:
the first declares it and the others tie to it, as T5 computes the bias in its first layer
and hands it up; with ``tables: layer`` each self-attention layer has its own (umT5). Since
distances past max_distance share a bucket, the bucket of any distance is a lookup of the
clipped distance in 2 max_distance + 1 entries (``bucket_table``), computed here once for
both backends, for any length and for decoding steps alike.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

ROLE = "rel_bias"
"""The attention node's parameter role of the table."""


def bucket_table(positions: Mapping[str, Any], bidirectional: bool) -> np.ndarray:
    """int64 (2 D + 1,): the bucket of each distance j - i = -D..D (D = max_distance), as T5's
    ``_relative_position_bucket`` computes it, in its float32 arithmetic so that distances on a
    bucket boundary (16, 32 and 64 with T5's settings) land where transformers puts them."""
    reach, buckets = positions["max_distance"], positions["buckets"]
    distance = np.arange(-reach, reach + 1)
    bucket = np.zeros_like(distance)
    if bidirectional:  # keys after the query: the upper half of the buckets
        buckets //= 2
        bucket += (distance > 0) * buckets
        distance = np.abs(distance)
    else:
        distance = -np.minimum(distance, 0)
    exact = buckets // 2
    ratio = np.maximum(distance, exact).astype(np.float32) / np.float32(exact)  # >= 1: the log branch's domain
    logarithmic = np.log(ratio) / np.float32(math.log(reach / exact)) * np.float32(buckets - exact)
    far = np.minimum(exact + logarithmic.astype(np.int64), buckets - 1)
    return bucket + np.where(distance < exact, distance, far)


def table_param(b, name: str, positions, heads: int) -> dict:
    """The ``rel_bias`` entry of the attention node ``name``'s parameters: the (buckets, heads)
    table, declared by the stack's first self-attention and tied by the later ones, or the
    layer's own (``tables: layer``)."""
    init, shape = f"normal:{b.spec.d_model ** -0.5}", (positions.buckets, heads)  # T5's initialisation
    return {ROLE: (shape, init) if positions.tables == "layer" else b.stack_param(name, ROLE, shape, init)}
