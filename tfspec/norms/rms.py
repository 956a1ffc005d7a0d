"""RMSNorm (Zhang & Sennrich 2019, eq. 4): x / sqrt(mean(x^2) + eps) * gain, no mean subtracted
and no bias, in float32 (Llama, Mistral, Qwen, Gemma, T5's "layer norm")."""

from __future__ import annotations

from tfspec.norms import NormKind, register


@register
class Rms(NormKind):
    name, order, op = "rms", 10, "rms_norm"
    summary = "RMSNorm (Zhang & Sennrich 2019), x / sqrt(mean(x^2) + eps) times a gain, no mean, no bias (Llama)."
    inside_ops = True

    @classmethod
    def problem(cls, spec):
        if spec.norm_bias:
            return "norm_bias", "RMSNorm has no bias (it subtracts no mean): drop norm_bias or use norm_type: layer"
        return None
