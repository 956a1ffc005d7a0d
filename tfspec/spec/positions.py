"""How positions enter a model (§3.5 and its successors): the ``positional`` field of a spec."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import Discriminator, Field, Tag, model_validator

from tfspec.spec.base import SpecModel, field_error
from tfspec.spec.bounds import MAX_POSITIONS, MAX_WIDTH, Fraction, Positions, RopeFactor, RotaryBase

MAX_BUCKETS = 2**16
"""Distance buckets of a relative attention bias: T5 uses 32."""
MAX_PAIRS = MAX_WIDTH // 2
"""Rotated pairs of a head's features: LongRoPE lists one factor per pair (Phi-3: 48)."""
Divisor = Annotated[float, Field(gt=0.0, le=1e6)]
"""A LongRoPE factor: one rotated pair's frequency is divided by it (Phi-3.5-mini's reach ~60)."""


class Llama3Scaling(SpecModel):
    """Llama 3's rotary frequency scaling (transformers' rope type ``llama3``; Llama 3.1-3.3):
    wavelengths longer than original_max_position_embeddings / low_freq_factor are stretched by
    ``factor``, those shorter than original_max_position_embeddings / high_freq_factor kept,
    and those between interpolated smoothly, so a model trained on short contexts reads long
    ones. Field names are transformers' ``rope_scaling`` keys, here and in the other rules."""

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
        if self.high_freq_factor <= self.low_freq_factor:
            raise field_error("high_freq_factor", f"high_freq_factor ({self.high_freq_factor}) must exceed "
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

    @model_validator(mode="after")
    def _pairs(self) -> LongRopeScaling:
        if len(self.short_factor) != len(self.long_factor):
            raise field_error("long_factor", f"long_factor has {len(self.long_factor)} values and short_factor "
                              f"{len(self.short_factor)}: both hold one per rotated pair of features")
        return self


CACHE_INDEXED = frozenset({"relative", "relative_bias", "alibi", "disentangled"})
"""Position kinds computed from cache columns (``Positional.reads_cache_indices``)."""


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


class Positional(SpecModel):
    """How positions enter the model (§3.5)."""

    kind: Literal["sinusoidal", "learned", "rotary", "relative", "relative_bias", "alibi", "disentangled",
                  "none"] = "sinusoidal"
    """sinusoidal: fixed sines/cosines added to the embeddings; learned: a trained table (Table 3
    row E); rotary: queries and keys of self-attention rotated by position (Su et al. 2021);
    relative: learned embeddings of the clipped distance j - i added to keys and values inside
    self-attention (Shaw et al. 2018); relative_bias: a learned scalar per head and bucket of
    the distance j - i added to self-attention's logits, one table per stack (T5, Raffel et al.
    2020, §2.1; ``tfspec.layers.relative_bias``); alibi: each head's logits penalised by a fixed
    slope times the distance |i - j|, no parameters (Press et al. 2022: BLOOM, MPT; slopes
    ``tfspec.ir.positions.alibi_slopes``); disentangled: DeBERTa's disentangled attention (He et al.
    2021, §3.1), a stack's table of 2 x buckets relative-position embeddings projected by each
    layer's own query and key weights, its content-to-position and position-to-content products
    added to the logits (``tfspec.layers.disentangled``); none: for models whose layers see order
    themselves."""
    max_len: Positions = 1024
    """Longest sequence the model accepts; rows of the learned table."""
    layout: Literal["interleaved", "halves"] = "interleaved"
    """sinusoidal: where the sines and cosines go. interleaved: sin at even features, cos at odd
    (§3.5 as the paper writes it); halves: all sines, then all cosines of the same frequencies
    (tensor2tensor's and Marian's layout, which transformers' MarianMT keeps)."""
    spacing: Literal["paper", "endpoint"] = "paper"
    """sinusoidal: the frequencies. paper: 10000^(-2i/d) (§3.5); endpoint: 10000^(-i/(d/2 - 1)),
    the last exactly 1/10000 (tensor2tensor's timing signal as fairseq computes it: M2M-100,
    NLLB-200; ``tfspec.ir.positions.sinusoids``)."""
    offset: Annotated[int, Field(ge=0, le=MAX_POSITIONS)] = 0
    """learned and sinusoidal: rows of the table before the first position's; position p reads
    row p + offset (BART's learned table starts with 2 unused rows, a leftover of fairseq's
    padding positions; M2M-100's sinusoids are read from row pad_token_id + 1)."""
    tables: Literal["stack", "layer"] = "stack"
    """relative_bias: one (buckets, heads) table per stack, held by its first layer (T5, mT5),
    or one per self-attention layer (umT5)."""
    max_distance: Positions = 16
    """relative: distances are clipped to [-max_distance, max_distance] (Shaw et al.'s k);
    relative_bias: distances from max_distance on share the last bucket (T5: 128)."""
    buckets: Annotated[int, Field(ge=4, le=MAX_BUCKETS)] = 32
    """relative_bias: buckets of distances (T5's relative_attention_num_buckets): half exact
    distances, half log-spaced up to max_distance; bidirectional attention gives each sign half.
    disentangled: buckets per sign of the distance i - j (DeBERTa's position_buckets, 256): the
    table has 2 x buckets rows, distances below buckets / 2 exact, the others log-spaced up to
    max_distance (DeBERTa's max_relative_positions, 512)."""
    terms: tuple[Literal["c2p", "p2c"], ...] = Field(("c2p", "p2c"), min_length=1, max_length=2)
    """disentangled: the products added to the content-to-content score q_i·k_j: c2p, query
    content x key position (q_i·P^K_δ(i,j)); p2c, query position x key content (k_j·P^Q_δ(i,j)).
    DeBERTa-v2 and v3 add both (pos_att_type [p2c, c2p])."""
    table_norm: bool = False
    """disentangled: the spec's norm on the relative table before the projections (DeBERTa-v3's
    norm_rel_ebd: layer_norm)."""
    base: RotaryBase = 10000.0
    """rotary: the wavelength base of the rotation frequencies (transformers' rope_theta)."""
    fraction: Fraction = 1.0
    """rotary: the share of each head's d_k query/key features that is rotated, the first
    int(d_k * fraction); the rest pass unchanged (GPT-NeoX's rotary_pct, transformers'
    partial_rotary_factor)."""
    scaling: RotaryScaling | None = None
    """rotary: frequency scaling for long contexts (``type``: llama3, linear, dynamic, yarn,
    longrope); None: plain frequencies."""

    @property
    def table_rows(self) -> int | None:
        """Positions an embedding table has rows for (sinusoidal, learned): the longest input
        those kinds can read; None where no table bounds the length."""
        return self.max_len if self.kind in ("sinusoidal", "learned") else None

    @property
    def limit(self) -> int | None:
        """The longest sequence any path runs, its last token included (as transformers'
        ``max_length`` counts): max_len for every kind but none, which leaves length unbounded.
        The one rule of the Python search, generate.onnx, ``serve`` and the JavaScript clients
        (tfspec.json's ``position_limit``); ``room`` is what it leaves a search."""
        return None if self.kind == "none" else self.max_len

    def room(self, fed):
        """Most tokens a search may add after ``fed`` tokens (the decoder's start token and any
        prompt; an int or an array): ``limit - fed``, None where length is unbounded."""
        return None if self.limit is None else self.limit - fed

    @property
    def depends_on_length(self) -> bool:
        """Whether a position's encoding depends on the length the call reaches (dynamic NTK
        and LongRoPE scalings pick their frequencies per call), so a row's output depends on
        the rows it is batched with: refused for ragged batching (``Graph.masks_padding``)."""
        return self.scaling is not None and self.scaling.depends_on_length

    @property
    def reads_cache_indices(self) -> bool:
        """Whether attention reads positions as cache columns (the distance j - i between key
        and query columns) rather than each row's own position ids: a cache holding padding
        inside its rows (onnxruntime-genai's) then shifts the distances."""
        return self.kind in CACHE_INDEXED

    @property
    def in_attention(self) -> bool:
        """Positions enter through self-attention rather than the embeddings."""
        return self.kind in ("rotary", "relative", "relative_bias", "alibi", "disentangled")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _kind_only(self) -> Positional:
        for field, unset, kinds in (("fraction", 1.0, ("rotary",)), ("scaling", None, ("rotary",)),
                                    ("layout", "interleaved", ("sinusoidal",)), ("spacing", "paper", ("sinusoidal",)),
                                    ("offset", 0, ("learned", "sinusoidal")), ("buckets", 32, ("relative_bias", "disentangled")),
                                    ("tables", "stack", ("relative_bias",)), ("terms", ("c2p", "p2c"), ("disentangled",)),
                                    ("table_norm", False, ("disentangled",))):
            if self.kind not in kinds and getattr(self, field) != unset:
                kind = " or ".join(kinds)
                raise field_error(field, f"{field} shapes {kind} positions, but kind is {self.kind}: remove "
                                  f"{field} or set kind: {kinds[0]}")
        if self.kind == "relative_bias" and self.max_distance <= self.buckets // 2:
            raise field_error("max_distance", f"max_distance ({self.max_distance}) must exceed buckets // 2 "
                              f"({self.buckets // 2}), the exact distances: the other buckets are log-spaced "
                              "between the two; raise max_distance or lower buckets")
        if self.kind == "disentangled":
            self._check_disentangled()
        return self

    def _check_disentangled(self) -> None:
        if len(set(self.terms)) < len(self.terms):
            raise field_error("terms", f"terms lists {list(self.terms)}: name each of c2p and p2c at most once")
        if not self.buckets // 2 + 1 < self.max_distance <= MAX_BUCKETS:
            raise field_error("max_distance", f"max_distance ({self.max_distance}) must exceed buckets // 2 + 1 "
                              f"({self.buckets // 2 + 1}), where the log-spaced buckets start, and be at most "
                              f"{MAX_BUCKETS:,}; raise max_distance or lower buckets")

    @property
    def rows(self) -> int:
        """Rows of the table: the offset's unused ones, then one per position."""
        return self.max_len + self.offset

    def rotated(self, d_k: int) -> int:
        """How many of a head's d_k query/key features rotary positions rotate."""
        return int(d_k * self.fraction)

    def scaling_problem(self, rotated: int) -> str | None:
        """Why ``scaling`` cannot scale ``rotated`` features (a layer's, known once sizes are
        resolved), or None."""
        s = self.scaling
        if s is not None and s.type == "longrope" and len(s.short_factor) != rotated // 2:
            return (f"positional.scaling.short_factor and long_factor hold {len(s.short_factor)} values; the layer "
                    f"rotates {rotated} features, {rotated // 2} pairs: give one factor per pair")
        if s is not None and s.type == "dynamic" and rotated <= 2:
            return (f"dynamic scaling raises the base to r / (r - 2) for r rotated features; the layer rotates "
                    f"{rotated}: rotate more features")
        return None
