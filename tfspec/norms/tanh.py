"""Dynamic tanh in place of a norm (Zhu et al. 2025, "Transformers without Normalization", eq. 1):
DyT(x) = gamma * tanh(alpha * x) + beta, elementwise, with one learned scalar alpha and a gain
gamma and shift beta per feature. It computes no statistic over the features, so no eps; alpha
starts at 0.5, the paper's default alpha_0 (§7: 0.5 works for the non-LLM models it trains).
x-transformers' ``use_dynamic_tanh`` computes the same with alpha starting at its
``dynamic_tanh_init_alpha`` (1.0); the starting value only matters to training."""

from __future__ import annotations

from tfspec.norms import NormKind, register

ALPHA_0 = 0.5
"""alpha's starting value (Zhu et al. 2025, §7, for non-LLM models)."""


@register
class Tanh(NormKind):
    name, order, op = "tanh", 30, "tanh_norm"
    summary = ("dynamic tanh (Zhu et al. 2025) in place of a norm, gamma * tanh(alpha * x) + beta: a learned "
               f"scalar alpha (starting at {ALPHA_0}), a gain and a bias per feature, no statistics.")
    bias_default = takes_bias = True

    @classmethod
    def params(cls, spec, width: int) -> dict:
        return {"alpha": ((1,), f"constant:{ALPHA_0!r}")} | super().params(spec, width)
