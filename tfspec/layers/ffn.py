"""Position-wise feed-forward network FFN(x) = act(x W1 + b1) W2 + b2 (§3.3, eq. 2)."""

from __future__ import annotations

from typing import ClassVar, Literal

from tfspec.spec.bounds import Width

from tfspec.layers.base import Sublayer, linear, register

Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]


@register
class FeedForward(Sublayer):
    """Two dense layers with an activation between, applied to each position alike."""

    kind: Literal["ffn"] = "ffn"
    stem: ClassVar[str] = "ffn"
    component: ClassVar[str] = "ffn"
    d_ff: Width | None = None
    """Inner size; defaults to the spec's d_ff."""
    activation: Activation | None = None
    """Defaults to the spec's activation."""
    symbols: ClassVar[dict[str, str]] = {"d_ff": "d_ff"}

    def flops(self, s, dense=False):
        # Position-wise: it connects no positions, so stacking it never shortens a path.
        return {"w1": 2 * s.n * s.d * s.d_ff, "w2": 2 * s.n * s.d_ff * s.d}

    def lower(self, b, name, x):
        s = b.spec
        d_ff = self.d_ff or s.d_ff
        params = linear("1", d_ff, s.d_model, s.bias) | linear("2", s.d_model, d_ff, s.bias)
        attrs = {"d_ff": d_ff, "activation": self.activation or s.activation, "dropout": s.activation_dropout}
        return b.op(name, "ffn", [x], attrs=attrs, params=params, layer=self)
