"""The ops of embedding heads and dual encoders (``tfspec.spec.embedding_heads``,
``tfspec.spec.dual``: CLIP, SigLIP): the text's pooled position, the image's attention probe, the
projections into the shared space, unit vectors and the scaled cosine scores.

Their rows of ``tfspec report`` (Table 1's measures for what is not a layer kind): picking a
position and normalising are gathers and elementwise work (no products, O(1) sequential
operations); a projection is 2 d w per text or image; the attention probe is one query over
the n patches, O(n d^2) for its key and value projections plus O(n d) for its scores, with a
path of length O(1) from every patch to the pooled vector; the scores are 2 w per pair of a
text and an image, a (texts x images) matrix product in all.
"""

from __future__ import annotations

from sympy import Integer

from . import Op, keeps_inputs, keeps_inputs_and_output, keeps_nothing, no_products, register


@register
class TokenSelect(Op):
    """memory (B, S, d), token ids (B, S) -> (B, d): the state at one position per row, chosen by
    ``select``: ``eos_token`` the first position holding ``eos_id``, ``highest_id`` the position
    of the largest id (its first), ``last_token`` the last position."""
    name = "token_select"
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)


@register
class AttentionProbe(Op):
    """A learned query attends over the tower's output (B, V, d) with ``heads`` heads (its own
    joint in-projection, output projection, biases), then y + MLP(LayerNorm(y)): (B, d)
    (SiglipMultiheadAttentionPoolingHead; the pooling by multi-head attention of Lee et al.
    2019, §3.1)."""
    name = "attention_probe"
    saved = staticmethod(keeps_inputs_and_output)

    @staticmethod
    def flops(node, s, dense=False):
        return {"probe_query": 2 * s.d * s.d, "probe_keys_values": 4 * s.n * s.d * s.d,
                "probe_scores": 4 * s.n * s.d, "probe_output": 2 * s.d * s.d, "probe_mlp": 4 * s.d * s.d_ff}


@register
class PooledProjection(Op):
    """(B, d) -> (B, w): x W^T (+ b), one vector per text or image into the shared space."""
    name, position_wise = "pooled_projection", True
    saved = staticmethod(keeps_inputs)

    @staticmethod
    def flops(node, s, dense=False):
        return {"projection": Integer(2 * node.attrs["inputs"] * node.shape[-1])}


@register
class UnitVectors(Op):
    """x / ||x||_2 over the features (no epsilon, as transformers' CLIP and SigLIP)."""
    name, position_wise = "unit_vectors", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)


@register
class PairLogits(Op):
    """rows (B, w), columns (N, w) of unit vectors -> (B, N): exp(scale) rows columns^T (+ bias),
    the scaled cosines of every pair (CLIP §2.3's logits; SigLIP eq. 1's z = t x.y + b)."""
    name = "pair_logits"
    saved = staticmethod(keeps_inputs)

    @staticmethod
    def flops(node, s, dense=False):
        return {"scores": Integer(2 * node.attrs["width"])}
