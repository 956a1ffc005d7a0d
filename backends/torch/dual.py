"""PyTorch lowerings of the embedding heads' and dual encoders' ops (``tfspec/ir/ops/dual.py``): the
text's pooled position, the attention probe, the projections, unit vectors and the scaled cosine
scores of every text against every image."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .layers import ACTIVATIONS
from .registry import OpModule, lowering


@lowering("token_select")
def token_select(node, graph):
    """(B, S, d), ids (B, S) -> (B, d): the first eos, the first largest id, or the last position
    (argmax of int32, as transformers' CLIPTextTransformer casts it)."""
    select, eos = node.attrs["select"], node.attrs["eos_id"]

    def pick(ctx, memory: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        if select == "last_token":
            return memory[:, -1]
        index = (ids.int() == eos).int().argmax(-1) if select == "eos_token" else ids.int().argmax(-1)  # (B,)
        return memory[torch.arange(memory.shape[0], device=memory.device), index]
    return pick


@lowering("attention_probe")
class AttentionProbe(OpModule):
    """One learned query over the tower's output: softmax(q K^T / sqrt(d_h)) V per head, the output
    projection, then y + MLP(LayerNorm(y)) (SiglipMultiheadAttentionPoolingHead, nn.MultiheadAttention)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.heads, self.eps = node.attrs["heads"], node.attrs["eps"]
        self.act = ACTIVATIONS[node.attrs["activation"]]

    def forward(self, ctx, x: torch.Tensor) -> torch.Tensor:
        (batch, length, d), h = x.shape, self.heads
        w_q, w_kv = self.w_qkv.split([d, 2 * d])
        b_q, b_kv = self.b_qkv.split([d, 2 * d])
        q = F.linear(self.probe, w_q, b_q).reshape(1, h, 1, d // h).expand(batch, -1, -1, -1)  # (B, h, 1, d_h)
        k, v = F.linear(x, w_kv, b_kv).reshape(batch, length, 2, h, d // h).permute(2, 0, 3, 1, 4)  # (B, h, V, d_h)
        y = F.scaled_dot_product_attention(q, k, v).reshape(batch, d)  # (B, h, 1, d_h) -> (B, d)
        y = F.linear(y, self.w_o, self.b_o)
        z = F.layer_norm(y, (d,), self.norm_weight, self.norm_bias, self.eps)
        return y + F.linear(self.act(F.linear(z, self.w_1, self.b_1)), self.w_2, self.b_2)


@lowering("pooled_projection")
class PooledProjection(OpModule):
    """x W^T (+ b): one vector per text or image into the shared space."""

    def forward(self, ctx, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, getattr(self, "bias", None))


@lowering("unit_vectors")
def unit_vectors(node, graph):
    """x / ||x||_2 over the last axis."""
    return lambda ctx, x: x / x.pow(2).sum(-1, keepdim=True).sqrt()


@lowering("pair_logits")
class PairLogits(OpModule):
    """exp(scale) rows columns^T (+ bias): (B, w), (N, w) -> (B, N)."""

    def forward(self, ctx, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        logits = rows @ columns.t() * self.scale.exp()
        return logits + self.bias if getattr(self, "bias", None) is not None else logits
