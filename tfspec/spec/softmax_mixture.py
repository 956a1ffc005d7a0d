"""A mixture of softmaxes in place of the single output softmax: the ``softmax_mixture`` field.

Yang et al. 2017 ("Breaking the Softmax Bottleneck", §3.2, eq. 3): one softmax over the
vocabulary has rank at most d_model, so K components each project the last hidden state h,
h_k = tanh(W_k h), take their own softmax over the token projection w, and mix them with priors
pi = softmax(W_pi h):

    P(x | h) = sum_k pi_k softmax(h_k w^T)_x.

The output is log P(x | h), computed as logsumexp_k(log pi_k + log_softmax(h_k w^T)_x) (no
exp of a log, nothing clamped). x-transformers' ``mixture_of_softmax`` (``TransformerWrapper``)
computes the same with h_k = W_k h (no tanh: ``activation: none``) and clamps the mixed
probability at 1e-20 before its log; the paper's tanh is the default here. The token projection
keeps the spec's own options (tied or untied matrix, ``output_bias``, ``output_scale`` on each
h_k: x-transformers' tied head multiplies its logits by d_model^-0.5).

Its rows are log-probabilities already (``log_probs``): every consumer that normalises logits
(the training loss's log-softmax, beam and greedy search, sampling's softmax, the ONNX step
graphs' LogSoftmax) meets the identity, log_softmax(log P) = log P - log sum P = log P, so it
stays the model's NLL and distribution; Gemma's soft-cap, which is no longer a shift, is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field

from tfspec.spec.base import SpecModel

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec


class SoftmaxMixture(SpecModel):
    """K softmaxes over the vocabulary mixed by priors from the last hidden state (module docstring)."""

    components: Annotated[int, Field(ge=2, le=64)] = 4
    """K: the softmaxes mixed (x-transformers' ``mixture_of_softmax_k``, 4; the paper's
    language models 15)."""
    activation: Literal["tanh", "none"] = "tanh"
    """What each component applies to W_k h: tanh (the paper's eq. 3) or nothing (x-transformers)."""

    log_probs: ClassVar[bool] = True
    """The output rows are normalised log-probabilities, not logits (module docstring)."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when ``spec`` cannot carry the mixture."""
        if spec.head is not None:
            return "softmax_mixture", (f"softmax_mixture mixes the token projection's softmaxes, which head "
                                       f"{spec.head.kind} replaces: drop one of them")
        if spec.output_softcap is not None:
            return "output_softcap", (f"output_softcap ({spec.output_softcap}) squashes logits, but softmax_mixture "
                                      "outputs log-probabilities: set output_softcap: null")
        if spec.patches is not None or spec.waveform is not None or spec.frames is not None:
            return "softmax_mixture", "softmax_mixture needs a token projection: this spec's encoder reads no tokens"
        return None

    def lower(self, b: LayerBuilder, x: str, vocab: int, params: dict, attrs: dict) -> str:
        """The ``output`` node: the token projection's ``params`` (its matrix, tied or declared,
        and bias) and ``attrs`` (vocab, scale) with the K component maps W_k, stacked (K d, d),
        and the priors' W_pi (K, d), d the rows' width."""
        d, k = b.spec.embed_width, self.components  # the width the token projection reads
        params = params | {"components": ((k * d, d), "xavier_uniform"), "prior": ((k, d), "xavier_uniform")}
        attrs = attrs | {"components": k, "activation": self.activation}
        return b.op("output", "softmax_mixture", [x], attrs=attrs, params=params, component="projection",
                    shape=("B", b.seq, vocab))
