"""Rotary frequency scaling rules for long contexts: the ``scaling`` field of rotary positions
(``tfspec.positions.rotary``), one model per ``type``; ``tfspec.ir.rope_scaling`` computes them."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import Discriminator, Field, Tag, model_validator

from tfspec.spec.base import SpecModel, field_error
from tfspec.spec.bounds import MAX_WIDTH, Positions, RopeFactor

MAX_PAIRS = MAX_WIDTH // 2
"""Rotated pairs of a head's features: LongRoPE lists one factor per pair (Phi-3: 48)."""
Divisor = Annotated[float, Field(gt=0.0, le=1e6)]
"""A LongRoPE factor: one rotated pair's frequency is divided by it (Phi-3.5-mini's reach ~60)."""


class Llama3Scaling(SpecModel):
    """Llama 3's rotary frequency scaling (transformers' rope type ``llama3``; Llama 3.1-3.3):
    wavelengths longer than original_max_position_embeddings / low_freq_factor are stretched by
    ``factor``, those shorter than original_max_position_embeddings / high_freq_factor kept,
    and those between interpolated smoothly, so a model trained on short contexts reads long
    ones. Field names are transformers' ``rope_scaling`` keys, here and in the other rules. Equal
    factors leave no band between (Llama-4-Scout-17B-16E-Instruct's 1 and 1): each wavelength is
    stretched or kept, as transformers computes it."""

    depends_on_length: ClassVar[bool] = False
    """Fixed frequencies, whatever a call's length (``Positional.depends_on_length``)."""
    type: Literal["llama3"] = "llama3"
    """The scaling rule (a ``scaling`` without ``type`` is this one)."""
    factor: RopeFactor
    """Stretch of the long wavelengths (Llama 3.1: 8)."""
    low_freq_factor: RopeFactor = 1.0
    """Wavelengths above original_max_position_embeddings / this are stretched fully."""
    high_freq_factor: RopeFactor = 4.0
    """Wavelengths below original_max_position_embeddings / this are kept."""
    original_max_position_embeddings: Positions = 8192
    """The context length the model was first trained at."""

    @model_validator(mode="after")
    def _band(self) -> Llama3Scaling:
        if self.high_freq_factor < self.low_freq_factor:
            raise field_error("high_freq_factor", f"high_freq_factor ({self.high_freq_factor}) must be at least "
                              f"low_freq_factor ({self.low_freq_factor}): wavelengths between the two bounds are "
                              "interpolated; raise high_freq_factor")
        return self


class LinearScaling(SpecModel):
    """Position interpolation (Chen et al. 2023; transformers' ``linear``): every frequency
    divided by ``factor``, as if positions were (Vicuna-v1.5-16k and LongChat's long-context
    Llamas: 4; Gemma 3's global layers: 8)."""

    depends_on_length: ClassVar[bool] = False
    """Fixed frequencies, whatever a call's length (``Positional.depends_on_length``)."""
    type: Literal["linear"]
    factor: RopeFactor
    """Positions are divided by this (a model trained on L tokens reads factor x L)."""


class DynamicScaling(SpecModel):
    """Dynamic NTK scaling (transformers' ``dynamic``, proposed by /u/emozilla for Llama run
    past its training length without fine-tuning; InternLM2's configurations): frequencies plain
    up to L = original_max_position_embeddings; past it the base grows with the run-time length n
    as base x (factor n / L - (factor - 1))^(r / (r - 2)) for r rotated features. Computed per
    forward call from that call's last position + 1, as transformers' ``dynamic_rope_update``
    does (decoding steps past L each use their own base)."""

    depends_on_length: ClassVar[bool] = True
    """The frequencies follow the length a call reaches (``Positional.depends_on_length``)."""
    type: Literal["dynamic"]
    factor: Annotated[float, Field(ge=1.0, le=1e6)]
    """How fast the base grows past the original length (1: never)."""
    original_max_position_embeddings: Positions
    """The length up to which the frequencies stay plain (transformers: the config's
    max_position_embeddings)."""


