"""The PyTorch lowering of the IR ``attention`` op, for every attention kind.

Kinds differ only in which keys a query may see (``Attention.visible`` in tfspec.layers), so
one module serves all: fused QKV projection, ``scaled_dot_product_attention`` with the
kind's mask combined with key padding, and W^O. Kinds with a ``band`` (restricted attention)
run block by block over long sequences: each block of w queries against the keys of its
neighbouring blocks, so time and memory grow as n * w, not n^2.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tfspec.layers.attention import block_plan, use_blocks

from .registry import OpModule, lowering


@lowering("attention")
class MultiHeadAttention(OpModule):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (§3.2.2)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.h, self.d_k, self.d_v, self.p = a["heads"], a["d_k"], a["d_v"], a["dropout"]
        self.layer, self.q_seq, self.kv_seq = node.layer, node.shape[1], a["kv_seq"]
        self.score, self.positions = a["score"], a["positions"] or {}
        self.relative = self.positions.get("kind") == "relative"
        self.plain = self.score == "dot" and not self.relative
        """Fused kernels apply: dot-product scores with nothing added to them."""

    def forward(self, ctx, x, memory=None):
        h, d_k, d_v = self.h, self.d_k, self.d_v
        B, Lq = x.shape[:2]
        cache = ctx.state.cache if ctx.state is not None else None
        dropout = self.p if ctx.training else 0.0
        if memory is None:
            q, k, v = F.linear(x, self.w_qkv, getattr(self, "b_qkv", None)).split([h * d_k, h * d_k, h * d_v], -1)
            q, k, v = q.view(B, Lq, h, d_k), k.view(B, Lq, h, d_k), v.view(B, Lq, h, d_v)
            if self.positions.get("kind") == "rotary":  # one rotation table per call, for every layer
                offset, base = ctx.state.offset if ctx.state is not None else 0, self.positions["base"]
                cos, sin = ctx.cached(("rotary", offset, Lq, d_k, base),
                                      lambda: rotation(offset, Lq, d_k, base, x.device, x.dtype))
                q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            if cache is None and self.plain:
                return F.linear(self_attention(ctx, self.layer, self.q_seq, q, k, v, dropout), self.w_o,
                                getattr(self, "b_o", None))
            k, v = k.transpose(1, 2), v.transpose(1, 2)  # (B, h, Lq, d)
            if cache is not None:  # keys and values of earlier positions, then these
                if self.node_name in cache:
                    past_k, past_v = cache[self.node_name]
                    k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
                band = self.layer.band()
                # A banded kind never looks further back than its band: keep just that (O(r) per step).
                keep = k.shape[2] if band is None else min(k.shape[2], band[0])
                cache[self.node_name] = k[:, :, k.shape[2] - keep:], v[:, :, v.shape[2] - keep:]
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
        if self.plain:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout)
        else:
            y = self._explicit(q, k, v, mask, causal, dropout)
        y = y.transpose(1, 2).reshape(B, Lq, h * d_v)  # heads concatenated
        return F.linear(y, self.w_o, getattr(self, "b_o", None))

    def _explicit(self, q, k, v, mask, causal, dropout):
        """Attention with additive scores and/or relative positions, spelled out (B, h, L, d)."""
        Lq, Lk = q.shape[2], k.shape[2]
        if self.score == "additive":  # w_h · tanh(q_i + k_j) for each head h
            scores = torch.einsum("bhqkd,hd->bhqk", torch.tanh(q[:, :, :, None] + k[:, :, None]), self.w_score)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)
        if self.relative:  # Shaw et al. (2018), eq. 4: q_i · a_K(clip(j - i)) joins the score
            far = self.positions["max_distance"]
            offsets = torch.arange(Lk, device=q.device)[None, :] - torch.arange(Lk - Lq, Lk, device=q.device)[:, None]
            index = (offsets.clamp(-far, far) + far).expand(*scores.shape)
            scores = scores + (q @ self.rel_k.T / math.sqrt(self.d_k)).gather(-1, index)
        if causal:
            mask = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril(Lk - Lq)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = F.dropout(torch.softmax(scores, -1), dropout) if dropout else torch.softmax(scores, -1)
        y = weights @ v
        if self.relative:  # eq. 3: sum_j w_ij a_V(clip(j - i)), the weights summed per distance first
            per_distance = torch.zeros(*weights.shape[:-1], self.rel_v.shape[0], dtype=weights.dtype,
                                       device=weights.device).scatter_add_(-1, index, weights)
            y = y + per_distance @ self.rel_v
        return y


def rotation(offset: int, length: int, d: int, base: float, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (L, 1, d/2) of rotary position embedding (Su et al. 2021) at positions
    offset..offset+L-1: pair i turns by position x base^(-2i/d), computed in float64."""
    frequencies = base ** (-torch.arange(d // 2, dtype=torch.float64, device=device) * 2 / d)
    angles = torch.arange(offset, offset + length, dtype=torch.float64, device=device)[:, None] * frequencies
    return tuple(t.to(dtype)[:, None, :] for t in (angles.cos(), angles.sin()))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """(B, L, h, d) queries or keys with each pair (x_i, x_{i+d/2}) rotated by ``rotation``."""
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def rotary(x: torch.Tensor, offset: int, base: float) -> torch.Tensor:
    """(B, L, h, d) queries or keys at positions offset..offset+L-1, rotated."""
    return rotate(x, *rotation(offset, x.shape[1], x.shape[-1], base, x.device, x.dtype))


def self_attention(ctx, layer, seq: str, q, k, v, dropout: float) -> torch.Tensor:
    """Attention of ``layer``'s kind among the positions of one sequence: (B, L, h, d) queries,
    keys and values -> (B, L, h*d_v). Table 1's "complexity per layer" is this function's cost
    (``tfspec table1 --measure`` times it)."""
    B, L, h, d_v = v.shape
    if use_blocks(layer.band(), L):
        return banded_attention(ctx, layer, seq, q, k, v, dropout)
    mask, causal = ctx.attention_mask(layer, seq, seq, L, L, q.device)
    y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                       is_causal=causal, dropout_p=dropout)
    return y.transpose(1, 2).reshape(B, L, h * d_v)


def banded_attention(ctx, layer, seq: str, q, k, v, dropout: float) -> torch.Tensor:
    """Attention of a kind with a ``band`` over (B, L, h, d) queries, keys and values ->
    (B, L, h*d_v), computing only each block of w queries against the keys of its neighbouring
    blocks: (B * blocks, h, w, W) scores instead of (B, h, L, L)."""
    B, L, h, d_v = v.shape
    w, before, after = block_plan(layer.band())
    blocks = -(-L // w)
    mask = ctx.cached(("band", layer, seq, L), lambda: _band_mask(layer, B, L, ctx.padding.get(seq), q.device))
    q = _blocks(q, blocks * w - L, w).transpose(2, 3).flatten(0, 1)  # (B * blocks, h, w, d_k)
    k, v = (_windows(_blocks(t, blocks * w - L, w), before, after).transpose(2, 3).flatten(0, 1) for t in (k, v))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)  # (B * blocks, h, w, d_v)
    return y.view(B, blocks, h, w, d_v).transpose(2, 3).reshape(B, blocks * w, h * d_v)[:, :L]


def _band_mask(layer, B: int, L: int, pad, device) -> torch.Tensor:
    """bool (B * blocks, 1, w, W): the kind's ``visible`` on the true positions of each block's
    queries and keys, keys outside 0..L-1 and padded keys hidden."""
    w, before, after = block_plan(layer.band())
    blocks = -(-L // w)
    start = torch.arange(blocks, device=device)[:, None, None] * w
    q = start + torch.arange(w, device=device)[None, :, None]  # (blocks, w, 1)
    k = start - before * w + torch.arange((before + 1 + after) * w, device=device)[None, None, :]  # (blocks, 1, W)
    mask = layer.visible(q, k) & (k >= 0) & (k < L)  # (blocks, w, W)
    if pad is None:
        return mask.expand(B, -1, -1, -1).flatten(0, 1)[:, None]
    keys = _windows(_blocks(pad[..., None], blocks * w - L, w, True), before, after, True)[..., 0]  # (B, blocks, W)
    return (mask[None] & ~keys[:, :, None, :]).flatten(0, 1)[:, None]


def _blocks(t: torch.Tensor, extra: int, w: int, fill=0) -> torch.Tensor:
    """(B, L, ...) -> (B, blocks, w, ...), padding the end with ``extra`` positions of ``fill``."""
    if extra:
        t = torch.cat([t, t.new_full((t.shape[0], extra, *t.shape[2:]), fill)], 1)
    return t.view(t.shape[0], -1, w, *t.shape[2:])


def _windows(t: torch.Tensor, before: int, after: int, fill=0) -> torch.Tensor:
    """(B, blocks, w, ...) -> (B, blocks, (before + 1 + after) * w, ...): each block with its neighbours."""
    edge = t.new_full((t.shape[0], 1, *t.shape[2:]), fill)
    padded = torch.cat([edge] * before + [t] + [edge] * after, 1)
    blocks = t.shape[1]
    return torch.cat([padded[:, i:i + blocks] for i in range(before + 1 + after)], 2)
