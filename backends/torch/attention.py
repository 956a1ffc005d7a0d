"""The PyTorch lowering of the IR ``attention`` op, for every attention kind.

Kinds differ only in which keys a query may see (``Attention.visible`` in tfspec.layers), so
one module serves all: fused QKV projection (keys and values of g <= h heads, each serving
h/g query heads, cached as g), ``scaled_dot_product_attention`` with the kind's mask combined
with key padding, and W^O. Kinds with a ``band`` (restricted attention) run block by block
over long sequences: each block of w queries against the keys of its neighbouring blocks, so
time and memory grow as n * w, not n^2.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from tfspec.ir.positions import rotary_frequencies
from tfspec.ir.rope_scaling import attention_factor, length_dependent
from tfspec.layers.attention import block_plan, fused_bias, use_blocks
from tfspec.registry import registrar

from .registry import OpModule, lowering
from .scores import SCORE_TERMS


@lowering("attention")
class MultiHeadAttention(OpModule):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (§3.2.2)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.h, self.g, self.d_k, self.d_v, self.p = a["heads"], a["kv_heads"], a["d_k"], a["d_v"], a["dropout"]
        self.layer, self.q_seq, self.kv_seq = node.layer, node.shape[1], a["kv_seq"]
        self.score, self.scale, self.positions = a["score"], a["scale"], a["positions"] or {}
        self.relative = self.positions.get("kind") == "relative"
        kind = self.positions.get("kind")
        self.terms = [SCORE_TERMS[kind](node)] if kind in SCORE_TERMS else []
        """What the positions add to the scores (``backends/torch/scores``)."""
        self.softcap, self.qk_norm, self.clip = a["softcap"], a["qk_norm"], a.get("clip")
        self.norm_type, self.norm_eps = a.get("norm_type"), a.get("norm_eps")
        self.plain = self.score == "dot" and not self.relative and not self.terms and self.softcap is None
        """Fused kernels apply: dot-product scores with nothing added to them."""
        self.rotary = Rotation(self.d_k, self.positions) if self.positions.get("kind") == "rotary" else None
        self.bias_pieces = fused_bias(node.params, "kv" if node.layer.needs_memory else "qkv", a)

    def forward(self, ctx, x, memory=None):
        h, g, d_k, d_v = self.h, self.g, self.d_k, self.d_v
        B, Lq = x.shape[:2]
        cache = ctx.state.cache if ctx.state is not None else None
        dropout = self.p if ctx.training else 0.0
        if memory is None:
            qkv = F.linear(x, self.w_qkv, self._fused_bias())
            if self.clip is not None:  # OLMo's clip_qkv
                qkv = qkv.clamp(-self.clip, self.clip)
            q, k, v = qkv.split([h * d_k, g * d_k, g * d_v], -1)
            q, k, v = q.view(B, Lq, h, d_k), k.view(B, Lq, g, d_k), v.view(B, Lq, g, d_v)
            if self.qk_norm != "none":
                q, k = self._normed(q, "q"), self._normed(k, "k")
            if self.rotary is not None:  # one rotation table per call, for every layer
                cos, sin = self.rotary(ctx, self.q_seq, Lq, x)
                q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            if cache is None and self.plain:
                k, v = repeat_heads(k, h // g, 2), repeat_heads(v, h // g, 2)
                return F.linear(self_attention(ctx, self.layer, self.q_seq, q, k, v, dropout), self.w_o,
                                getattr(self, "b_o", None))
            k, v = k.transpose(1, 2), v.transpose(1, 2)  # (B, g, Lq, d)
            if cache is not None:  # keys and values of earlier positions, then these
                if self.node_name in cache:
                    past_k, past_v = cache[self.node_name]
                    k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
                # A banded kind never looks further back than its band: keep just that (O(r) per step).
                keep = self.layer.kept(k.shape[2])
                cache[self.node_name] = k[:, :, k.shape[2] - keep:], v[:, :, v.shape[2] - keep:]
        else:
            q = F.linear(x, self.w_q, getattr(self, "b_q", None))
            q = q if self.clip is None else q.clamp(-self.clip, self.clip)
            if self.qk_norm != "none":
                q = self._normed(q.view(B, Lq, h, d_k), "q")
            if cache is not None and self.node_name in cache:  # the source's, computed at the first step
                k, v = cache[self.node_name]
            else:
                kv = F.linear(memory, self.w_kv, self._fused_bias())
                kv = kv if self.clip is None else kv.clamp(-self.clip, self.clip)
                k, v = kv.split([g * d_k, g * d_v], -1)
                k = k.view(B, -1, g, d_k)
                k = (self._normed(k, "k") if self.qk_norm != "none" else k).transpose(1, 2)  # (B, g, Lk, d_k)
                v = v.view(B, -1, g, d_v).transpose(1, 2)  # (B, g, Lk, d_v)
                if cache is not None:
                    cache[self.node_name] = k, v
                    ctx.state.cross.add(self.node_name)
        k, v = repeat_heads(k, h // g, 1), repeat_heads(v, h // g, 1)  # (B, h, Lk, d): cached as g heads
        Lk = k.shape[2]
        q = q.view(B, Lq, h, d_k).transpose(1, 2)  # (B, h, Lq, d_k)
        mask, causal = ctx.attention_mask(self.layer, self.q_seq, self.kv_seq, Lq, Lk, x.device)
        if self.plain:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout,
                                               scale=self.scale)
        else:
            y = self._explicit(ctx, q, k, v, mask, causal, dropout)
        y = y.transpose(1, 2).reshape(B, Lq, h * d_v)  # heads concatenated
        return F.linear(y, self.w_o, getattr(self, "b_o", None))

    def _fused_bias(self) -> torch.Tensor | None:
        """The bias of the fused Q/K/V (or K/V) GEMM: one parameter, or the parts' biases with
        zeros for an unbiased part (``fused_bias``)."""
        if self.bias_pieces is None:
            return None
        parts = [getattr(self, name) if name else self.w_o.new_zeros(rows) for name, rows in self.bias_pieces]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _normed(self, x: torch.Tensor, part: str) -> torch.Tensor:
        """``qk_norm`` of (B, L, heads, d) queries or keys: over each head's d features (one gain
        for all heads, or one per head), or over the whole projection (a gain per feature), in float32."""
        weight, bias = getattr(self, f"{part}_norm"), getattr(self, f"{part}_norm_bias", None)
        if self.qk_norm == "per_head":  # the (heads, d) gain broadcasts over (B, L, heads, d)
            plain = F.rms_norm if self.norm_type == "rms" else F.layer_norm
            return weight * plain(x.float(), x.shape[-1:], eps=self.norm_eps).to(x.dtype)
        flat = x.flatten(2) if self.qk_norm == "all" else x
        if self.norm_type == "rms":
            y = weight * F.rms_norm(flat.float(), weight.shape, eps=self.norm_eps).to(x.dtype)
        else:
            y = F.layer_norm(flat, weight.shape, weight, bias, self.norm_eps)
        return y.view_as(x)

    def _explicit(self, ctx, q, k, v, mask, causal, dropout):
        """Attention with additive scores and/or relative positions, spelled out (B, h, L, d)."""
        Lq, Lk = q.shape[2], k.shape[2]
        if self.score == "additive":  # w_h · tanh(q_i + k_j) for each head h
            scores = torch.einsum("bhqkd,hd->bhqk", torch.tanh(q[:, :, :, None] + k[:, :, None]), self.w_score)
        else:
            scores = q @ k.transpose(-1, -2) * self.scale
        if self.softcap is not None:  # Gemma 2: c * tanh(s / c) bounds every logit by c
            scores = torch.tanh(scores / self.softcap) * self.softcap
        if self.relative:  # Shaw et al. (2018), eq. 4: q_i · a_K(clip(j - i)) joins the score
            far = self.positions["max_distance"]
            offsets = torch.arange(Lk, device=q.device)[None, :] - torch.arange(Lk - Lq, Lk, device=q.device)[:, None]
            index = (offsets.clamp(-far, far) + far).expand(*scores.shape)
            scores = scores + (q @ self.rel_k.T * self.scale).gather(-1, index)
        for term in self.terms:  # T5's bucketed bias, ALiBi's distance penalty, DeBERTa's disentangled terms
            scores = scores + term(ctx, self, q, k)
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


def repeat_heads(t: torch.Tensor, times: int, dim: int) -> torch.Tensor:
    """Each of g key/value heads along ``dim`` repeated for the ``times`` query heads it serves:
    query head i reads key/value head i // times (transformers' ``repeat_kv``)."""
    return t if times == 1 else t.repeat_interleave(times, dim)


