"""The PyTorch lowering of the IR ``attention`` op, for every attention kind.

Kinds differ only in which keys a query may see (``Attention.visible`` in tfspec.layers), so
one module serves all: fused QKV projection, ``scaled_dot_product_attention`` with the
kind's mask combined with key padding, and W^O.
"""

from __future__ import annotations

import torch.nn.functional as F

from .registry import OpModule, lowering


@lowering("attention")
class MultiHeadAttention(OpModule):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (§3.2.2)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.h, self.d_k, self.d_v, self.p = a["heads"], a["d_k"], a["d_v"], a["dropout"]
        self.layer, self.q_seq, self.kv_seq = node.layer, node.shape[1], a["kv_seq"]

    def forward(self, ctx, x, memory=None):
        h, d_k, d_v = self.h, self.d_k, self.d_v
        if memory is None:
            q, k, v = F.linear(x, self.w_qkv, getattr(self, "b_qkv", None)).split([h * d_k, h * d_k, h * d_v], -1)
        else:
            q = F.linear(x, self.w_q, getattr(self, "b_q", None))
            k, v = F.linear(memory, self.w_kv, getattr(self, "b_kv", None)).split([h * d_k, h * d_v], -1)
        B, Lq, Lk = x.shape[0], q.shape[1], k.shape[1]
        q = q.view(B, Lq, h, d_k).transpose(1, 2)  # (B, h, Lq, d_k)
        k = k.view(B, Lk, h, d_k).transpose(1, 2)  # (B, h, Lk, d_k)
        v = v.view(B, Lk, h, d_v).transpose(1, 2)  # (B, h, Lk, d_v)
        mask, causal = ctx.attention_mask(self.layer, self.q_seq, self.kv_seq, Lq, Lk, x.device)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                           dropout_p=self.p if ctx.training else 0.0)
        y = y.transpose(1, 2).reshape(B, Lq, h * d_v)  # heads concatenated
        return F.linear(y, self.w_o, getattr(self, "b_o", None))
