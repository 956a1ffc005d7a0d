"""Explicit sparse attention (Zhao et al. 2019, "Explicit Sparse Transformer", §2): each query keeps
only its k largest visible scores, every other key masked before the weights, so attention
concentrates on k keys; ties with the k-th score are kept (its threshold t_i is the k-th largest
score of row i, and scores below t_i go to -inf). x-transformers' ``attn_sparse_topk`` is the same
(without its ``attn_sparse_topk_straight_through`` gradient). The backends' parts:
``backends/{torch,onnx}/modifiers/top_k.py``.

What else it changes: no parameters; selecting k of n scores is no matrix product, so FLOPs and
Table 1 stay those of the full scores (all n^2 must be computed to be ranked); nothing cached beyond
keys and values, and each decoding step ranks its query's row of cached keys, so KV-cached decoding
is exact. Its backward keeps the kept-keys mask, one byte per score (``saved_scores``: a quarter of
a float32 copy). Fused kernels cannot rank scores, so they are spelled out."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tfspec.modifiers import ScoreModifier, register


@register
class TopK(ScoreModifier):
    field = "top_k"
    annotation = Annotated[int, Field(ge=1, le=1 << 20)] | None
    description = ("Each query keeps its k largest visible scores, ties with the k-th included, and masks the\n"
                   "others before the weights (explicit sparse attention, Zhao et al. 2019; x-transformers'\n"
                   "attn_sparse_topk); None: every visible key.")
    stage = "masked"
    saved_scores = 0.25  # the kept-keys mask, a bool per score