class YarnScaling(SpecModel):
    """YaRN (Peng et al. 2023; transformers' ``yarn``; DeepSeek-V2/V3, Qwen2.5 and Qwen3's 128k
    setting): dimensions turning fewer than beta_slow times over the original context are
    interpolated (frequency / factor), those turning more than beta_fast times kept, a linear
    ramp between; cos and sin are multiplied by the attention factor (0.1 ln(factor) + 1 unless
    given, or the mscale / mscale_all_dim ratio DeepSeek writes)."""

    depends_on_length: ClassVar[bool] = False
    """Fixed frequencies, whatever a call's length (``Positional.depends_on_length``)."""
    type: Literal["yarn"]
    factor: RopeFactor
    """Context extension (DeepSeek-V3: 40, Qwen3: 4)."""
    original_max_position_embeddings: Positions
    """The context the model was pretrained at (DeepSeek-V3: 4096)."""
    beta_fast: Annotated[float, Field(gt=0.0, le=1e6)] = 32.0
    """Rotations over the original context above which a dimension is kept."""
    beta_slow: Annotated[float, Field(gt=0.0, le=1e6)] = 1.0
    """Rotations below which a dimension is interpolated."""
    mscale: Annotated[float, Field(gt=0.0, le=1e3)] | None = None
    """With mscale_all_dim: attention factor = mscale(factor, mscale) / mscale(factor, mscale_all_dim)."""
    mscale_all_dim: Annotated[float, Field(gt=0.0, le=1e3)] | None = None
    """DeepSeek's latent attention also multiplies its softmax scale by mscale(factor, this)^2
    (the importer writes that into the layer's ``scale``)."""
    attention_factor: Annotated[float, Field(gt=0.0, le=1e3)] | None = None
    """The multiplier of cos and sin; None: derived from factor (and the mscales)."""
    truncate: bool = True
    """Round the ramp's ends to whole dimensions (false: gpt-oss)."""

    @model_validator(mode="after")
    def _ramp(self) -> YarnScaling:
        if self.beta_fast <= self.beta_slow:
            raise field_error("beta_fast", f"beta_fast ({self.beta_fast}) must exceed beta_slow ({self.beta_slow}): "
                              "the ramp runs from the dimensions turning beta_fast times to those turning beta_slow "
                              "times; raise beta_fast")
        return self


class LongRopeScaling(SpecModel):
    """LongRoPE (Ding et al. 2024; transformers' ``longrope``; Phi-3-mini-128k, Phi-3.5-mini,
    Phi-4-mini): each frequency divided by its own factor, short_factor's while a forward call
    reaches at most original_max_position_embeddings (its last position + 1), long_factor's
    past it, as transformers' ``dynamic_rope_update`` picks them per call; cos and sin are
    multiplied by the attention factor, sqrt(1 + ln(factor) / ln(original)) unless given, factor
    being max_len / original_max_position_embeddings unless given."""

    depends_on_length: ClassVar[bool] = True
    """The frequencies follow the length a call reaches (``Positional.depends_on_length``)."""
    type: Literal["longrope"]
    short_factor: Annotated[tuple[Divisor, ...], Field(min_length=1, max_length=MAX_PAIRS)]
    """One divisor per rotated pair, for calls within the original length."""
    long_factor: Annotated[tuple[Divisor, ...], Field(min_length=1, max_length=MAX_PAIRS)]
    """One divisor per rotated pair, for calls past it."""
    original_max_position_embeddings: Positions
    """The context the model was pretrained at (Phi-3: 4096)."""
    factor: Annotated[float, Field(ge=1.0, le=1e6)] | None = None
    """Context extension the default attention factor reads; None: max_len / original."""
    attention_factor: Annotated[float, Field(gt=0.0, le=1e3)] | None = None
    """The multiplier of cos and sin; None: derived from factor."""
    long_attention_factor: Annotated[float, Field(gt=0.0, le=1e3)] | None = None
    """The multiplier of cos and sin in calls past the original length (PhiMoE's long_mscale, its
    short_mscale the attention_factor); None: attention_factor in every call."""
    long_frequencies: bool = True
    """Whether calls past the original length rotate by long_factor. transformers' PhiMoE
    (Phi-3.5-MoE) computes its frequencies without the call's length, short_factor's at every
    length, and only its cos and sin multiplier switches (false)."""

    @model_validator(mode="after")
    def _pairs(self) -> LongRopeScaling:
        if len(self.short_factor) != len(self.long_factor):
            raise field_error("long_factor", f"long_factor has {len(self.long_factor)} values and short_factor "
                              f"{len(self.short_factor)}: both hold one per rotated pair of features")
        return self




def _scaling_type(data: Any) -> str | None:
    """The rule a ``scaling`` names: its ``type``, llama3 when it names none (older specs)."""
    return data.get("type", "llama3") if isinstance(data, dict) else getattr(data, "type", None)


RotaryScaling = Annotated[Union[Annotated[Llama3Scaling, Tag("llama3")], Annotated[LinearScaling, Tag("linear")],
                                Annotated[DynamicScaling, Tag("dynamic")], Annotated[YarnScaling, Tag("yarn")],
                                Annotated[LongRopeScaling, Tag("longrope")]], Discriminator(_scaling_type)]
"""Rotary frequency scaling for long contexts, one rule per ``type``."""
SCALINGS = {get_args(rule.model_fields["type"].annotation)[0]: rule
            for rule in (Llama3Scaling, LinearScaling, DynamicScaling, YarnScaling, LongRopeScaling)}
"""Each rule's class by its ``type``: what readers of a dumped ``scaling`` ask (``depends_on_length``)."""
