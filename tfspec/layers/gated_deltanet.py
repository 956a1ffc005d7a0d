"""Gated DeltaNet (Yang, Kautz and Hatamizadeh 2025, "Gated Delta Networks: Improving Mamba2
with Delta Rule", the linear attention of Qwen3-Next's linear_attention layers) as a residual
sub-layer: a recurrent layer kind whose state is a (d_k, d_v) matrix per value head and sequence,
plus the last k - 1 inputs of its causal convolution.

Per position, projections give queries and keys (key_heads x d_k), values and output gates z
(heads x d_v) and, per value head, a write strength b and a decay input a. Queries, keys and
values pass a depthwise causal convolution of kernel k and a SiLU; queries and keys are
L2-normalised (eps 1e-6, as the FLA kernels) and queries scaled by d_k^-1/2. With beta =
sigmoid(b) and the decay g = -exp(A_log) softplus(a + dt_bias), each value head's state
follows the gated delta rule, S_i = exp(g_i) S_{i-1} + k_i beta_i (v_i - exp(g_i) S_{i-1}^T
k_i)^T: the state's prediction for k_i is corrected towards v_i (the delta rule) after a
decay; its output o_i = S_i^T q_i is RMS-normalised over d_v (one gain shared by the heads),
times silu(z_i), and projected back to d_model. Each key head serves heads / key_heads
consecutive value heads.

The projection ``w_qkvz`` holds its rows grouped by key head as the published checkpoints do:
each key head's query, key, then its value heads' values and their gates; ``w_ba`` likewise
holds each key head's b's then a's.

Table 1: each step updates the state from the previous one, so n sequential operations and
paths n steps long, as a recurrent layer's; the work is linear in n (the projections, n d
(2 key_heads d_k + 2 heads d_v + 2 heads), and the recurrence, 7 n heads d_k d_v).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tfspec.layers.base import Sublayer, register
from tfspec.spec.bounds import Heads, Kernel, Width


@register
class GatedDeltaNet(Sublayer):
    """A gated DeltaNet layer over the sequence, left to right."""

    kind: Literal["gated_deltanet"] = "gated_deltanet"
    stem: ClassVar[str] = "deltanet"
    component: ClassVar[str] = "recurrent"
    heads: Heads
    """Value heads (linear_num_value_heads), each with its own state, decay and write strength."""
    key_heads: Heads
    """Query/key heads (linear_num_key_heads); each serves heads / key_heads value heads."""
    d_k: Width
    """Each query/key head's width (linear_key_head_dim): the state is d_k x d_v."""
    d_v: Width
    """Each value head's width (linear_value_head_dim)."""
    kernel: Kernel = 4
    """k, the causal depthwise convolution's width over queries, keys and values (linear_conv_kernel_dim)."""
    symbols: ClassVar[dict[str, str]] = {"h": "heads", "g": "key_heads", "d_k": "d_k", "d_v": "d_v", "k": "kernel"}
    recurrence: ClassVar[str] = "forward"

    def check(self, spec) -> str | None:
        if self.heads % self.key_heads:
            return (f"heads ({self.heads}) must be a multiple of key_heads ({self.key_heads}): each key head "
                    "serves equal value heads")
        return None

    @property
    def conv_width(self) -> int:
        """Channels of the convolution: queries, keys and values."""
        return 2 * self.key_heads * self.d_k + self.heads * self.d_v

    def flops(self, s, dense=False):
        """In the layer's own sizes (h value heads, g key heads, d_k, d_v, kernel k): with h d_v
        about d, the recurrence's 7 n h d_k d_v and the projections make Table 1's O(n d^2)."""
        width = 2 * s.g * s.d_k + s.h * s.d_v
        # per step and value head: decay S, S^T k, the rank-one update, S^T q
        return {"in_proj": 2 * s.n * s.d * (width + s.h * s.d_v + 2 * s.h), "conv": 2 * s.n * width * s.k,
                "recurrence": 7 * s.n * s.h * s.d_k * s.d_v, "out_proj": 2 * s.n * s.h * s.d_v * s.d}

    def lower(self, b, name, x):
        d, width, inner = b.spec.d_model, self.conv_width, self.heads * self.d_v
        params = {"w_qkvz": ((width + inner, d), "xavier_uniform"), "w_ba": ((2 * self.heads, d), "xavier_uniform"),
                  "w_conv": ((width, 1, self.kernel), f"uniform:{self.kernel ** -0.5}"),
                  "dt_bias": ((self.heads,), "ones"), "A_log": ((self.heads,), "zeros"),
                  "norm": ((self.d_v,), "ones"), "w_out": ((d, inner), "xavier_uniform")}
        attrs = {"heads": self.heads, "key_heads": self.key_heads, "d_k": self.d_k, "d_v": self.d_v,
                 "kernel": self.kernel, "norm_eps": b.spec.norm_eps}
        return b.op(name, "gated_deltanet", [x], attrs=attrs, params=params, layer=self)
