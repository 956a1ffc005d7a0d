"""Contextual position encoding, CoPE (Golovneva et al. 2024, §3, eq. 3-5 and Appendix B's code):
positions counted in context rather than in tokens. Each query gates every visible key,
g_ij = sigmoid(q_i · k_j) (the layer's scaled logits, as the paper's code), a key's position is
the sum of the gates from it to the query, p_ij = sum_{t=j..i} g_it (clamped at P - 1), and the
logit gains q_i · e[p_ij], e interpolated between the integer positions of a learned (P, d_k)
table: e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p] (eq. 5). Each attention
layer has its own table, started at zeros (the paper's code, x-transformers' ``attn_use_cope``).

The gates read the logits after the mask (masked keys count 0) and before the softmax, so the
term is a ``masked`` stage of the backends (``backends/{torch,onnx}/positions/contextual.py``).
A decoding step counts over the cached keys: no state beyond the keys. ``count_mix_heads`` is
x-transformers' own, off by default as the paper has none: the heads' logits mixed by an h x h
matrix before the gates (``cope_talking_heads``). Its ``cope_soft_onehot_pos`` (e[p] as a softmax
over |p - t| / 0.05 of the rows t) is not offered: the paper has no such blend and x-transformers
2.31.10 fails on it (an einx rank error), so nothing could check it. The paper and x-transformers
define CoPE for causal attention (x-transformers asserts it), so other kinds are refused."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tfspec.positions import PositionKind, register


@register
class Contextual(PositionKind):
    name, order = "contextual", 11
    summary = ("each head's logits plus q·e[p], p the sum of the gates sigmoid(q·k) from the key to the query "
               "(contextual position encoding, CoPE, Golovneva et al. 2024)")
    in_attention = True

    fields = {
        "count_limit": (Annotated[int, Field(ge=2, le=1 << 16)], Field(16, description=(
            "contextual: rows P of each layer's position table; counted positions are clamped at P - 1\n"
            "(CoPE's npos_max; x-transformers' cope_max_pos: 16)."))),
        "count_mix_heads": (bool, Field(False, description=(
            "contextual: the gates read the heads' logits mixed by a learned h x h matrix, then masked\n"
            "again (x-transformers' cope_talking_heads); False: each head's own logits (the paper)."))),
    }

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False

    @classmethod
    def layer_problem(cls, layer) -> str | None:
        if not layer.plain_causal:
            return (f"contextual positions count the gates from a key to the query over the past (Golovneva et "
                    f"al. 2024, eq. 3): {layer.kind} is not causal self-attention; use causal_self_attention")
        return None

    @classmethod
    def attention_params(cls, b, name: str, layer) -> dict:
        """The layer's (P, d_k) table, zeros at the start; with ``count_mix_heads`` its (h, h) mix."""
        p = layer.positions
        params = {"cope_table": ((p.count_limit, layer.d_k), "zeros")}
        if p.count_mix_heads:
            params["cope_mix"] = ((layer.heads, layer.heads), "xavier_uniform")
        return params

    @classmethod
    def attention_flops(cls, s, positions: dict) -> dict:
        """q · e[t] for every query and row t: 2 n P d_k per head; the mix, 2 h per head and pair,
        over all n^2 pairs the scores are computed for (masked keys' gates are computed, then 0)."""
        terms = {"contextual": 2 * s.n * positions["count_limit"] * s.d_k * s.h}
        if positions["count_mix_heads"]:
            terms["contextual_mix"] = 2 * s.n * s.n * s.h * s.h
        return terms

    @classmethod
    def saved_per_row(cls, node, queries: int, keys: int) -> int:
        """What CoPE's backward keeps per row of a call (float32, measured against autograd): per
        head and pair the gates, the positions before the clamp, the two int64 row indices, the
        two gathered products and their two weights (40 bytes; with the mix, its input too); per
        head and query the (P,) products q · e[t] and the queries' copy for that product."""
        a, p = node.attrs, node.attrs["positions"]
        per_pair = 10 + p["count_mix_heads"]
        return 4 * a["heads"] * queries * (per_pair * keys + p["count_limit"] + a["d_k"])

    @classmethod
    def saved_by_layer(cls, graph, node, queries: int, keys: int) -> int:
        """With the mix, the causal (queries, keys) bool mask that hides the masked keys again."""
        return queries * keys if node.attrs["positions"]["count_mix_heads"] else 0
