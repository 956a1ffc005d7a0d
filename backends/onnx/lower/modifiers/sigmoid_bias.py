"""Sigmoid attention (Ramapuram et al. 2024) in ONNX graphs, as the PyTorch backend's:
weights sigmoid(s + b) in place of the softmax; masked logits (far below any score) weigh 0."""

from __future__ import annotations

from . import score_modifier


@score_modifier("sigmoid_bias")
def sigmoid_bias(bias: float):
    def weigh(b, scores: str) -> str:
        return b.op("Sigmoid", b.op("Add", scores, b.const(float(bias))) if bias else scores)
    return weigh
