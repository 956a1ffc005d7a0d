"""Query temperature by position (Llama 4's attention temperature tuning on its layers without
rotary positions, after Nakanishi 2025, "Scalable-Softmax", arXiv 2501.19399): a layer that sees
no positions otherwise multiplies the query at position i by 1 + s log(1 + floor((i + 1) / f)),
which sharpens attention over long contexts, where the softmax would flatten over many keys.
Nothing is learned; keys and values pass unchanged (the backends' stages
``backends/{torch,onnx}/positions/temperature.py``). Positions are each row's own, as rotary's:
transformers counts them by cache index, which differs only inside a left-padded batch."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tfspec.positions import PositionKind, register


@register
class Temperature(PositionKind):
    name, order = "temperature", 8
    summary = ("queries scaled by 1 + s log(1 + floor((i + 1) / f)) at position i, no parameters (Llama 4's "
               "attention temperature tuning on its layers without rotary positions)")
    in_attention = True
    adds_to_scores = False  # scales queries only: fused kernels apply
    bounded = False  # no table bounds the length
    reads_cache_indices = False  # each row's own position ids

    fields = {
        "temperature_floor": (Annotated[int, Field(ge=1, le=1 << 30)], Field(8192, description=(
            "temperature: f, the positions per step of the query scale (Llama 4's floor_scale)."))),
        "temperature_scale": (Annotated[float, Field(ge=0.0, le=1e3)], Field(0.1, description=(
            "temperature: s, the query scale's growth per log step (Llama 4's attn_scale)."))),
    }

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False
