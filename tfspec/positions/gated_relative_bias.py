"""WavLM's gated relative position bias (Chen et al. 2022, "WavLM: Large-Scale Self-Supervised
Pre-Training for Full Stack Speech Processing", its model structure's "gated relative position
bias"): each head adds to the logit of
query i and key j a learned scalar of the bucket of the distance j - i, r_{j-i} (T5's
bidirectional buckets: ``tfspec.layers.relative_bias.bucket_table``, one (buckets, heads) table per
stack, held by its first layer), scaled by a gate computed from the query's own input:

    (a, b) = sigmoid(sum of 4, sum of 4 of x_i^h U + c)     U (d_model / h, 8), c (8,): per layer
    bias_ij = (a (b w_h - 1) + 2) r_{j-i}                   w_h: per head and layer, starting at 1

(the paper's g_update and g_reset, its r~ = w g_reset r folded in as transformers computes it),
where x_i^h is head h's slice (d_model / h features) of the attention's input at position i; the
one Linear is shared by the heads. The table is shared from the first layer ungated (each layer gates it with its own gate), as
transformers' WavLMAttention hands its ``position_bias`` up. Backends:
``backends/{torch,onnx}/positions/gated_relative_bias.py``.
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.positions import PositionKind, register
from tfspec.spec.base import field_error

TABLE = "gated_bias"
"""The attention node's parameter role of the stack's (buckets, heads) table."""
GATE_W, GATE_B, GATE_SCALE = "rel_gate_w", "rel_gate_b", "rel_gate_scale"
"""The layer's gate: Linear(d_model / h, 8) weight and bias, and the per-head scalar w_h."""
GATE_OUTPUTS = 8
"""The gate projection's outputs: two groups of four, summed, one per gate (WavLM's gru_rel_pos_linear)."""


@register
class GatedRelativeBias(PositionKind):
    name, order = "gated_relative_bias", 11
    summary = ("T5's bidirectional bucketed relative bias from one table per stack, each layer scaling it per "
               "head and query by a gate from the query's input (WavLM, Chen et al. 2022)")
    in_attention = per_stack = True
    bounded = False
    reads = ("buckets",)

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False

    @classmethod
    def check(cls, positional) -> None:
        exact = positional.buckets // 4  # half the buckets per sign, half of those exact distances
        if positional.max_distance <= exact:
            raise field_error("max_distance", f"max_distance ({positional.max_distance}) must exceed buckets // 4 "
                              f"({exact}), the exact distances of each sign: the other buckets are log-spaced "
                              "between the two; raise max_distance or lower buckets")

    @classmethod
    def layer_problem(cls, layer) -> str | None:
        if not layer.looks_ahead or layer.band() is not None:
            return (f"gated_relative_bias positions are WavLM's encoder bias over every pair of positions; "
                    f"{layer.kind} does not attend to the whole sequence both ways: use self_attention")
        return None

    @classmethod
    def attention_params(cls, b, name: str, layer) -> dict:
        """The stack's table (declared by its first self-attention, tied by the others) and the
        layer's gate: Linear(d_model / h, 8) and one scalar per head."""
        d, h = b.spec.d_model, layer.heads
        if d % h:
            raise TfspecError(f"{name}: gated_relative_bias splits the attention's input into one slice per head: "
                              f"d_model ({d}) must be divisible by heads ({h})")
        table = b.stack_param(name, TABLE, (layer.positions.buckets, h), f"normal:{d ** -0.5}")
        return {TABLE: table, GATE_W: ((GATE_OUTPUTS, d // h), "xavier_uniform"), GATE_B: ((GATE_OUTPUTS,), "zeros"),
                GATE_SCALE: ((h,), "ones")}

    @classmethod
    def attention_flops(cls, s, positions: dict) -> dict:
        """The gate projection: per position and head, 8 dot products of d / h; the lookup and the
        gating of the (n, n) bias are elementwise (no matrix FLOPs), as T5's bias."""
        return {"gated_relative_bias": 2 * s.n * s.d * GATE_OUTPUTS}

