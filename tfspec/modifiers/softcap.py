"""Soft-capping (Gemma 2's attn_logit_softcapping: 50; Grok-1's 30): scores squashed to
c * tanh(s / c), which bounds every logit by c while keeping their order. The backends' parts:
``backends/{torch,onnx}/modifiers/softcap.py``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tfspec.modifiers import ScoreModifier, register


@register
class Softcap(ScoreModifier):
    field = "softcap"
    annotation = Annotated[float, Field(gt=0, le=1e6)] | None
    description = ("Scores squashed to c * tanh(s / c) after any position terms, before the mask and softmax\n"
                   "(Gemma 2's attn_logit_softcapping: 50), so the cap bounds every logit; None: no cap.")
    order = 100  # last: the cap bounds the logit any other modifier leaves

    @classmethod
    def problem(cls, layer, value) -> str | None:
        if layer.score != "dot":  # additive scores are not logits of a dot product
            return (f"softcap ({value}) caps dot-product scores, but score is {layer.score}: remove softcap "
                    "or use score: dot")
        return None
