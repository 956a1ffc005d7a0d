"""Talking-heads attention, after the softmax (Shazeer et al. 2020, §4): the h heads' weights of each
query-key pair mixed by a learned h x h matrix P_w, W'[g] = sum_h P_w[g, h] W[h], before they
multiply the values, so each head's output reads the other heads' attention patterns.
x-transformers' ``attn_post_talking_heads`` is the same matrix (a 1x1 convolution, no residual).
Its costs are ``mix_logits``'s (h^2 parameters, 2 h^2 FLOPs per pair counted by Table 1, nothing
cached, KV-cached decoding exact); its backward keeps the mixed weights the values multiply (one
L x L copy). The backends' parts: ``backends/{torch,onnx}/modifiers/mix_weights.py``."""

from __future__ import annotations

from tfspec.modifiers import register
from tfspec.modifiers.mix_logits import HeadMix


@register
class MixWeights(HeadMix):
    field = "mix_weights"
    description = ("The heads' attention weights of each query-key pair mixed by a learned h x h matrix after the\n"
                   "softmax, before the values (talking-heads attention, Shazeer et al. 2020; x-transformers'\n"
                   "attn_post_talking_heads); off: each head's values weighted by its own weights (§3.2.2).")
    stage = "weights"
