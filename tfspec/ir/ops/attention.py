"""Attention ops (§3.2): multi-head attention of every kind, and latent attention (DeepSeek-V2),
which caches one compressed latent per position instead of keys and values."""

from __future__ import annotations

from tfspec import modifiers
from tfspec.positions import KINDS
from tfspec.layers.attention import block_plan, fused_kernel, use_blocks

from . import LayerOp, register, rows


@register
class Attention(LayerOp):
    name = "attention"

    @staticmethod
    def saved(graph, node, sizes, out):
        """What the PyTorch backend's backward keeps (measured with autograd's saved tensors):
        the input; the queries, and keys and values repeated for every query head, that the
        kernel reads; the heads' output and the log-sum-exp. A banded kind over a long sequence
        (``use_blocks``) runs block by block: queries padded to whole blocks of w, each block's
        keys and values gathered from its neighbours, and the band's mask as the kernel's float
        bias. Attention spelled out (``fused_kernel`` in training) keeps the L x L softmax weights
        and what each score modifier keeps beside them; with ``z_loss``, the masked logits its
        log-sum-exp reads too."""
        a = node.attrs
        queries, keys = sizes[node.shape[1]], sizes[a.get("kv_seq", node.shape[1])]
        keys += a.get("learned_kv") or 0  # learned keys join every call's keys (and weights)
        h, d_k, d_v = a["heads"], a["d_k"], a["d_v"]
        rows_q, rows_k = sizes["B"] * queries, sizes["B"] * keys
        fused = fused_kernel(node, training=True)
        saved = {i: out(i) for i in node.inputs}
        band = None if node.layer.needs_memory else node.layer.band()
        if fused and band is not None and use_blocks(band, queries):
            w, before, after = block_plan(band)
            blocks = sizes["B"] * -(-queries // w)
            rows_q, rows_k = blocks * w, blocks * w * (before + 1 + after)
            saved[f"{node.name}#mask"] = rows_k * w * 4
            if blocks * w > sizes["B"] * queries:  # the blocks' output cut to L, copied for W^O
                saved[f"{node.name}#out"] = sizes["B"] * queries * h * d_v * 4
        if (positions := a.get("positions")) is not None:  # one table per call, shared by the layers
            saved[f"positions#{positions['kind']}"] = KINDS[positions["kind"]].saved_tables(positions, d_k, queries)
            saved[f"{node.name}#positions"] = KINDS[positions["kind"]].saved_by_layer(graph, node, queries, keys) + \
                sizes["B"] * KINDS[positions["kind"]].saved_per_row(node, queries, keys)
        saved[f"{node.name}#q"] = rows_q * h * d_k * 4
        saved[f"{node.name}#kv"] = rows_k * h * (d_k + d_v) * 4
        saved[f"{node.name}#heads"] = rows_q * h * d_v * 4
        saved[f"{node.name}#lse"] = rows_q * h * 4
        # head_scale and output_gate each keep the heads' output they multiply; the gate also keeps
        # sigmoid's output, or SiLU's logits and output.
        copies = ("head_scale" in node.params) + {None: 0, "sigmoid": 2, "silu": 3}[a.get("gate_function")]
        if copies:
            saved[f"{node.name}#gated"] = copies * rows_q * h * d_v * 4
        if "values_from" in a:  # value residual: the learned lam (rows, g) and the v - v_1 it multiplies;
            g = a["kv_heads"]   # with g = h the kernel reads the mixed values, a tensor of their own
            mixed = (g == h) + ("w_mix" in node.params) * (1 + 1 / d_v)
            saved[f"{node.name}#value_mix"] = int(rows_q * g * d_v * mixed * 4)
        if not fused:
            copies = 1 + sum(m.saved_scores for m in modifiers.set_on(a)) + bool(a.get("z_loss"))  # a bool mask: 1/4
            saved[f"{node.name}#weights"] = int(copies * rows_q * h * keys * 4)
        return saved

    @classmethod
    def cached(cls, node) -> int:
        a = node.attrs
        positions = a.get("positions")  # a kind's per-key state (forgetting attention's log gates)
        extra = KINDS[positions["kind"]].cached_per_key(node) if positions else 0
        return a["kv_heads"] * (a["d_k"] + a["d_v"]) + extra


@register
class LatentAttention(LayerOp):
    name = "latent_attention"

    @staticmethod
    def saved(graph, node, sizes, out):
        """The input; W_kva's output, its normalised latent (and the norm's statistics) and the
        latent W_kvb reads; queries (through their own latent, its norm and gain where
        q_lora_rank is set), keys expanded to every head and W_kvb's output holding the values; the fused
        kernel's log-sum-exp and the heads' output (measured with autograd's saved tensors)."""
        a, n = node.attrs, rows(node, sizes)
        h, d_k, d_v, rank = a["heads"], a["d_k"], a["d_v"], a["kv_lora_rank"]
        width = rank + a["qk_rope_head_dim"]
        values = (2 * width + rank + 1) + h * (2 * d_k + a["qk_nope_head_dim"] + d_v + 1 + d_v)
        if a["q_lora_rank"] is not None:  # W_qa's output, its norm's statistics, normed and gained
            values += 3 * a["q_lora_rank"] + 1
        saved = {i: out(i) for i in node.inputs} | {f"{node.name}#inside": 4 * n * values}
        if (positions := a.get("positions")) is not None:  # rotary turns the qk_rope_head_dim features
            tables = KINDS[positions["kind"]].saved_tables(positions, a["qk_rope_head_dim"], sizes[node.shape[1]])
            saved[f"positions#{positions['kind']}"] = tables
        return saved

    @classmethod
    def cached(cls, node) -> int:
        return node.layer.cached_width
