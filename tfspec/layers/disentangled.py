"""DeBERTa's disentangled attention (He et al. 2021, §3.1): positional kind ``disentangled``.

Each position has a content vector; each relative distance a position vector, a row P of one
(2 x buckets, d_model) table shared by the stack's self-attention layers (DeBERTa-v3
normalises it first: ``table_norm``). Every layer projects that table with its own query and
key weights (biases included: DeBERTa-v2's share_att_key), P^Q = P W_q + b_q and P^K = P W_k
+ b_k, and the logit of query i and key j becomes

    (q_i·k_j + q_i·P^K_δ(i,j) + k_j·P^Q_δ(i,j)) x scale,

content-to-content, content-to-position (``c2p``) and position-to-content (``p2c``), with
δ(i, j) the table row of the distance i - j (``tfspec.ir.positions.disentangled_rows``: exact
up to buckets / 2, log-spaced beyond). DeBERTa scales all three by 1 / sqrt(3 d_k), one
sqrt(d_k) per term: the importer writes that into the attention's ``scale``. Both backends add
the two products as a score term (``backends/*/scores/disentangled.py``).
"""

from __future__ import annotations

TABLE = "rel_embed"
"""The attention node's parameter role of the relative table."""
NORM, NORM_BIAS = "rel_norm", "rel_norm_bias"
"""The roles of the table's norm gain and bias (``table_norm``)."""


def table_params(b, name: str, positions) -> dict:
    """The relative table of the attention node ``name`` (and its norm's gain and bias), declared
    by the stack's first self-attention and tied by the later ones."""
    d = b.spec.d_model
    params = {TABLE: b.stack_param(name, TABLE, (2 * positions.buckets, d), "normal:0.02")}
    if positions.table_norm:
        params[NORM] = b.stack_param(name, NORM, (d,), "ones")
        if b.spec.uses_norm_bias:
            params[NORM_BIAS] = b.stack_param(name, NORM_BIAS, (d,), "zeros")
    return params


def check(layer) -> str | None:
    """Why the resolved attention ``layer`` cannot take disentangled positions, or None."""
    if layer.score != "dot":
        return f"disentangled positions add to dot-product scores; score is {layer.score}: use score: dot"
    if layer.kv_heads != layer.heads:
        return (f"disentangled positions project the relative table with the layer's query and key heads alike: "
                f"kv_heads ({layer.kv_heads}) must equal heads ({layer.heads})")
    if layer.qk_norm != "none":
        return f"disentangled positions project the relative table without qk_norm ({layer.qk_norm}): set qk_norm: none"
    return None
