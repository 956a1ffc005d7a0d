"""The PyTorch lowering of the IR ``latent_attention`` op (``tfspec.layers.latent_attention``):
multi-head latent attention, caching per position the normalised latent c and the rotated
shared key part (kv_lora_rank + qk_rope_head_dim values), from which every step decodes the
heads' keys and values again, as transformers' DeepseekV2Attention does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .positions.rotary import Rotation, rotate
from .registry import OpModule, lowering


@lowering("latent_attention")
class LatentAttention(OpModule):
    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.h, self.nope, self.rope, self.d_v = a["heads"], a["qk_nope_head_dim"], a["qk_rope_head_dim"], a["d_v"]
        self.rank, self.eps, self.scale, self.p = a["kv_lora_rank"], a["latent_eps"], a["scale"], a["dropout"]
        self.layer, self.seq = node.layer, node.shape[1]
        positions = a["positions"]
        self.rotary = None if positions is None else Rotation(self.rope, positions)

    def forward(self, ctx, x):
        B, Lq = x.shape[:2]
        h, nope, rope = self.h, self.nope, self.rope
        if getattr(self, "w_q", None) is not None:
            q = F.linear(x, self.w_q)
        else:
            q = F.linear(self._norm(F.linear(x, self.w_qa), self.q_norm), self.w_qb)
        q_nope, q_pe = q.view(B, Lq, h, nope + rope).split([nope, rope], -1)  # (B, Lq, h, .)
        c, k_pe = F.linear(x, self.w_kva).split([self.rank, rope], -1)  # (B, Lq, rank), (B, Lq, rope)
        c, k_pe = self._norm(c, self.kv_norm), k_pe[:, :, None]  # k_pe: one head for all
        if self.rotary is not None:
            cos, sin = self.rotary(ctx, self.seq, Lq, x)
            q_pe, k_pe = rotate(q_pe, cos, sin), rotate(k_pe, cos, sin)
        latent = torch.cat([c, k_pe[:, :, 0]], -1)  # (B, Lq, rank + rope): what decoding caches
        cache = ctx.state.cache if ctx.state is not None else None
        if cache is not None:
            if self.node_name in cache:
                latent = torch.cat([cache[self.node_name][0], latent], 1)
            cache[self.node_name] = (latent,)
        Lk = latent.shape[1]
        c, k_pe = latent.split([self.rank, rope], -1)
        k_nope, v = F.linear(c, self.w_kvb).view(B, Lk, h, nope + self.d_v).split([nope, self.d_v], -1)
        k = torch.cat([k_nope, k_pe[:, :, None].expand(B, Lk, h, rope)], -1)  # (B, Lk, h, d_k)
        q = torch.cat([q_nope, q_pe], -1)
        mask, causal = ctx.attention_mask(self.layer, self.seq, self.seq, Lq, Lk, x.device)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                           is_causal=causal, dropout_p=self.p if ctx.training else 0.0,
                                           scale=self.scale)  # (B, h, Lq, d_v)
        return F.linear(y.transpose(1, 2).reshape(B, Lq, h * self.d_v), self.w_o)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm of a latent in float32, as DeepSeek's (epsilon ``latent_eps``)."""
        return weight * F.rms_norm(x.float(), weight.shape, eps=self.eps).to(x.dtype)
