"""Position-wise feed-forward network FFN(x) = act(x W1 + b1) W2 + b2 (§3.3, eq. 2), or its
gated form act(x W1 + b1) * (x W3 + b3), then W2 + b2 (Shazeer 2020: SwiGLU with silu, GeGLU
with gelu), whose W1/W2/W3 naming is Llama's (W1 the gate, W3 the linear branch, W2 down)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from tfspec.norms import NORMS
from tfspec.spec.bounds import Width

from tfspec.layers.base import Sublayer, linear, register

Activation = Literal["relu", "relu2", "gelu", "gelu_tanh", "silu", "quick_gelu"]
"""relu2 is squared ReLU, relu(x)^2 (So et al. 2021, Primer; Persimmon-8B, Nemotron-4);
quick_gelu is x sigmoid(1.702 x), GELU's sigmoid approximation (CLIP; gpt-oss's experts' gate)."""


@register
class FeedForward(Sublayer):
    """Two dense layers with an activation between (three when gated), applied to each position alike."""

    kind: Literal["ffn"] = "ffn"
    stem: ClassVar[str] = "ffn"
    component: ClassVar[str] = "ffn"
    d_ff: Width | None = None
    """Inner size; defaults to the spec's d_ff."""
    activation: Activation | None = None
    """Defaults to the spec's activation."""
    gated: bool | None = None
    """A gated linear unit: act(x W1) * (x W3), then W2; defaults to the spec's gated."""
    step: float = Field(1.0, gt=0, le=1.0)
    """The step its output takes on the residual stream, x + step * FFN(Norm(x)): 0.5 is the
    macaron layout's half step, a block of [ffn (step 0.5), attention, ffn (step 0.5)] (Lu et
    al. 2019, §3.2: the FFN's half steps around attention in a Strang splitting; Conformer,
    Gulati et al. 2020; x-transformers' ``macaron``); 1: a whole step (§3.1)."""
    inner_norm: bool = False
    """A norm (the spec's norm_type) over the d_ff hidden features after the activation (and
    the gate's product), before W2: NormFormer's FFN LayerNorm (Shleifer et al. 2021, §2,
    x-transformers' ``ff_post_act_ln``), which evens out the gradients' size across layers.
    Off: act(x W1) goes to W2 as it is (eq. 2)."""
    symbols: ClassVar[dict[str, str]] = {"d_ff": "d_ff"}

    @property
    def mixes_positions(self) -> bool:
        return False

    def check(self, spec):
        if self.inner_norm and not NORMS[spec.norm_type].inside_ops:
            return (f"inner_norm normalises with the norm_type, but the feed-forward lowerings do not compute "
                    f"norm_type {spec.norm_type}: use norm_type layer or rms, or drop inner_norm")
        return None

    @property
    def residual_step(self) -> float:
        return self.step

    def flops(self, s, dense=False):
        # Position-wise: it connects no positions, so stacking it never shortens a path.
        terms = {"w1": 2 * s.n * s.d * s.d_ff, "w2": 2 * s.n * s.d_ff * s.d}
        if self.gated:  # the linear branch: one more d x d_ff product per position
            terms["w3"] = 2 * s.n * s.d * s.d_ff
        return terms

    def resolved(self, spec):
        """This layer with its width, activation and gating filled in from ``spec`` where unset."""
        if self._filled is not None:
            return self
        inherited = {"d_ff": spec.d_ff, "activation": spec.activation, "gated": spec.gated}
        layer = self.model_copy(update={k: v for k, v in inherited.items() if getattr(self, k) is None})
        layer._filled = frozenset(k for k in inherited if getattr(self, k) is None)
        return layer

    def lower(self, b, name, x):
        s, layer = b.spec, self.resolved(b.spec)
        d_ff, bias = layer.d_ff, s.has_bias("ffn")
        params = linear("1", d_ff, s.d_model, bias) | linear("2", s.d_model, d_ff, bias)
        if layer.gated:
            params |= linear("3", d_ff, s.d_model, bias)
        attrs = {"d_ff": d_ff, "activation": layer.activation, "dropout": s.activation_dropout,
                 "gated": layer.gated}
        if layer.inner_norm:  # the norm kind's gain (and bias) over d_ff, under roles of their own
            declared = NORMS[s.norm_type].params(s, d_ff)
            params |= {{"weight": "inner_norm", "bias": "inner_norm_bias"}[role]: p for role, p in declared.items()}
            attrs["inner_norm"] = {"kind": s.norm_type, "eps": s.norm_eps}
        return b.op(name, "ffn", [x], attrs=attrs, params=params, layer=layer)
