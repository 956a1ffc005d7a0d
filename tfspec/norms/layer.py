"""LayerNorm (Ba et al. 2016, §3.1), the paper's norm: (x - mean) / sqrt(var + eps) * gain + bias
over each position's features. Every post-2017 encoder and GPT-2-style decoder; without a bias
(``norm_bias: false``) Cohere and OLMo; without any parameter OLMo 1."""

from __future__ import annotations

from tfspec.norms import NormKind, register


@register
class Layer(NormKind):
    name, order, op = "layer", 0, "layer_norm"
    summary = "LayerNorm (Ba et al. 2016), (x - mean) / sqrt(var + eps) times a gain plus a bias (the paper)."
    bias_default = takes_bias = inside_ops = True
