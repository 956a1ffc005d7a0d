"""What every layer kind provides, and the registry that collects them.

A layer kind is one residual sub-layer of a block (the paper's Sublayer(x) in
``LayerNorm(x + Dropout(Sublayer(x)))``, §3.1). Its module holds everything about it: the
spec fields users write, the IR it lowers to (parameter shapes included), and the facts the
passes and backends ask of it (causality, which keys an attention query may see, its FLOP
formula, which positions it connects, whether it mixes positions). Adding a kind means adding
one module here, which ``tfspec.layers`` finds by scanning (docs/extending.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import PrivateAttr

from tfspec.spec.base import SpecModel

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec

SUBLAYERS: dict[str, type[Sublayer]] = {}


def register(cls: type[Sublayer]) -> type[Sublayer]:
    """Class decorator: make ``cls`` usable as ``kind: <its kind>`` in specs."""
    kind = cls.model_fields["kind"].default
    if kind in SUBLAYERS:
        raise ValueError(f"layer kind {kind!r} registered twice ({SUBLAYERS[kind].__name__}, {cls.__name__})")
    SUBLAYERS[kind] = cls
    return cls


def linear(role: str, out_features: int, in_features: int, bias: bool) -> dict:
    """IR parameter declarations of a dense layer y = x W^T + b: ``w_<role>`` and ``b_<role>``."""
    params = {f"w_{role}": ((out_features, in_features), "xavier_uniform")}
    if bias:
        params[f"b_{role}"] = ((out_features,), "zeros")
    return params


class Sublayer(SpecModel):
    """Base of all layer kinds. Subclasses set ``kind`` (a Literal) and ``lower``."""

    kind: str
    input_norm: bool = True
    """With norm pre or sandwich: normalise this sub-layer's input; false: it reads the residual
    stream as it is (ModernBERT's first attention, whose input is the embeddings' norm already)."""
    token_shift: bool = False
    """Read its (normalised) input mixed with the previous position's, mu * x_t + (1 - mu) * x_{t-1}
    with a learned mu per feature starting at 0.5 (RWKV's token shift, Peng et al. 2023, eqs. 11-13
    and 14-15; x-transformers' ``shift_tokens: 1`` is mu fixed at 1 on the first half of the
    features and 0 on the second): a convolution of length 2 before the sub-layer, which
    connects each position with the one before (Table 1) and carries that one position while
    decoding. Off: it reads x_t alone."""
    stem: ClassVar[str]
    """Node-name stem in the IR, e.g. ``encoder.layers.0.<stem>``."""
    component: ClassVar[str]
    """Category in parameter and cost reports: attention, ffn, recurrent, conv."""
    needs_memory: ClassVar[bool] = False
    """Reads the encoder output (cross-attention): only valid in an encoder-decoder's decoder."""
    apart: ClassVar[dict[str, str]] = {}
    """Parameter role -> the line parameter reports count it on instead of ``component``: a
    tensor counted differently by convention (DeepSeek-V3's router score bias, a buffer that
    transformers' num_parameters leaves out)."""
    _filled: frozenset[str] | None = PrivateAttr(None)
    """The fields ``resolved`` took from the spec (None: not resolved), which reports leave out."""

    @property
    def looks_ahead(self) -> bool:
        """Whether the output at position i reads inputs after i (forbidden in a decoder)."""
        return False

    @property
    def mixes_positions(self) -> bool:
        """Whether a real position's output may depend on a padded batch's padding even when
        attention masks hide the padded keys (a convolution's window, a recurrence, an
        expert's capacity counted over the padded sequence): prompts of different lengths
        then cannot share a batch (``Graph.masks_padding``). True unless a kind shows
        otherwise: a new kind is batched one row at a time until it says it is safe."""
        return True

    @property
    def residual_step(self) -> float:
        """The factor on this sub-layer's output as it joins the residual stream, besides the
        spec's ``residual_scale``: 1 unless a kind says otherwise (a feed-forward layer's half
        step in the macaron layout, ``ffn.step``)."""
        return 1.0

    def check(self, spec: Spec) -> str | None:
        """A message if this layer cannot work with the model-wide sizes of ``spec``."""
        return None

    def resolved(self, spec: Spec) -> Sublayer:
        """This layer with the spec-wide defaults its formulas depend on filled in (what the IR
        node records); itself unless overridden."""
        return self

    def idle(self, params: dict[str, int]) -> int:
        """How many of this layer's parameters (``params``: role -> count) a token leaves unused
        (a mixture of experts' unchosen experts): what active-parameter counts leave out."""
        return 0

    def lower(self, b: LayerBuilder, name: str, x: str) -> str:
        """Add this layer's op(s) to the IR reading node ``x``; return the output node."""
        raise NotImplementedError

    # What the analysis passes (tfspec.analysis) derive Table 1 of the paper from (§4).
    symbols: ClassVar[dict[str, str]] = {}
    """Formula symbol -> the field of this kind that holds its value (e.g. ``k`` -> ``kernel``)."""
    table1_terms: ClassVar[tuple[str, ...] | None] = None
    """The ``flops`` terms Table 1's "complexity per layer" counts; None: all of them."""
    recurrence: ClassVar[str | None] = None
    """``forward`` (or ``both``) when a hidden state is chained over positions, one step each."""

    def flops(self, s, dense: bool = False) -> dict:
        """Matmul FLOPs (2 x multiply-adds) of one forward pass over one sequence, by term, as
        expressions in the symbols of ``s`` (``tfspec.analysis.flops.SYMBOLS``: n, m, d, h,
        g, d_k, d_v, d_ff, k, r). ``dense``: also count work a mask discards (attention scores of
        invisible keys), as kernels that mask instead of skipping do."""
        raise NotImplementedError

    def reads(self, q, k):
        """Boolean (Lq, Lk): output position ``q`` reads input position ``k`` (broadcast index
        arrays, operators only, as ``Attention.visible``). Position-wise unless overridden."""
        return k == q

    def at_depth(self, depth: int) -> Sublayer:
        """The layer at ``depth`` (0 = bottom) when this kind is stacked until every position
        reaches every other (Table 1's path lengths); plain repetition unless overridden."""
        return self