class Rotation:
    """The cos and sin one layer's rotary positions turn queries and keys by in a call: of
    fixed frequencies, or (dynamic and longrope scaling) of those for the length the call
    reaches, its last position + 1, as transformers' ``dynamic_rope_update`` reads it; times
    the scaling's attention factor (YaRN, LongRoPE). Layers alike share one table per call."""

    def __init__(self, d: int, positions: dict):
        self.d, self.positions = d, positions
        self.varies, self.factor = length_dependent(positions), attention_factor(positions)
        self.frequencies = torch.from_numpy(rotary_frequencies(d, positions))

    def __call__(self, ctx, seq: str, length: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        offset, rows = ctx.start(seq), ctx.positions.get(seq)
        frequencies = self.frequencies
        if self.varies:
            reach = int(rows.max()) + 1 if rows is not None else offset + length
            frequencies = torch.from_numpy(rotary_frequencies(self.d, self.positions, reach))
        return ctx.cached(("rotary", offset, length, frequencies.numpy().tobytes(), self.factor), lambda: rotation(
            frequencies, offset if rows is None else rows, length, x.device, x.dtype, self.factor))


def rotation(frequencies: torch.Tensor, offset, length: int, device, dtype,
             factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (L, 1, r/2) of rotary position embedding (Su et al. 2021) at positions
    offset..offset+L-1, or (B, L, 1, r/2) at each row's positions when ``offset`` is an int64
    (B, L) tensor: pair i turns by position x frequencies[i] (``rotary_frequencies``),
    computed in float64; both times ``factor`` (``attention_factor``)."""
    if isinstance(offset, torch.Tensor):
        positions = offset.to(device, torch.float64)
    else:
        positions = torch.arange(offset, offset + length, dtype=torch.float64, device=device)
    angles = positions[..., None] * frequencies.to(device)
    return tuple((t * factor).to(dtype)[..., None, :] for t in (angles.cos(), angles.sin()))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """(B, L, h, d) queries or keys with each pair (x_i, x_{i+r/2}) of their first r features
    rotated by ``rotation`` (r = d unless partial; transformers' rotate_half layout, as Llama's
    published weights expect); features r..d pass unchanged."""
    half = cos.shape[-1]
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], -1)


def rotary(x: torch.Tensor, offset: int, base: float) -> torch.Tensor:
    """(B, L, h, d) queries or keys at positions offset..offset+L-1, every feature rotated."""
    frequencies = torch.from_numpy(rotary_frequencies(x.shape[-1], {"base": base, "fraction": 1.0}))
    return rotate(x, *rotation(frequencies, offset, x.shape[1], x.device, x.dtype))


TILED: dict[str, Callable] = {}
"""Kind -> its own ``self_attention`` over whole sequences (local 2D attention gathers memory
blocks); the kind's other paths (decoding steps) use its mask."""


tiled = registrar(TILED, "PyTorch attentions for kind")
"""Decorator registering ``fn(ctx, layer, seq, q, k, v, dropout)`` as ``kind``'s attention."""


def self_attention(ctx, layer, seq: str, q, k, v, dropout: float) -> torch.Tensor:
    """Attention of ``layer``'s kind among the positions of one sequence: (B, L, h, d) queries,
    keys and values -> (B, L, h*d_v). Table 1's "complexity per layer" is this function's cost
    (``tfspec table1 --measure`` times it)."""
    B, L, h, d_v = v.shape
    if layer.kind in TILED:
        return TILED[layer.kind](ctx, layer, seq, q, k, v, dropout)
    if use_blocks(layer.band(), L):
        return banded_attention(ctx, layer, seq, q, k, v, dropout)
    mask, causal = ctx.attention_mask(layer, seq, seq, L, L, q.device)
    y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                       is_causal=causal, dropout_p=dropout, scale=layer.scale)
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
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                       scale=layer.scale)  # (B * blocks, h, w, d_v)
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
