"""Sinusoidal positions (§3.5): fixed sines and cosines added to the embeddings
(``tfspec.ir.positions.sinusoids``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tfspec.positions import PositionKind, register


@register
class Sinusoidal(PositionKind):
    name, order, summary = "sinusoidal", 0, "fixed sines/cosines added to the embeddings"
    embedded = True
    reads = ("offset",)
    reads_cache_indices = False  # each row's own position ids

    fields = {
        "layout": (Literal["interleaved", "halves"], Field("interleaved", description=(
            "sinusoidal: where the sines and cosines go. interleaved: sin at even features, cos at odd\n"
            "(§3.5 as the paper writes it); halves: all sines, then all cosines of the same frequencies\n"
            "(tensor2tensor's and Marian's layout, which transformers' MarianMT keeps)."))),
        "spacing": (Literal["paper", "endpoint"], Field("paper", description=(
            "sinusoidal: the frequencies. paper: 10000^(-2i/d) (§3.5); endpoint: 10000^(-i/(d/2 - 1)),\n"
            "the last exactly 1/10000 (tensor2tensor's timing signal as fairseq computes it: M2M-100,\n"
            "NLLB-200; ``tfspec.ir.positions.sinusoids``)."))),
    }

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False
