"""Explicit sparse attention (Zhao et al. 2019) in ONNX graphs, as the PyTorch backend's: scores below
each row's k-th largest set far below any score. A graph serves every length, so k is min(k, keys)."""

from __future__ import annotations

import numpy as np

from . import score_modifier


@score_modifier("top_k")
def top_k(k: int):
    def keep_top(b, scores: str) -> str:  # (B, h, Lq, Lk)
        count = b.op("Min", b.const(np.array([k], dtype=np.int64)), b.op("Shape", scores, start=3, end=4))
        values, _ = b.op("TopK", scores, count, axis=-1, outputs=2)  # (B, h, Lq, min(k, Lk)), largest first
        kth = b.op("ReduceMin", values, b.ints(-1), keepdims=1)  # (B, h, Lq, 1)
        return b.op("Where", b.op("Less", scores, kth), b.neg(), scores)
    return keep_top
