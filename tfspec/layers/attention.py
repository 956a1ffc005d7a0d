"""Scaled dot-product multi-head attention (§3.2): full, causal (masked) and cross.

``Attention.visible`` states which keys each query may see as a boolean expression of
broadcast position indices, written with operators only, so the PyTorch backend (tensors),
the ONNX backend and the analysis passes (numpy) all evaluate the same definition.

Cost (matmul FLOPs, 2 per multiply-add): the Q/K/V and output projections, 2*n*d*h*(2d_k + d_v)
+ 2*n*h*d_v*d, are position-wise; the attention itself costs 2*h*(d_k + d_v) per visible
query-key pair. Table 1 counts only the latter, O(n^2 * d) for full attention, which is how
§4 can compare it with a recurrent layer's n*d^2 and find attention cheaper when n < d.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tfspec.layers.base import Sublayer, linear, register


class Attention(Sublayer):
    """softmax(Q K^T / sqrt(d_k)) V over h heads, concatenated and projected by W^O (eq. 1)."""

    component: ClassVar[str] = "attention"
    plain_causal: ClassVar[bool] = False
    """``visible`` is exactly k <= q, so fused causal kernels apply."""
    table1_terms: ClassVar[tuple[str, ...]] = ("scores", "values")

    def visible(self, q, k):
        """Boolean (Lq, Lk) mask from query positions ``q`` (Lq, 1) and key positions ``k``
        (1, Lk); ``None`` when every key is visible."""
        return None

    def reads(self, q, k):
        mask = self.visible(q, k)
        return (q >= 0) & (k >= 0) if mask is None else mask

    def pairs(self, s):
        """Query-key pairs whose scores are needed: n queries, n keys (m for cross-attention)."""
        return s.n * (s.m if self.needs_memory else s.n)

    def flops(self, s, dense=False):
        n, d, h, d_k, d_v = s.n, s.d, s.h, s.d_k, s.d_v
        keys = s.m if self.needs_memory else n
        pairs = n * keys if dense else self.pairs(s)
        if self.needs_memory:
            terms = {"q": 2 * n * d * h * d_k, "kv": 2 * keys * d * h * (d_k + d_v)}
        else:
            terms = {"qkv": 2 * n * d * h * (2 * d_k + d_v)}
        # Q K^T (pairs x d_k per head), then the weighted sum of values (pairs x d_v per head).
        return terms | {"scores": 2 * pairs * h * d_k, "values": 2 * pairs * h * d_v, "out": 2 * n * h * d_v * d}

    def lower(self, b, name, x):
        s = b.spec
        h, d_k, d_v, d = s.heads, s.d_k, s.d_v, s.d_model
        if self.needs_memory:
            # Queries from the decoder, keys and values from the encoder output (§3.2.3).
            params = linear("q", h * d_k, d, s.bias) | linear("kv", h * (d_k + d_v), d, s.bias)
            inputs = [x, b.memory]
        else:
            # Q, K and V projections fused into one matrix: one GEMM instead of three.
            params = linear("qkv", h * (2 * d_k + d_v), d, s.bias)
            inputs = [x]
        params |= linear("o", d, h * d_v, s.bias)
        attrs = {"kind": self.kind, "heads": h, "d_k": d_k, "d_v": d_v, "dropout": s.attention_dropout,
                 "kv_seq": b.memory_seq if self.needs_memory else b.seq}
        return b.op(name, "attention", inputs, attrs=attrs, params=params, layer=self)


@register
class SelfAttention(Attention):
    """Every position attends to every position of the same sequence (encoder, §3.2.3)."""

    kind: Literal["self_attention"] = "self_attention"
    stem: ClassVar[str] = "self_attn"

    @property
    def looks_ahead(self) -> bool:
        return True


@register
class CausalSelfAttention(Attention):
    """Position i attends to positions <= i: the decoder's masked self-attention (§3.2.3)."""

    kind: Literal["causal_self_attention"] = "causal_self_attention"
    stem: ClassVar[str] = "self_attn"
    plain_causal: ClassVar[bool] = True

    def visible(self, q, k):
        return k <= q

    def pairs(self, s):
        return s.n * (s.n + 1) / 2


@register
class CrossAttention(Attention):
    """Decoder queries attend to all encoder positions (encoder-decoder attention, §3.2.3)."""

    kind: Literal["cross_attention"] = "cross_attention"
    stem: ClassVar[str] = "cross_attn"
    needs_memory: ClassVar[bool] = True
