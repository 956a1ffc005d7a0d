"""Forgetting attention (Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a Forget
Gate", eq. 4-6): each head computes a scalar forget gate per position from the layer's input,
f_t = sigmoid(w_f · x_t + b_f), and adds to the logit of query i and key j the log of the
product of the gates between them, D_ij = sum_{l=j+1..i} log f_l = c_i - c_j with
c_t = sum_{l<=t} log f_l: a data-dependent ALiBi (x-transformers' ``attn_data_dependent_alibi``,
its ``DataDependentAlibi``). Each layer has its own gate projection (h, d_model) with a bias.

Decoding carries state: a query's bias reads every earlier key's c_j, so the KV cache holds per
key and head its log gate (``cached_per_key``; the backends recompute the cumulative sums over
the cached gates, O(L h) per step beside attention's O(L d)). Left padding needs nothing: the pads
precede every real position of their row, so no pad's gate lies between a real key and a later
real query. The paper's gates are causal; x-transformers' bidirectional extension (a second set
summed backwards for keys ahead) is not taken, so non-causal kinds are refused.

Differences from x-transformers: none in the function; its gate bias starts at 5 (``bias_init``),
which is taken as this kind's init (gates near 1: little forgetting at the start). Backends:
``backends/{torch,onnx}/positions/forget_gates.py``."""

from __future__ import annotations

from tfspec.positions import PositionKind, register

BIAS_INIT = 5.0
"""The gate bias's start (x-transformers' ``bias_init``): sigmoid(5) = 0.993 keeps nearly all."""


@register
class ForgetGates(PositionKind):
    name, order = "forget_gates", 10
    summary = ("each head's logits plus the summed log forget gates sigmoid(w x_l + b) between key and query, "
               "gates computed from the input (forgetting attention, Lin et al. 2025; data-dependent ALiBi)")
    in_attention = True

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False

    @classmethod
    def layer_problem(cls, layer) -> str | None:
        if not layer.plain_causal:
            return (f"forget_gates positions sum the gates between a key and the later queries (Lin et al. 2025, "
                    f"eq. 6): {layer.kind} is not causal self-attention over the whole past; use "
                    "causal_self_attention")
        return None

    @classmethod
    def attention_params(cls, b, name: str, layer) -> dict:
        """The gate projection: w_forget (h, d_model) and b_forget (h,) starting at ``BIAS_INIT``."""
        return {"w_forget": ((layer.heads, b.spec.d_model), "xavier_uniform"),
                "b_forget": ((layer.heads,), f"constant:{BIAS_INIT}")}

    @classmethod
    def attention_flops(cls, s, positions: dict) -> dict:
        """The gate projection, h dot products of d per position; the cumulative sums and the
        (n, n) differences are elementwise (no matrix FLOPs), as ALiBi's bias."""
        return {"forget_gates": 2 * s.n * s.d * s.h}

    @classmethod
    def cached_per_key(cls, node) -> int:
        """Each cached key's log gate, one per head."""
        return node.attrs["heads"]

    @classmethod
    def saved_per_row(cls, node, queries: int, keys: int) -> int:
        """What the gates' backward keeps per row of a call (float32, measured against autograd):
        logsigmoid's input and its buffer, (queries, h) each; the projection reads the attention's
        own input, and the cumulative sum and the differences keep nothing."""
        return 2 * 4 * queries * node.attrs["heads"]
