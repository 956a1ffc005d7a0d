"""Position-wise feed-forward network FFN(x) = act(x W1 + b1) W2 + b2 (§3.3, eq. 2), or its
gated form act(x W1) * (x W3) W2 (Shazeer 2020: GLU variants; SwiGLU in Llama, GeGLU in T5 v1.1)."""

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
    gated: bool | None = None
    """Gated (GLU) form, the activation gating a second projection W3; defaults to the spec's
    gated_ffn."""
    symbols: ClassVar[dict[str, str]] = {"d_ff": "d_ff"}

    def flops(self, s, dense=False, gated: bool | None = None):
        """``gated``: the spec's default when this entry leaves ``gated`` unset."""
        # Position-wise: it connects no positions, so stacking it never shortens a path.
        terms = {"w1": 2 * s.n * s.d * s.d_ff, "w2": 2 * s.n * s.d_ff * s.d}
        if (self.gated if self.gated is not None else gated):
            terms["w3"] = 2 * s.n * s.d * s.d_ff
        return terms

    def lower(self, b, name, x):
        s = b.spec
        d_ff, biased = self.d_ff or s.d_ff, s.biased("ffn")
        gated = s.gated_ffn if self.gated is None else self.gated
        params = linear("1", d_ff, s.d_model, biased) | linear("2", s.d_model, d_ff, biased)
        if gated:
            params |= linear("3", d_ff, s.d_model, biased)
        attrs = {"d_ff": d_ff, "activation": self.activation or s.activation, "dropout": s.activation_dropout,
                 "gated": gated}
        return b.op(name, "ffn", [x], attrs=attrs, params=params, layer=self)
