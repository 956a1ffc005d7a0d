"""Soft-capping (Gemma 2, Grok-1) in ONNX graphs, as the PyTorch backend's: c * tanh(s / c)."""

from __future__ import annotations

from . import score_modifier


@score_modifier("softcap")
def softcap(c: float):
    def modify(b, scores: str) -> str:
        cap = b.const(float(c))
        return b.op("Mul", b.op("Tanh", b.op("Div", scores, cap)), cap)
    return modify
