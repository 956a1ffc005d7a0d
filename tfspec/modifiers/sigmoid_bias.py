"""Sigmoid attention (Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for Sigmoid
Self-Attention"): each key's weight is sigmoid(score + b) on its own, in place of the softmax
over the keys, so the weights of a query no longer sum to 1 and no row-wide normalisation is needed.
The paper sets b = -log(n) for training sequences of n tokens, which keeps the weights' sum
near 1 at the start of training; x-transformers' ``attn_sigmoid`` is the same with b = 0. Masked keys
weigh sigmoid(-inf) = 0. The backends' parts: ``backends/{torch,onnx}/modifiers/sigmoid_bias.py``.

What else it changes: no parameters, no FLOPs counted (the element-wise sigmoid replaces the
softmax's exponentials), nothing cached beyond keys and values, so KV-cached decoding is exact;
its backward keeps its output as the softmax's does (``saved_scores`` 0). Fused softmax kernels
cannot compute it, so the scores are spelled out."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tfspec.modifiers import ScoreModifier, register


@register
class SigmoidBias(ScoreModifier):
    field = "sigmoid_bias"
    annotation = Annotated[float, Field(ge=-1e3, le=1e3)] | None
    description = ("Attention weights sigmoid(score + b), each key on its own, in place of the softmax (sigmoid\n"
                   "attention, Ramapuram et al. 2024): b is this value, the paper's -log(n) for training length n\n"
                   "(x-transformers' attn_sigmoid: 0); None: softmax weights (§3.2.1).")
    stage = "weighting"
    saved_scores = 0  # sigmoid's backward keeps its output, as softmax's does

    @classmethod
    def problem(cls, layer, value) -> str | None:
        if layer.sinks:  # a sink joins a softmax's denominator; sigmoid weights have none
            return (f"sigmoid_bias ({value}) weighs each key on its own, with no denominator for sinks to join: "
                    "remove sinks or sigmoid_bias")
        return None
