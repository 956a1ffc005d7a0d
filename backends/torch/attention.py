"""The PyTorch lowering of the IR ``attention`` op, for every attention kind.

Kinds differ only in which keys a query may see (``Attention.visible`` in tfspec.layers), so
one module serves all: fused QKV projection, ``scaled_dot_product_attention`` with the
kind's mask combined with key padding, and W^O.
"""

from __future__ import annotations

import torch
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
        B, Lq = x.shape[:2]
        cache = ctx.state.cache if ctx.state is not None else None
        if memory is None:
            q, k, v = F.linear(x, self.w_qkv, getattr(self, "b_qkv", None)).split([h * d_k, h * d_k, h * d_v], -1)
            k = k.view(B, Lq, h, d_k).transpose(1, 2)  # (B, h, Lq, d_k)
            v = v.view(B, Lq, h, d_v).transpose(1, 2)  # (B, h, Lq, d_v)
            if cache is not None:  # keys and values of earlier positions, then these
                if self.node_name in cache:
                    past_k, past_v = cache[self.node_name]
                    k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
                cache[self.node_name] = k, v
        else:
            q = F.linear(x, self.w_q, getattr(self, "b_q", None))
            if cache is not None and self.node_name in cache:  # the source's, computed at the first step
                k, v = cache[self.node_name]
            else:
                k, v = F.linear(memory, self.w_kv, getattr(self, "b_kv", None)).split([h * d_k, h * d_v], -1)
                k = k.view(B, -1, h, d_k).transpose(1, 2)  # (B, h, Lk, d_k)
                v = v.view(B, -1, h, d_v).transpose(1, 2)  # (B, h, Lk, d_v)
                if cache is not None:
                    cache[self.node_name] = k, v
                    ctx.state.cross.add(self.node_name)
        Lk = k.shape[2]
        q = q.view(B, Lq, h, d_k).transpose(1, 2)  # (B, h, Lq, d_k)
        mask, causal = ctx.attention_mask(self.layer, self.q_seq, self.kv_seq, Lq, Lk, x.device)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                           dropout_p=self.p if ctx.training else 0.0)
        y = y.transpose(1, 2).reshape(B, Lq, h * d_v)  # heads concatenated
        return F.linear(y, self.w_o, getattr(self, "b_o", None))
