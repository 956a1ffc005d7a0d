"""The PyTorch lowering of the IR ``attention`` op, for every attention kind, built from stages:
project (``projection``: fused QKV, clip, qk_norm) -> positions (``positions``: rotary turns
queries and keys, relative adds to the logits and the output; ``scores``: terms added to the
logits) -> score modifiers (``modifiers``: softcap) -> mask -> cache. Each stage is a registered
module per kind, so a new position kind or score modifier is one module (and its ONNX twin).

Kinds differ only in which keys a query may see (``Attention.visible`` in tfspec.layers), so
one module serves all: keys and values of g <= h heads, each serving h/g query heads, cached
as g; ``scaled_dot_product_attention`` with the kind's mask combined with key padding where
nothing is added to the scores; W^O. Kinds with a ``band`` (restricted attention) run block by
block over long sequences: each block of w queries against the keys of its neighbouring blocks,
so time and memory grow as n * w, not n^2.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from tfspec.layers.attention import block_plan, fused_bias, fused_kernel, kernel_for, use_blocks
from tfspec.registry import registrar

from . import crosslayer
from .modifiers import modifiers_of
from .positions import stage_of
from .projection import normed, project, project_memory, project_queries
from .registry import OpModule, lowering


@lowering("attention")
class MultiHeadAttention(OpModule):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (§3.2.2)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.h, self.g, self.d_k, self.d_v, self.p = a["heads"], a["kv_heads"], a["d_k"], a["d_v"], a["dropout"]
        self.layer, self.q_seq, self.kv_seq = node.layer, node.shape[1], a["kv_seq"]
        self.score, self.scale, self.qk_norm, self.clip = a["score"], a["scale"], a["qk_norm"], a.get("clip")
        self.norm_type, self.norm_eps = a.get("norm_type"), a.get("norm_eps")
        stage = stage_of(node)
        self.turn, self.term, self.add_output = (stage.turn, stage.logits, stage.output) if stage else (None,) * 3
        """The position stage's hooks (``backends/torch/positions``), None where it has none."""
        self.from_input, self.on_masked = (stage.from_input, stage.masked) if stage else (None, None)
        """Its terms from the layer's input (forgetting attention) and from the masked logits (CoPE)."""
        self.modifiers = modifiers_of(a, self)
        self.after_mask, self.on_weights = modifiers_of(a, self, "masked"), modifiers_of(a, self, "weights")
        self.weighting = next(iter(modifiers_of(a, self, "weighting")), None)
        """Score modifiers after the mask (top-k), in place of the softmax (sigmoid), on the weights."""
        self.plain = kernel_for(node, any(hook is not None for hook in (self.term, self.add_output, self.from_input,
                                                                        self.on_masked)), "PyTorch")
        """Fused kernels apply (the core's one answer, which ``report --train`` reads too)."""
        self.z_loss = a.get("z_loss", 0.0)
        self.plain_training = self.plain and fused_kernel(node, training=True)
        """Whether they apply in training, where ``z_loss`` reads the log-sum-exp they keep to themselves."""
        self.bias_pieces = fused_bias(node.params, "kv" if node.layer.needs_memory else "qkv", a)

    def forward(self, ctx, x, memory=None):
        h, g, d_v = self.h, self.g, self.d_v
        B, Lq = x.shape[:2]
        cache = ctx.state.cache if ctx.state is not None else None
        dropout = self.p if ctx.training else 0.0
        plain = self.plain_training if ctx.training else self.plain
        if memory is None:
            q, k, v = project(self, x)  # (B, Lq, heads, d)
            v = crosslayer.values(self, ctx, x, v)  # value residual: mixed with the first layer's
            if self.qk_norm != "none":
                q, k = normed(self, q, "q"), normed(self, k, "k")
            if self.turn is not None:  # rotary positions
                q, k = self.turn(ctx, q, k)
            if cache is None and plain:
                k, v = repeat_heads(k, h // g, 2), repeat_heads(v, h // g, 2)
                return self._output(x, self_attention(ctx, self.layer, self.q_seq, q, k, v, dropout))
            k, v = k.transpose(1, 2), v.transpose(1, 2)  # (B, g, Lq, d)
            if cache is not None:  # keys and values of earlier positions, then these
                if self.node_name in cache:
                    past_k, past_v = cache[self.node_name]
                    k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
                # A banded kind never looks further back than its band: keep just that (O(r) per step).
                keep = self.layer.kept(k.shape[2])
                cache[self.node_name] = k[:, :, k.shape[2] - keep:], v[:, :, v.shape[2] - keep:]
        else:
            q = project_queries(self, x)
            if cache is not None and self.node_name in cache:  # the source's, computed at the first step
                k, v = cache[self.node_name]
            else:
                k, v = project_memory(self, memory)  # (B, g, Lk, d)
                if cache is not None:
                    cache[self.node_name] = k, v
                    ctx.state.cross.add(self.node_name)
        k, v = repeat_heads(k, h // g, 1), repeat_heads(v, h // g, 1)  # (B, h, Lk, d): cached as g heads
        Lk = k.shape[2]
        q = q.view(B, Lq, h, self.d_k).transpose(1, 2)  # (B, h, Lq, d_k)
        mask, causal = ctx.attention_mask(self.layer, self.q_seq, self.kv_seq, Lq, Lk, x.device)
        if getattr(self, "mem_k", None) is not None:  # after the cache: learned keys are never cached
            k, v, mask = self._with_learned(ctx, k, v, mask, causal, Lq, Lk)
            causal = False
        if plain:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout,
                                               scale=self.scale)
        else:
            y = self._explicit(ctx, q, k, v, mask, causal, dropout, x)
        y = y.transpose(1, 2).reshape(B, Lq, h * d_v)  # heads concatenated
        return self._output(x, y)

    def _with_learned(self, ctx, k, v, mask, causal, Lq, Lk):
        """The m learned keys and values (g, m, d) before the (B, h, Lk, d) ones (persistent
        memory, Sukhbaatar et al. 2019): every query sees them, so the kind's (Lq, Lk) mask, or
        its padded (B, 1, ., Lk) one, gains m visible columns in front, built once per call."""
        m, B = self.mem_k.shape[1], k.shape[0]
        mem_k, mem_v = (repeat_heads(t, self.h // self.g, 0).expand(B, -1, -1, -1) for t in (self.mem_k, self.mem_v))
        k, v = torch.cat([mem_k, k], 2), torch.cat([mem_v, v], 2)  # (B, h, m + Lk, d)

        def widened():
            shown = torch.ones(Lq, Lk, dtype=torch.bool, device=k.device).tril(Lk - Lq) if causal else mask
            return torch.cat([shown.new_ones(*shown.shape[:-1], m), shown], -1)  # (..., Lq or 1, m + Lk)

        if mask is None and not causal:  # every key visible
            return k, v, None
        return k, v, ctx.cached(("learned_kv", self.layer, self.q_seq, self.kv_seq, Lq, Lk, m), widened)

    def _output(self, x, y):
        """W^O over the concatenated heads y (B, L, h * d_v); with ``head_scale``, each head's
        output times its scalar first (NormFormer); with ``output_gate``, y times f(x W_gate),
        f the layer's ``gate_function`` (sigmoid or SiLU)."""
        if getattr(self, "head_scale", None) is not None:
            y = (y.unflatten(-1, (self.h, self.d_v)) * self.head_scale[:, None]).flatten(-2)  # (B, L, h, d_v)
        if getattr(self, "w_gate", None) is not None:
            gate = F.linear(x, self.w_gate)
            y = y * (F.silu(gate) if self.layer.gate_function == "silu" else torch.sigmoid(gate))
        return F.linear(y, self.w_o, getattr(self, "b_o", None))

    def _explicit(self, ctx, q, k, v, mask, causal, dropout, x=None):
        """Attention with additive scores, position terms or score modifiers, spelled out (B, h, L, d);
        ``x`` is the layer's input, which forgetting attention's gates read."""
        Lq, Lk = q.shape[2], k.shape[2]
        if self.score == "additive":  # w_h · tanh(q_i + k_j) for each head h
            scores = torch.einsum("bhqkd,hd->bhqk", torch.tanh(q[:, :, :, None] + k[:, :, None]), self.w_score)
        else:
            scores = q @ k.transpose(-1, -2) * self.scale
        scores = crosslayer.add_scores(self, ctx, scores)  # residual attention: the previous layer's logits
        if self.term is not None:  # the position kind's logit term (relative, T5's bias, ALiBi, DeBERTa)
            scores = scores + self.term(ctx, self, q, k)
        if self.from_input is not None:  # forgetting attention's summed log gates
            scores = scores + self.from_input(ctx, self, x)
        for modify in self.modifiers:  # Gemma 2's softcap
            scores = modify(scores)
        if causal:
            mask = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril(Lk - Lq)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        if self.on_masked is not None:  # CoPE: positions counted over the visible keys' gates
            scores = scores + self.on_masked(ctx, self, q, scores)
        crosslayer.publish_scores(self, ctx, scores)
        for modify in self.after_mask:  # explicit sparse attention's top-k
            scores = modify(scores)
        if self.z_loss and ctx.training:
            ctx.aux_losses.append(self._z_loss(ctx, scores))
        if self.weighting is not None:  # sigmoid attention
            weights = self.weighting(scores)
        else:
            weights = softmax_with_sinks(scores, getattr(self, "sinks", None))
        weights = F.dropout(weights, dropout) if dropout else weights
        for modify in self.on_weights:  # talking heads' mixing of the weights
            weights = modify(weights)
        y = weights @ v
        return y if self.add_output is None else self.add_output(ctx, self, weights, y)  # Shaw et al.'s a_V


    def _z_loss(self, ctx, scores: torch.Tensor) -> torch.Tensor:
        """z_loss x log-sum-exp over the keys of the masked logits (B, h, Lq, Lk) (sinks joining as
        the softmax's keys), squared, summed over the heads and the call's real query positions:
        summed over tokens, as the training loss is. A padded query, whose keys may all be
        masked, adds nothing (x-transformers' ``calc_z_loss`` with its mask, per layer)."""
        lse = torch.logsumexp(scores, -1)  # (B, h, Lq)
        if getattr(self, "sinks", None) is not None:
            lse = torch.logaddexp(lse, self.sinks.to(lse.dtype)[:, None])
        pad = ctx.padding.get(self.q_seq)
        if pad is not None:
            lse = lse.masked_fill(pad[:, None, :], 0.0)
        return self.z_loss * lse.float().square().sum()


def softmax_with_sinks(scores: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """softmax over the keys of (B, h, Lq, Lk) scores; with ``sinks`` (h,), each head's sink
    logit joins the denominator as one more key, whose weight is then dropped (gpt-oss)."""
    if sinks is None:
        return torch.softmax(scores, -1)
    column = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, column], -1), -1)[..., :-1]


def repeat_heads(t: torch.Tensor, times: int, dim: int) -> torch.Tensor:
    """Each of g key/value heads along ``dim`` repeated for the ``times`` query heads it serves:
    query head i reads key/value head i // times (transformers' ``repeat_kv``)."""
    return t if times == 1 else t.repeat_interleave(times, dim)


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
