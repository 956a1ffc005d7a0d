"""WavLM (``model_type: wavlm``): transformers' WavLMModel, WavLMForCTC and
WavLMForSequenceClassification as tfspec specs (Chen et al. 2022, "WavLM: Large-Scale
Self-Supervised Pre-Training for Full Stack Speech Processing"; microsoft/wavlm-base,
wavlm-base-plus, wavlm-large).

wav2vec 2.0's network (``wav2vec2.py``: the convolutional feature encoder, the feature projection,
the convolutional position embedding, post-norm base and pre-norm "stable layer norm" large models,
the CTC and sequence classification heads) with one difference inside attention: the gated
relative position bias (``positional.kind: gated_relative_bias``, ``tfspec.positions``): T5's
bidirectional buckets of the distance j - i (num_buckets, 320; max_bucket_distance, 800), one
(buckets, heads) table held by the first layer (``rel_attn_embed``), each layer gating it per head
and query from its input (``gru_rel_pos_linear``, ``gru_rel_pos_const``). Defaults are
WavLMConfig's, which are Wav2Vec2Config's plus those two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tfspec.interop.hf.family import Rule, number, register
from tfspec.interop.hf.layouts import Layout
from tfspec.interop.hf.wav2vec2 import Wav2Vec2
from tfspec.positions.gated_relative_bias import GATE_B, GATE_SCALE, GATE_W, TABLE


@dataclass(frozen=True)
class PerHeadScalar(Layout):
    """The IR's (h,) vector stored (1, h, 1, 1), to broadcast over (B, h, L, 1) (``gru_rel_pos_const``)."""

    def hf_shapes(self, shape, count: int) -> list:
        return [(1, *shape, 1, 1)]

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return parts[0].reshape(-1)

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [value.reshape(1, -1, 1, 1)]


@register
class WavLM(Wav2Vec2):
    model_type = "wavlm"
    title = "WavLM"
    architectures = {"WavLMModel": "", "WavLMForCTC": "wavlm.", "WavLMForSequenceClassification": "wavlm."}
    export_architecture = "WavLMModel"
    ctc_architecture = "WavLMForCTC"
    classification_architecture = "WavLMForSequenceClassification"
    mapped = (*Wav2Vec2.mapped, "num_buckets", "max_bucket_distance")
    ignored = {**Wav2Vec2.ignored, "num_ctc_classes": "no class reads it (WavLMConfig keeps it for pretraining)"}
    defaults: ClassVar[dict] = {**Wav2Vec2.defaults, "num_buckets": 320, "max_bucket_distance": 800}

    def spec_data(self, source) -> dict:
        c, where = self.defaults | source.config, source.where
        positional = {"kind": "gated_relative_bias", "buckets": number(c, "num_buckets", where),
                      "max_distance": number(c, "max_bucket_distance", where)}
        return super().spec_data(source) | {"positional": positional}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """wav2vec 2.0's, and each layer's gate; the first layer's ``rel_attn_embed``, the stack's table."""
        rules = super().rules(spec, architecture)
        for i in range(spec.encoder.num_layers):
            ours, theirs = f"encoder.layers.{i}.self_attn.", f"encoder.layers.{i}.attention."
            rules += [Rule(ours + GATE_W, (theirs + "gru_rel_pos_linear.weight",)),
                      Rule(ours + GATE_B, (theirs + "gru_rel_pos_linear.bias",)),
                      Rule(ours + GATE_SCALE, (theirs + "gru_rel_pos_const",), PerHeadScalar())]
        return rules + [Rule(f"encoder.layers.0.self_attn.{TABLE}", ("encoder.layers.0.attention.rel_attn_embed.weight",))]
