"""The spec language: what a Transformer variant is, as validated, frozen pydantic models.

Field docstrings become the JSON Schema descriptions editors show (``tfspec schema``).
Cross-field rules quote both fields, their values and the fix.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from tfspec.layers import SUBLAYERS, crosslayer
from tfspec.layers.ffn import Activation
from tfspec.norms import NORMS
from tfspec.norms import description as norm_description
from tfspec.norms import names as norm_names
from tfspec.positions import rotary
from tfspec.spec.base import SpecModel, field_error
from tfspec.spec.bounds import (MAX_BLOCK, MAX_LAYERS, MIN_VOCAB, Channels, Epsilon, Heads, Layers, Positions,
                                Segments, Steps, Text, TokenId, VocabSize, Width)
from tfspec.spec.dual import DualEncoder
from tfspec.spec.image_encoder import ImageEncoder
from tfspec.spec.embed_projection import EmbedProjection
from tfspec.spec.frames import Frames
from tfspec.spec.memory_tokens import MAX_MEMORY_TOKENS, problem as memory_problem
from tfspec.spec.patches import Patches
from tfspec.spec.audio import Spectrogram
from tfspec.spec.waveform import Waveform
from tfspec.spec.heads import Head
from tfspec.spec.image_heads import ImagePooler
from tfspec.spec.positions import Positional
from tfspec.spec.sharing import LayerSharing
from tfspec.spec.softmax_mixture import SoftmaxMixture
from tfspec.spec.streams import ResidualStreams

Probability = Annotated[float, Field(ge=0.0, lt=1.0)]


def _expand_kind(value: Any) -> Any:
    """``self_attention`` is shorthand for ``{kind: self_attention}``."""
    return {"kind": value} if isinstance(value, str) else value


_KindUnion = Annotated[Union[tuple(SUBLAYERS.values())], Field(discriminator="kind")]
Layer = Annotated[
    _KindUnion,
    BeforeValidator(_expand_kind, json_schema_input_type=Union[Literal[tuple(SUBLAYERS)], _KindUnion]),
]
Block = Annotated[list[Layer], Field(min_length=1, max_length=MAX_BLOCK)]


class Vocab(SpecModel):
    """Token vocabularies. Ids 0-3 are reserved for pad, bos, eos and unk by default."""

    size: VocabSize
    """Tokens in the (source) vocabulary, special tokens included."""
    target_size: VocabSize | None = None
    """Target vocabulary size when not shared; defaults to size."""
    shared: bool = True
    """Source and target use one vocabulary (the paper's shared BPE, §5.1)."""
    pad_id: TokenId = 0
    bos_id: TokenId = 1
    eos_id: TokenId = 2
    unk_id: TokenId = 3
    eos_ids: list[TokenId] | None = Field(None, min_length=1, max_length=64)
    """Every id that ends a sequence when generated, besides eos_id: decoding stops on any
    (Llama 3.1 Instruct ends with <|end_of_text|>, <|eom_id|> or <|eot_id|>). eos_id stays the
    one tfspec appends to sources and writes; None: eos_id alone."""
    mask_id: TokenId | None = None
    """The [MASK] token of masked-LM training (encoder-only specs); None: ``tfspec train``
    uses unk_id."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"size": data} if isinstance(data, int) and not isinstance(data, bool) else data

    @model_validator(mode="after")
    def _consistent(self) -> Vocab:
        if self.shared and self.target_size not in (None, self.size):
            raise field_error("target_size", f"a shared vocabulary has one size, but size is {self.size} "
                              f"and target_size {self.target_size}; drop target_size or set shared: false")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id, "unk_id": self.unk_id}
        for key, value in (ids | {"mask_id": self.mask_id or 0, "eos_ids": max(self.eos_ids or [0])}).items():
            if value >= min(self.size, self.tgt_size):
                raise field_error(key, f"{key} ({value}) must be smaller than the vocabulary ({self.size})")
        # Any ids may coincide: padding is what masks say (``tfspec.padding``), never an id, so pad
        # may be eos (transformers' decoders without a pad token), bos (Marian, T5: decoding starts
        # from it) or all four one token (GPT-2's <|endoftext|>).
        return self

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """The ids that end a generated sequence: eos_id and eos_ids, sorted."""
        return tuple(sorted({self.eos_id, *(self.eos_ids or ())}))

    @property
    def eos_token_id(self) -> int | list[int]:
        """``eos_token_id`` as transformers and onnxruntime-genai configurations write it: the id,
        or every id that ends a sequence with ``eos_id`` first (Llama 3.1 Instruct's list)."""
        rest = [i for i in self.stop_ids if i != self.eos_id]
        return [self.eos_id, *rest] if rest else self.eos_id

    @property
    def starts_with_pad(self) -> bool:
        """The decoder starts from the padding token (bos_id = pad_id: Marian, T5, GPT-2's one
        token): a target's first token is then its start, never padding."""
        return self.bos_id == self.pad_id

    @property
    def tgt_size(self) -> int:
        return self.target_size or self.size


class Image(SpecModel):
    """Images as sequences (Image Transformer, Parmar et al. 2018, §3.1): every channel
    intensity of every pixel is one token, in raster order (row r, column c, channel ch at
    position (r * width + c) * channels + ch), and its position enters as the sum of a learned
    row, column and channel embedding. A decoder-only model reads [bos, x_0, .., x_{n-2}], so
    position i carries the row, column and channel of the intensity x_i it predicts."""

    height: Positions
    """Rows of pixels."""
    width: Positions
    """Columns of pixels."""
    channels: Channels = 3
    """Intensities per pixel (3: RGB), each a position of its own."""
    levels: VocabSize = 256
    """Intensity values per channel: token ids 0 .. levels - 1 (8-bit images: 256)."""

    @property
    def positions(self) -> int:
        return self.height * self.width * self.channels


class Biases(SpecModel):
    """Bias switches per projection, for models that bias some and not others (Qwen2: q, k
    and v biased, the output not); each one left unset follows the spec's ``bias``."""

    q: bool | None = None
    """The query projection."""
    k: bool | None = None
    """The key projection."""
    v: bool | None = None
    """The value projection."""
    o: bool | None = None
    """The attention output projection W^O."""
    ffn: bool | None = None
    """Every dense layer of the feed-forward sub-layers."""
    head: bool | None = None
    """The dense layer of the masked-LM head (``head_transform``; ModernBERT's has none)."""


class Group(SpecModel):
    """Consecutive layers that share one block layout."""

    layers: Layers
    """How many layers use this block."""
    block: Block
    """The sub-layers of each layer, in order; each is wrapped in residual + norm + dropout."""


class Act(SpecModel):
    """Adaptive computation time (Graves 2016) as the Universal Transformer uses it: each
    position halts once its halting probabilities sum past ``threshold``."""

    threshold: float = Field(0.99, gt=0, le=1)
    """1 - epsilon: a position stops updating when its summed halting probability passes it."""
    penalty: float = Field(0.01, ge=0, le=1e3)
    """Weight of the ponder cost (steps taken + remainder, per token) in the training loss."""


class Stack(SpecModel):
    """An encoder or decoder: N layers of a block, or groups of layers with different blocks."""

    layers: Layers | None = None
    """N, the number of identical layers (§3.1); use groups for heterogeneous stacks."""
    block: Block | None = None
    """The sub-layers of each layer, in order, e.g. [self_attention, ffn]."""
    groups: list[Group] | None = Field(default=None, min_length=1, max_length=MAX_LAYERS)
    """Instead of layers + block: runs of layers with their own blocks, bottom to top."""
    shared: bool = False
    """Universal Transformer (Dehghani et al. 2019): one layer's weights applied ``layers``
    times, a timestep signal (and, with sinusoidal positions, the position signal) added
    before each application."""
    act: Act | None = None
    """With ``shared``: adaptive computation time per position; ``layers`` is then the most
    steps any position takes (the fixed depth of exported graphs)."""
    layer_drop: Probability = 0.0
    """LayerDrop (Fan et al. 2019, §3; stochastic depth over whole layers): in training each layer
    of the stack is skipped with this probability, the same for the whole batch, its input
    passed on unchanged and nothing rescaled; evaluation, decoding and exported graphs run every
    layer. x-transformers' ``layer_dropout`` skips each sub-layer on its own. 0: none."""
    share_layers: LayerSharing | None = None
    """Cross-layer parameter sharing without a timestep signal (ALBERT): runs of layers applying
    a few layers' weights in turn (``tfspec.spec.sharing``); None: every layer has its own."""
    embed_scale: bool | None = None
    """This stack's token embeddings scaled by sqrt(d_model) or not, where it differs from the
    spec's ``embed_scale`` (BlenderbotSmall's decoder never scales them, its encoder does under
    scale_embedding); None: the spec's."""
    embed_norm_on: Literal["sum", "tokens"] = "sum"
    """What the spec's ``embed_norm`` normalises in this stack: the token embeddings plus the
    positions (BERT, BART), or the token embeddings alone, the positions added after it
    (BlenderbotSmall's decoder)."""
    memory_tokens: Annotated[int, Field(ge=0, le=MAX_MEMORY_TOKENS)] = 0
    """m learned vectors before the sequence, through every layer, dropped before the head
    (Burtsev et al. 2020's memory tokens, Darcet et al. 2024's registers; x-transformers'
    ``num_memory_tokens``; ``tfspec.spec.memory_tokens``). 0: none."""

    @model_validator(mode="after")
    def _one_form(self) -> Stack:
        if self.groups is not None and (self.layers is not None or self.block is not None):
            raise field_error("groups", "give either groups or layers + block, not both")
        if self.groups is None and (self.layers is None or self.block is None):
            missing = "layers" if self.layers is None else "block"
            raise field_error(missing, f"missing {missing}: a stack needs layers and block (or groups)")
        if self.shared and self.groups is not None:
            raise field_error("shared", "a shared (universal) stack repeats one block: use layers + block")
        if self.act is not None and not self.shared:
            raise field_error("act", "adaptive computation time halts a repeated layer: set shared: true")
        if self.layer_drop and self.act is not None:
            raise field_error("layer_drop", "layer_drop skips whole steps, but adaptive computation time counts "
                              "every step's halting probability: drop layer_drop or act")
        if self.num_layers > MAX_LAYERS:
            raise field_error("groups", f"the groups add up to {self.num_layers:,} layers; a stack holds at most "
                              f"{MAX_LAYERS:,}")
        if self.share_layers is not None:
            self._check_sharing()
        return self

    def _check_sharing(self) -> None:
        if self.shared:
            raise field_error("share_layers", "a shared (universal) stack already applies one layer's weights "
                              "throughout: drop share_layers or shared")
        if problem := self.share_layers.problem(self.num_layers):
            raise field_error(*problem)
        blocks = [block for group in self.segments for block in [group.block] * group.layers]
        for index, block in enumerate(blocks):
            owner = self.share_layers.owner(index)
            if block != blocks[owner]:
                raise field_error("share_layers", f"layer {index} would apply layer {owner}'s weights, but their "
                                  "blocks differ; share only layers of one block")

    def owner(self, index: int) -> int:
        """The layer whose weights layer ``index`` applies (itself unless the stack shares them)."""
        if self.shared:
            return 0
        return index if self.share_layers is None else self.share_layers.owner(index)

    @property
    def segments(self) -> list[Group]:
        return self.groups if self.groups is not None else [Group(layers=self.layers, block=self.block)]

    @property
    def num_layers(self) -> int:
        return sum(g.layers for g in self.segments)

    @property
    def uniform(self) -> bool:
        """Every layer has the same block (however the stack is written)."""
        return len(self.canonical()["groups"]) == 1

    def canonical(self, spec: Spec | None = None) -> dict:
        """The stack as runs of layers with their block, neighbouring runs of one block merged:
        ``layers: 6, block: B`` and ``groups: [{layers: 2, block: B}, {layers: 4, block: B}]``
        are one stack. With ``spec``, each layer as it resolves against it (a layer's heads
        left out or equal to the spec's compare equal)."""
        groups: list[dict] = []
        for group in self.segments:
            block = [(layer if spec is None else layer.resolved(spec)).model_dump(mode="json") for layer in group.block]
            if groups and groups[-1]["block"] == block:
                groups[-1]["layers"] += group.layers
            else:
                groups.append({"layers": group.layers, "block": block})
        return {"groups": groups, "shared": self.shared, "act": None if self.act is None else self.act.model_dump(),
                "share_layers": None if self.share_layers is None else self.share_layers.model_dump(),
                "layer_drop": self.layer_drop} | ({"memory_tokens": self.memory_tokens} if self.memory_tokens else {})

    def entries(self):
        """(field path, layer kind) of each block entry as written, e.g. ``block.0``."""
        for g, group in enumerate(self.segments):
            prefix = f"groups.{g}.block" if self.groups is not None else "block"
            for position, layer in enumerate(group.block):
                yield f"{prefix}.{position}", layer

    def sublayers(self):
        """(layer index, layer kind) for every sub-layer of the unrolled stack, bottom to top."""
        index = 0
        for group in self.segments:
            for _ in range(group.layers):
                for layer in group.block:
                    yield index, layer
                index += 1


class Reference(SpecModel):
    """What a published source reports for this model: shown beside tfspec's own numbers."""

    source: Text
    """Citation, e.g. 'Vaswani et al. 2017, Table 3'."""
    row: Text | None = None
    """Row or variant label in the source."""
    architecture: Text | None = None
    """The transformers class ``tfspec import`` read the checkpoint as (MarianMTModel): ``report``
    names where that class's own count differs from tfspec's (``interop.hf.counts``)."""
    params_millions: float | None = Field(None, gt=0, le=1e9)
    """Parameter count the source reports, in millions."""
    bleu: float | None = Field(None, gt=0, le=100)
    perplexity: float | None = Field(None, gt=0, le=1e9)
    train_steps: Steps | None = None


class Spec(SpecModel):
    """A Transformer variant. Unlisted fields take the paper's base-model values."""

    @classmethod
    def model_json_schema(cls, *args, **kwargs) -> dict:
        """pydantic's schema with the spec's own fields at the top: a dual encoder's image tower is a
        whole spec, so pydantic makes Spec a $def that refers to itself and the top a bare $ref."""
        schema = super().model_json_schema(*args, **kwargs)
        if "$ref" in schema:
            schema |= schema["$defs"][schema.pop("$ref").rsplit("/", 1)[1]]
        return schema

    name: str = Field("model", min_length=1, max_length=200)
    """Model name; defaults to the spec's file name."""
    description: Text = ""
    """One line about the model (not inherited through extends)."""
    extends: Text | None = None
    """Path (relative to this file) or shipped name of a spec to inherit; fields set here win.
    Mappings merge key by key, lists are replaced, null removes an inherited key."""
    family: Literal["encoder-decoder", "encoder-only", "decoder-only"] = "encoder-decoder"
    vocab: Vocab
    d_model: Width = 512
    """Width of every residual stream (d_model)."""
    heads: Heads = 8
    """Attention heads h."""
    kv_heads: Heads | None = None
    """Key/value heads: each serves heads / kv_heads query heads (grouped-query attention,
    Ainslie et al. 2023; 1 is multi-query attention). Defaults to heads (the paper)."""
    d_k: Width | None = None
    """Query/key width per head; defaults to d_model / heads."""
    d_v: Width | None = None
    """Value width per head; defaults to d_model / heads."""
    d_ff: Width = 2048
    """Inner size of the feed-forward layers."""
    activation: Activation = "relu"
    gated: bool = False
    """Feed-forward layers as gated linear units (Shazeer 2020): act(x W1) * (x W3), then W2;
    with silu that is SwiGLU (Llama, Mistral, Qwen2), with gelu GeGLU."""
    dropout: Probability = 0.1
    """P_drop: on every sub-layer output and on embeddings + positions (§5.4)."""
    attention_dropout: Probability = 0.0
    """Dropout on attention weights (not in the paper)."""
    activation_dropout: Probability = 0.0
    """Dropout inside the feed-forward layer (not in the paper)."""
    label_smoothing: Probability = 0.1
    """eps_ls (§5.4)."""
    positional: Positional = Positional()
    norm: Literal["post", "pre", "sandwich", "output", "none"] = "post"
    """Where each sub-layer's norm sits. post: Norm(x + Sublayer(x)), the paper's; pre:
    x + Sublayer(Norm(x)) (GPT-2, Llama); sandwich: x + Norm(Sublayer(Norm(x))), two norms per
    sub-layer (Gemma 2 and 3); output: x + Norm(Sublayer(x)), the norm on the sub-layer's output
    only (OLMo 2's reordered norm, Swin v2's res-post-norm); none: no norm, x + Sublayer(x), and
    no final norm unless final_norm says so (ReZero, Bachlechner et al. 2020, with
    ``sublayer_gain: 0, sublayer_gain_shape: scalar``)."""
    residual: Literal["sequential", "parallel", "parallel_shared_norm"] = "sequential"
    """How a layer's sub-layers join the residual stream. sequential: one after another (§3.1);
    parallel: attention and feed-forward both read the layer's input, x + Attn(Norm1(x)) +
    FFN(Norm2(x)) (GPT-NeoX, Pythia); parallel_shared_norm: both read one norm of it,
    x + Attn(Norm(x)) + FFN(Norm(x)) (GPT-J, Phi-2, Falcon). Parallel layers need norm: pre
    and a block of two sub-layers."""
    residual_streams: ResidualStreams | None = None
    """Hyper-connections (Zhu et al. 2024): the residual stream widened to n streams joined by
    learned (and, dynamic, input-dependent) connections, ``tfspec.spec.streams``; None: the one
    stream of x + f(x)."""
    norm_type: Literal[norm_names()] = Field("layer", description=norm_description())
    """What every norm computes, one module per kind in ``tfspec/norms`` (layer: LayerNorm with
    gain and bias, the paper's; rms: RMSNorm, Llama's; l2: ScaleNorm; tanh: dynamic tanh)."""
    norm_bias: bool | None = None
    """LayerNorm's bias; false: a gain only (Cohere, GPT-NeoX-style models trained without
    one). Defaults to true for LayerNorm; RMSNorm has none."""
    norm_gain: bool = True
    """The norms' learned gain; false (with norm_bias false): no parameters at all, x - mean
    over the standard deviation (OLMo 1's non-parametric LayerNorm)."""
    norm_eps: Epsilon = 1e-5
    final_norm: bool | None = None
    """A norm after each stack's last layer; defaults to false for post-norm, true otherwise."""
    tie_embeddings: Literal["none", "output", "all", "inputs"] = "output"
    """output: target embedding and pre-softmax projection share a matrix; all: the source
    embedding too, as in the paper (§3.4; needs a shared vocabulary); inputs: the source and
    target embeddings share one, the projection has its own (T5 v1.1)."""
    embed_scale: bool = True
    """Multiply embeddings by sqrt(d_model) (§3.4)."""
    embed_multiplier: float = Field(1.0, gt=0, le=1e6)
    """A further factor on the token embeddings (Granite's embedding_multiplier: 12)."""
    residual_scale: float = Field(1.0, gt=0, le=1e6)
    """Factor on each sub-layer's output before it joins the residual stream, x + s * f(x)
    (Granite's residual_multiplier: 0.22)."""
    sublayer_gain: float | None = Field(None, ge=0, le=1e6)
    """A learned gain on each sub-layer's output before it joins the residual stream, starting at
    this value: x + diag(gamma) f(x) per feature (LayerScale: Touvron et al. 2021, CaiT §2, 1e-5 to
    0.1; DINOv2's layerscale_value 1.0), or x + alpha f(x) with ``sublayer_gain_shape: scalar``
    (ReZero: Bachlechner et al. 2020, alpha from 0, so each sub-layer starts as the identity);
    None: no gain."""
    sublayer_gain_shape: Literal["feature", "scalar"] = "feature"
    """What ``sublayer_gain`` learns per sub-layer: feature, a gain per feature (d_model values,
    LayerScale); scalar, one value (ReZero's alpha)."""
    embed_norm: bool = False
    """LayerNorm on embeddings + positions, before dropout (BERT)."""
    embed_projection: EmbedProjection | None = None
    """Token embeddings narrower than d_model, projected in and back out (ALBERT, ELECTRA,
    OPT-350m; ``tfspec.spec.embed_projection``); None: embeddings of width d_model."""
    segments: Segments = 0
    """Segment (token type) embeddings added to the encoder input, BERT's sentences A and B;
    0: none. Ids come as the optional ``segments`` input (all 0 when absent)."""
    head_transform: bool = False
    """Dense + activation + LayerNorm before the output projection: BERT's masked-LM head (with
    ``output_bias: true``)."""
    pooler: bool = False
    """tanh(W x_1 + b) of the encoder's first position (BERT's [CLS] pooler): output ``pooled``."""
    bias: bool = True
    """Biases in attention, feed-forward, recurrent and convolution layers."""
    biases: Biases | None = None
    """Per-projection overrides of ``bias`` (q, k, v, o, ffn)."""
    output_bias: bool = False
    """Bias on the pre-softmax projection."""
    output_scale: float = Field(1.0, gt=0, le=1e3)
    """Factor on the last hidden states before the pre-softmax projection (T5 with tied
    embeddings: d_model^-0.5, as its embeddings are not scaled up by sqrt(d_model))."""
    output_softcap: float | None = Field(None, gt=0, le=1e6)
    """Logits squashed to c * tanh(logits / c) (Gemma 2's final_logit_softcapping: 30); None:
    logits as the projection gives them."""
    softmax_mixture: SoftmaxMixture | None = None
    """K softmaxes over the vocabulary mixed by priors (Yang et al. 2017; ``tfspec.spec.softmax_mixture``):
    the output is then log-probabilities; None: one softmax of the logits."""
    image: Image | None = None
    """An image input: intensity tokens in raster order with row, column and channel
    embeddings in place of ``positional`` (which must then be kind none)."""
    frames: Frames | None = None
    """Feature vectors per frame as the encoder's input instead of token ids (needs a ``head``)."""
    patches: Patches | None = None
    """Pixel values (batch, channels, height, width) cut into patches as the encoder's input instead
    of token ids, with their class token and learned positions (ViT; ``tfspec.spec.patches``)."""
    image_pooler: ImagePooler | None = None
    """The pooled features of an image encoder as the ``pooled`` output (BeitModel's pooler: the
    patches' mean through a LayerNorm; ``tfspec.spec.image_heads``); None: no such output."""
    spectrogram: Spectrogram | None = None
    """A log-mel spectrogram (batch, mels, frames) as the encoder's input instead of source tokens,
    through a convolution stem and a stored position table (Whisper; ``tfspec.spec.audio``)."""
    waveform: Waveform | None = None
    """Raw audio samples (batch, samples) as the encoder's input instead of token ids, through a
    convolutional feature encoder and a position convolution (wav2vec 2.0, HuBERT; ``tfspec.spec.waveform``)."""
    head: Head | None = None
    """An output head in place of the pre-softmax token projection (encoder-only specs):
    sequence_classification (logits (B, classes)), token_classification (B, S, classes) or ctc
    (per-frame log-probabilities of labels and a blank)."""
    dual: DualEncoder | None = None
    """A dual encoder (CLIP, SigLIP): this spec is the text tower, ``dual.vision`` the image
    tower, joined by pooling, projections and scaled cosine scores (``tfspec.spec.dual``)."""
    image_encoder: ImageEncoder | None = None
    """The encoder as a spec of its own reading patches (TrOCR: a ViT or DeiT under this spec's text
    decoder, in place of an ``encoder`` stack), projected to d_model where its width differs
    (``tfspec.spec.image_encoder``)."""
    encoder: Stack | None = None
    decoder: Stack | None = None
    reference: Reference | None = None
    """Published figures for this model (not inherited through extends)."""

    @field_validator("tie_embeddings", mode="before")
    @classmethod
    def _tie_alias(cls, value: Any) -> Any:
        return "output" if value == "decoder" else value  # the issue tracker's name for it

    @model_validator(mode="before")
    @classmethod
    def _default_head_dims(cls, data: Any) -> Any:
        if isinstance(data, dict):
            d, h = data.get("d_model", 512), data.get("heads", 8)
            if isinstance(d, int) and isinstance(h, int) and h > 0 and d % h == 0:
                data = {"d_k": d // h, "d_v": d // h} | {k: v for k, v in data.items() if v is not None}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        """Every cross-field check, each problem reported (``tfspec validate`` lists them all);
        a check that fails only because an earlier one found a problem reports nothing."""
        if self.d_k is None or self.d_v is None:  # every check below reads the head widths
            missing = " and ".join(f for f in ("d_k", "d_v") if getattr(self, f) is None)
            raise field_error("heads", f"d_model ({self.d_model}) is not divisible by heads ({self.heads}): "
                              f"set {missing} explicitly or pick heads dividing d_model")
        problems = []
        for check in self._checks():
            try:
                check()
            except PydanticCustomError as e:
                problems.append(e)
            except (AttributeError, TypeError, ValueError, ZeroDivisionError):
                if not problems:  # not a consequence of a problem already found: a bug, not input
                    raise
        if len(problems) == 1:
            raise problems[0]
        if problems:
            raise ValidationError.from_exception_data(
                type(self).__name__, [InitErrorDetails(type=e, loc=(), input=None) for e in problems])
        return self

    def _checks(self) -> list:
        """The cross-field checks, in the order their reports are listed."""
        return [self._check_family, self._check_ties, self._check_kv_heads, self._check_rotary, self._check_residual,
                self._check_norm, self._check_image, self._check_parts, self._check_encoder_parts,
                lambda: self._check_stack("encoder"), lambda: self._check_stack("decoder"), self._check_head,
                self._check_vocab]

    def _check_ties(self) -> None:
        if self.tie_embeddings in ("all", "inputs") and (self.family != "encoder-decoder" or not self.vocab.shared):
            raise field_error("tie_embeddings", f"tie_embeddings '{self.tie_embeddings}' ties the source embedding: "
                              "it needs family encoder-decoder and vocab.shared true; use 'output' or 'none' instead")

    def _check_kv_heads(self) -> None:
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise field_error("kv_heads", f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}): "
                              "each key/value head serves an equal group of query heads; pick kv_heads dividing heads")

    def _check_norm(self) -> None:
        kind = NORMS[self.norm_type]
        if problem := kind.problem(self):
            raise field_error(*problem)
        if kind.inside_ops:
            return
        for name, stack in self.stacks:  # qk_norm and DeBERTa's table norm apply the spec's norm_type
            for path, layer in stack.entries():
                own, qk_norm = getattr(layer, "positions", None), getattr(layer, "qk_norm", "none")
                table = f"{name}.{path}.positions" if own is not None else "positional"
                table_norm = getattr(own or self.positional, "table_norm", None)
                uses = ((f"{name}.{path}.qk_norm", qk_norm not in ("none", "l2"), "qk_norm: l2"),
                        (f"{table}.table_norm", table_norm, "table_norm: false"))
                for field, used, fix in uses:
                    if used:
                        raise field_error(field, f"{field.rsplit('.', 1)[1]} normalises with the norm_type, but the "
                                          f"attention lowerings do not compute norm_type {self.norm_type}: set "
                                          f"{fix}, or norm_type layer or rms")

    def _check_parts(self) -> None:
        if self.positional.definition.over_patches and self.patches is None:
            raise field_error("positional", f"{self.positional.kind} biases attention by the 2-D offsets of image "
                              "patches: give the spec patches")
        for part in (self.image_pooler, self.frames, self.patches, self.spectrogram, self.waveform, self.head, self.embed_projection,
                     self.residual_streams, self.dual, self.softmax_mixture, self.image_encoder):
            if part is not None and (problem := part.check(self)):
                raise field_error(*problem)

    def _check_encoder_parts(self) -> None:
        for field in ("segments", "pooler"):
            if getattr(self, field) and self.encoder is None:
                raise field_error(field, f"{field} belong to the encoder (BERT): family {self.family} has none")

    def _check_vocab(self) -> None:
        if self.frames is None and self.patches is None and self.waveform is None:  # token ids in: ids 0-3 are the special tokens'
            for key, size in (("size", self.vocab.size), ("target_size", self.vocab.tgt_size)):
                if size < MIN_VOCAB:
                    raise field_error(f"vocab.{key}", f"a vocabulary of {size} tokens has no room for ordinary "
                                      f"tokens: ids 0-3 are for special tokens; use at least {MIN_VOCAB}")

    def _check_head(self) -> None:
        if self.head is None:
            return
        if self.family != "encoder-only":
            raise field_error("head", f"a {self.head.kind} head reads an encoder alone: set family: encoder-only "
                              f"(got {self.family})")
        for field in ("head_transform", "output_bias"):
            if getattr(self, field):
                raise field_error(field, f"{field} belongs to the masked-LM projection, which head "
                                  f"{self.head.kind} replaces: set {field}: false")

    def _check_rotary(self) -> None:
        positional = self.positional
        if positional.kind != "rotary":
            return
        rotated = rotary.rotated(positional, self.d_k)
        if positional.fraction == 1.0 and rotated % 2:
            raise field_error("positional", f"rotary positions rotate pairs of query/key features: d_k "
                              f"({self.d_k}) must be even")
        if rotated % 2 or rotated == 0:
            raise field_error("positional.fraction", f"rotary positions rotate pairs of features: int(d_k x "
                              f"fraction) = int({self.d_k} x {positional.fraction}) = {rotated} must be even and "
                              "positive; pick a fraction that makes it so")

    def _check_residual(self) -> None:
        if self.sublayer_gain is None and self.sublayer_gain_shape != "feature":
            raise field_error("sublayer_gain_shape", f"sublayer_gain_shape ({self.sublayer_gain_shape}) shapes the "
                              "gain on each sub-layer's output, but sublayer_gain is not set: set sublayer_gain "
                              "(its start, 0 for ReZero) or drop sublayer_gain_shape")
        if self.residual == "sequential":
            return
        if self.norm != "pre":
            raise field_error("residual", f"parallel sub-layers read a norm of the layer's input: set norm: pre "
                              f"(got {self.norm})")
        for name, stack in self.stacks:
            for path, group in ((f"{name}.groups.{i}.block" if stack.groups else f"{name}.block", g)
                                for i, g in enumerate(stack.segments)):
                if len(group.block) != 2 or any(layer.needs_memory for layer in group.block):
                    raise field_error(path, f"residual {self.residual} adds two sub-layers that read one input "
                                      f"(attention and feed-forward); this block has {len(group.block)}: "
                                      f"{[layer.kind for layer in group.block]}")

    def _check_image(self) -> None:
        image = self.image
        if image is None:
            return
        if self.positional.kind != "none":
            raise field_error("positional", f"an image's positions are row, column and channel embeddings: set "
                              f"positional: {{kind: none}} (got {self.positional.kind})")
        if self.family == "encoder-decoder":
            raise field_error("image", "an image is one sequence: use family decoder-only (or encoder-only)")
        if self.vocab.size <= image.levels:
            raise field_error("vocab.size", f"vocab.size ({self.vocab.size}) must exceed image.levels "
                              f"({image.levels}): ids 0..{image.levels - 1} are intensities, padding and bos need "
                              f"their own; use {image.levels + 1} with pad_id = bos_id = eos_id = unk_id = {image.levels}")
        for key in ("pad_id", "bos_id"):
            if getattr(self.vocab, key) < image.levels:
                raise field_error(f"vocab.{key}", f"vocab.{key} ({getattr(self.vocab, key)}) is an intensity "
                                  f"(below image.levels, {image.levels}); use {image.levels} or above")

    def _check_family(self) -> None:
        wants = {"encoder-decoder": ("encoder", "decoder"), "encoder-only": ("encoder",),
                 "decoder-only": ("decoder",)}[self.family]
        for stack in ("encoder", "decoder"):
            present = getattr(self, stack) is not None
            if present and stack not in wants:
                raise field_error(stack, f"family {self.family} has no {stack}; remove it or change family")
            if not present and stack in wants and not (stack == "encoder" and self.image_encoder is not None):
                raise field_error(stack, f"family {self.family} needs an {stack}")

    def _check_stack(self, stack: str) -> None:
        spec = getattr(self, stack)
        if spec is None:
            return
        if spec.embed_norm_on != "sum" and not self.embed_norm:
            raise field_error(f"{stack}.embed_norm_on", f"embed_norm_on: {spec.embed_norm_on} places the embedding "
                              "norm, but embed_norm is false: set embed_norm: true or drop embed_norm_on")
        for path, layer in spec.entries():
            field = f"{stack}.{path}"
            if layer.needs_memory and not (stack == "decoder" and self.family == "encoder-decoder"):
                raise field_error(field, f"{layer.kind} reads the encoder output, so it only fits the decoder "
                                  "of an encoder-decoder")
            if stack == "decoder" and layer.looks_ahead:
                raise field_error(field, f"{layer.kind} would let the decoder see future tokens; use a causal "
                                  "kind (causal_self_attention, causal: true, unidirectional recurrent)")
            if not layer.input_norm and (self.norm not in ("pre", "sandwich") or self.residual != "sequential"):
                raise field_error(f"{field}.input_norm", f"input_norm: false leaves out the norm before a sub-layer, "
                                  f"which only norm: pre or sandwich with residual: sequential have (norm is "
                                  f"{self.norm}, residual {self.residual}); drop input_norm")
            if problem := layer.check(self):
                raise field_error(field, problem)
        self._check_shared_tables(stack, spec)
        if spec.memory_tokens and (problem := memory_problem(self, stack)):
            raise field_error(*problem)
        if problem := crosslayer.stack_problem(self, stack):  # value residual, residual attention
            raise field_error(*problem)

    def _check_shared_tables(self, stack: str, spec) -> None:
        """Layers of a stack that set a shared table's positions of their own (``layers_share``)
        share the one table, so they set the same (and the same as the spec's, where it has one)."""
        own = [(path, layer.positions) for path, layer in spec.entries()
               if getattr(layer, "positions", None) is not None and layer.positions.definition.per_stack]
        if self.positional.definition.per_stack and self.positional.definition.in_attention:
            own.append(("", self.positional))
        first = re.sub(r"\.(\d+)", r"[\1]", f"{stack}.{own[0][0]}") if own and own[0][0] else "positional"
        for path, positions in own[1:]:
            if positions.model_dump() != own[0][1].model_dump():
                raise field_error(f"{stack}.{path}" if path else "positional", f"{positions.kind} tables are one "
                                  f"per stack, shared by its layers: set the same positions as {first}")

    @property
    def stacks(self) -> list[tuple[str, Stack]]:
        return [(n, s) for n, s in (("encoder", self.encoder), ("decoder", self.decoder)) if s is not None]

    def canonical(self) -> dict:
        """What the spec computes, every default resolved, as JSON-ready data: specs that compute
        one model give equal data however they are written (kv_heads left out or equal to heads,
        biases unset or spelled out, final_norm left to its default, a stack as layers + block or
        as groups). Documentation (description, extends, reference) and the name are left out.
        Equality, hashing and ``export --format hf``'s family check compare this."""
        data = self.model_dump(mode="json", exclude={"name", "description", "extends", "reference"})
        data |= {"kv_heads": self.num_kv_heads, "final_norm": self.uses_final_norm, "norm_bias": self.uses_norm_bias,
                 "biases": {p: self.has_bias(p) for p in Biases.model_fields}}
        data["vocab"] |= {"target_size": self.vocab.tgt_size, "eos_ids": list(self.vocab.stop_ids)}
        for name, stack in self.stacks:
            data[name] = stack.canonical(self)
        return data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Spec):
            return NotImplemented
        return self.name == other.name and self.canonical() == other.canonical()

    def __hash__(self) -> int:
        return hash((self.name, json.dumps(self.canonical(), sort_keys=True)))

    def plan(self, stack: str) -> tuple:
        """One ``LayerPlan`` per layer of ``stack`` (encoder or decoder): what each layer
        computes, every default resolved (``tfspec.spec.plan``)."""
        from tfspec.spec.plan import plan_stack

        return plan_stack(self, stack)

    @property
    def embed_width(self) -> int:
        """The token embeddings' width: ``embed_projection.width``, else d_model."""
        return self.d_model if self.embed_projection is None else self.embed_projection.width

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads: kv_heads, or heads when unset."""
        return self.kv_heads or self.heads

    def has_bias(self, projection: str) -> bool:
        """Whether ``projection`` (q, k, v, o, ffn or head) has a bias: its ``biases`` entry, else ``bias``."""
        chosen = getattr(self.biases, projection) if self.biases is not None else None
        return self.bias if chosen is None else chosen

    @property
    def uses_norm_bias(self) -> bool:
        """The norms have a bias: ``norm_bias``, else LayerNorm's default (true)."""
        return NORMS[self.norm_type].bias_default if self.norm_bias is None else self.norm_bias

    @property
    def outputs_log_probs(self) -> bool:
        """The ``logits`` port holds normalised log-probabilities (the softmax mixture declares
        ``log_probs``): a consumer may skip its log-softmax, which would be the identity."""
        return self.softmax_mixture is not None and self.softmax_mixture.log_probs

    @property
    def ties_output(self) -> bool:
        """The pre-softmax projection is the target embedding matrix (§3.4)."""
        return self.tie_embeddings in ("output", "all")

    @property
    def uses_final_norm(self) -> bool:
        return self.norm not in ("post", "none") if self.final_norm is None else self.final_norm


DualEncoder.model_rebuild(_types_namespace={"Spec": Spec})  # its image tower is a whole spec
ImageEncoder.model_rebuild(_types_namespace={"Spec": Spec})  # TrOCR's encoder is a whole spec
Spec.model_rebuild()
