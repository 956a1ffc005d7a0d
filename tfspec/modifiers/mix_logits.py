"""Talking-heads attention, before the softmax (Shazeer et al. 2020, "Talking-Heads Attention", §4):
the h heads' logits of each query-key pair mixed by a learned h x h matrix P_l,
J'[g] = sum_h P_l[g, h] J[h], after the position terms and before the mask, so each head's weights
are computed from all heads' scores. ``mix_weights`` is the paper's second matrix, after the softmax.
The paper allows different numbers of heads before and after each mix; here both are h.
x-transformers' ``attn_pre_talking_heads`` computes J + W J (a 1x1 convolution added to its input),
which is P_l = I + W; it mixes before ALiBi-like biases, tfspec after the position terms (the same
where no position kind adds to the scores). The backends' parts:
``backends/{torch,onnx}/modifiers/mix_logits.py``.

What else it changes: h^2 parameters per layer; 2 h^2 FLOPs per scored pair, which Table 1 counts
(complexity per layer O(n^2 (d + h^2))); nothing cached beyond keys and values (the mix is within one
pair), so KV-cached decoding is exact; its backward keeps the unmixed logits (one L x L copy). Fused
kernels see one head at a time, so the scores are spelled out."""

from __future__ import annotations

from tfspec.modifiers import ScoreModifier, register


class HeadMix(ScoreModifier):
    """A learned h x h matrix mixing the heads of each query-key pair (talking heads)."""

    annotation = bool
    default = False
    reads_params = True
    per_pair = True

    @classmethod
    def params(cls, layer, value) -> dict:
        return {cls.field: ((layer.heads, layer.heads), "xavier_uniform")}

    @classmethod
    def flops(cls, s, layer, value, pairs):
        return 2 * pairs * s.h * s.h  # h x h multiply-adds per pair


@register
class MixLogits(HeadMix):
    field = "mix_logits"
    description = ("The heads' logits of each query-key pair mixed by a learned h x h matrix before the mask and\n"
                   "softmax (talking-heads attention, Shazeer et al. 2020; x-transformers' attn_pre_talking_heads\n"
                   "is this matrix minus I); off: each head's weights from its own scores (§3.2.2).")
    order = 0  # before the soft-cap, which bounds what the mix leaves
