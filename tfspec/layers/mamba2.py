"""Mamba-2 (Dao and Gu 2024, "Transformers are SSMs", the selective state space layer of
Nemotron-H, Zamba 2 and Falcon-H1) as a residual sub-layer: a recurrent layer kind whose state
is a (heads, head_dim, state) matrix per sequence plus the last k - 1 inputs of its causal
convolution.

One projection gives, per position, a gate z and x, B, C (x: heads x head_dim; B, C: groups x
state, each group shared by heads / groups heads) and a step size dt per head. x, B and C pass
a depthwise causal convolution of kernel k and a SiLU. With dt = softplus(dt + dt_bias) (at
least ``dt_min``) and a = -exp(A_log) per head, each head's state is h_i = exp(dt_i a) h_{i-1} +
dt_i x_i B_i^T and its output y_i = h_i C_i + D x_i; y times silu(z) is RMS-normalised in
``groups`` groups (a learned gain) and projected back to d_model.

Table 1: each step updates the state from the previous one, so n sequential operations and
paths n steps long, as a recurrent layer's; the work is linear in n (the projections, n d
(2 heads head_dim + 2 groups state + heads) and the scan, n heads head_dim state).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from tfspec.layers.base import Sublayer, register
from tfspec.spec.bounds import Heads, Kernel, Width


@register
class Mamba2(Sublayer):
    """A Mamba-2 selective state space layer over the sequence, left to right."""

    kind: Literal["mamba2"] = "mamba2"
    stem: ClassVar[str] = "mamba"
    component: ClassVar[str] = "recurrent"
    heads: Heads
    """H, the state space heads (Nemotron-H's mamba_num_heads), each with its own step size and decay."""
    head_dim: Width
    """p, each head's channels (mamba_head_dim): the inner width is H x p."""
    state: Width
    """N, each channel's state size (ssm_state_size)."""
    groups: Heads = 1
    """G, the groups of heads sharing B and C, and the gated norm's groups (n_groups)."""
    kernel: Kernel = 4
    """k, the causal depthwise convolution's width (conv_kernel)."""
    conv_bias: bool = True
    """A bias on the convolution (use_conv_bias)."""
    bias: bool = False
    """Biases on the input and output projections (use_bias)."""
    dt_min: Annotated[float, Field(ge=0.0, le=1e3)] = 0.0
    """The step size's floor after the softplus (time_step_min, as transformers' scan clamps it)."""
    symbols: ClassVar[dict[str, str]] = {"k": "kernel"}
    recurrence: ClassVar[str] = "forward"

    def check(self, spec) -> str | None:
        if self.heads % self.groups:
            return f"heads ({self.heads}) must be a multiple of groups ({self.groups}): each group serves equal heads"
        return None

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_width(self) -> int:
        """Channels of the convolution: x, B and C."""
        return self.inner + 2 * self.groups * self.state

    def flops(self, s, dense=False):
        projected = 2 * self.inner + 2 * self.groups * self.state + self.heads
        return {"in_proj": 2 * s.n * s.d * projected, "conv": 2 * s.n * self.conv_width * self.kernel,
                "scan": 6 * s.n * self.inner * self.state, "out_proj": 2 * s.n * self.inner * s.d}

    def lower(self, b, name, x):
        d, inner, width = b.spec.d_model, self.inner, self.conv_width
        params = {"w_in": ((inner + width + self.heads, d), "xavier_uniform"),
                  "w_conv": ((width, 1, self.kernel), f"uniform:{self.kernel ** -0.5}"),
                  "dt_bias": ((self.heads,), "ones"), "A_log": ((self.heads,), "zeros"), "D": ((self.heads,), "ones"),
                  "norm": ((inner,), "ones"), "w_out": ((d, inner), "xavier_uniform")}
        if self.conv_bias:
            params["b_conv"] = ((width,), "zeros")
        if self.bias:
            params |= {"b_in": ((inner + width + self.heads,), "zeros"), "b_out": ((d,), "zeros")}
        attrs = {"heads": self.heads, "head_dim": self.head_dim, "state": self.state, "groups": self.groups,
                 "kernel": self.kernel, "dt_min": self.dt_min, "norm_eps": b.spec.norm_eps}
        return b.op(name, "mamba2", [x], attrs=attrs, params=params, layer=self)
