"""A raw waveform as the encoder's input: ``input_values`` (batch, samples) floats, wav2vec 2.0's
and HuBERT's front (Baevski et al. 2020, "wav2vec 2.0", §2 and Figure 1; Hsu et al. 2021,
"HuBERT", §III-A, which keeps the same front).

What the encoder reads before its layers, each an IR op of its own (``tfspec/ir/ops/waveform.py``):

- the feature encoder f: X -> Z, a stack of temporal convolutions (wav2vec 2.0: 7 layers of 512
  channels, strides (5, 2, 2, 2, 2, 2, 2), kernels (10, 3, 3, 3, 3, 2, 2): 20 ms frames every
  20 ms, a receptive field of 400 samples), each followed by GELU; normalised ``group``-wise (a
  GroupNorm with one group per channel, over time, after the first convolution only: the base
  models) or ``layer``-wise (a LayerNorm over the channels after every convolution: the large
  "stable layer norm" models, §4.2);
- the feature projection: LayerNorm over the channels (HuBERT may leave it out:
  ``projection_norm``), then a linear map to d_model;
- the relative positional embedding by convolution (§2: "a convolutional layer ... acts as
  relative positional embedding", after Mohamed et al. 2019): a grouped convolution over time of
  ``position_kernel`` frames (128, 16 groups) whose weight is stored weight-normalised (a gain g
  per kernel tap and a direction v, w = g v / ||v||, Salimans & Kingma 2016), zero-padded by
  kernel // 2 each side with the last output dropped when the kernel is even, then GELU, added
  to its input;
- for post-norm encoders, LayerNorm (the spec's ``embed_norm``); then dropout and the layers.

Padding: a batch's shorter rows are padded with zeros and an ``attention_mask`` (batch,
samples) marks the real samples (transformers' ``Wav2Vec2FeatureExtractor`` returns it for the
``layer`` models; the ``group`` ones are fed without, as GroupNorm over time reads the padding
too). Each row's frames are those the convolutions give its real samples,
L' = floor((L - k) / stride) + 1 per layer; the rest are padding, zeroed before the position
convolution and hidden from attention, as transformers computes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import MAX_KERNEL, Width

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec

MAX_CONV_LAYERS = 64
Kernel = Annotated[int, Field(ge=1, le=MAX_KERNEL)]
FEATURE_EPS = 1e-5
"""The feature encoder's norms' epsilon: torch's GroupNorm and LayerNorm default, which transformers keeps."""


class Waveform(SpecModel):
    """The encoder reads ``input_values`` (batch, samples) floats (16 kHz for the published models),
    and ``attention_mask`` (batch, samples), 1 at real samples (all ones where nothing is padded)."""

    conv_dim: list[Width] = Field(min_length=1, max_length=MAX_CONV_LAYERS)
    """Output channels of each convolution of the feature encoder (wav2vec 2.0: 7 x 512)."""
    conv_kernel: list[Kernel] = Field(min_length=1, max_length=MAX_CONV_LAYERS)
    """Samples (then frames) each convolution reads (wav2vec 2.0: 10, 3, 3, 3, 3, 2, 2)."""
    conv_stride: list[Kernel] = Field(min_length=1, max_length=MAX_CONV_LAYERS)
    """Stride of each convolution (wav2vec 2.0: 5, 2, 2, 2, 2, 2, 2: one frame per 320 samples)."""
    conv_bias: bool = False
    """Biases in the feature encoder's convolutions (off in the base models, on in the large ones)."""
    feature_norm: Literal["group", "layer"] = "group"
    """group: GroupNorm with one group per channel over time after the first convolution only;
    layer: LayerNorm over the channels after every convolution (transformers' feat_extract_norm)."""
    activation: Literal["gelu", "gelu_tanh", "relu", "silu"] = "gelu"
    """After each convolution and the position convolution (transformers' feat_extract_activation)."""
    projection_norm: bool = True
    """LayerNorm of the features before their projection to d_model (HuBERT's feat_proj_layer_norm)."""
    position_kernel: Kernel = 128
    """Frames the position convolution reads (num_conv_pos_embeddings)."""
    position_groups: Width = 16
    """Groups of the position convolution (num_conv_pos_embedding_groups): d_model / groups channels each."""
    mask_embedding: bool = False
    """The learned vector SpecAugment puts in place of masked frames (transformers' masked_spec_embed,
    created when mask_time_prob or mask_feature_prob > 0): held, counted and exported with the
    weights; no inference graph reads it (SpecAugment masks in training only)."""

    @property
    def features(self) -> int:
        """Channels of the feature encoder's output (the projection's input)."""
        return self.conv_dim[-1]

    def frames(self, samples: int) -> int:
        """Frames the feature encoder gives ``samples`` samples: floor((L - k) / stride) + 1 per layer."""
        for k, stride in zip(self.conv_kernel, self.conv_stride):
            samples = (samples - k) // stride + 1
        return samples

    def samples(self, frames: int) -> int:
        """The fewest samples that give ``frames`` frames (``frames`` may be a sympy symbol)."""
        for k, stride in zip(reversed(self.conv_kernel), reversed(self.conv_stride)):
            frames = (frames - 1) * stride + k
        return frames

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when the rest of ``spec`` cannot read a waveform."""
        if spec.family != "encoder-only":
            return "family", ("a waveform feeds an encoder alone (wav2vec 2.0, HuBERT): set family encoder-only "
                              f"(got {spec.family})")
        others = (spec.image, spec.frames, spec.patches, spec.spectrogram)
        if any(part is not None for part in others) or spec.segments:
            return "waveform", "a waveform replaces token inputs: remove image, frames, patches, spectrogram, segments"
        if not len(self.conv_dim) == len(self.conv_kernel) == len(self.conv_stride):
            return "waveform.conv_kernel", (f"conv_dim, conv_kernel and conv_stride describe one convolution each: "
                                            f"give as many of each (got {len(self.conv_dim)}, {len(self.conv_kernel)}, "
                                            f"{len(self.conv_stride)})")
        if not spec.positional.in_attention and spec.positional.kind != "none":
            return "positional", ("a waveform's positions are its position convolution's, and any inside attention "
                                  "(WavLM's gated_relative_bias): set positional: {kind: none} "
                                  f"(got {spec.positional.kind})")
        if spec.d_model % self.position_groups:
            return "waveform.position_groups", (f"d_model ({spec.d_model}) must be divisible by position_groups "
                                                f"({self.position_groups}): each group convolves d_model / groups "
                                                "channels")
        if spec.embed_norm and spec.norm != "post":
            return "embed_norm", ("a waveform's embedding norm is the post-norm encoder's (wav2vec 2.0 base); a "
                                  "pre-norm encoder normalises after its last layer instead: set embed_norm: false")
        return None

    def lower(self, b: LayerBuilder) -> str:
        """input_values -> feature encoder (B, S, conv_dim[-1]) -> [LayerNorm] -> linear to d_model ->
        + GELU(position convolution) -> [LayerNorm: post-norm encoders] -> dropout: (B, S, d_model)."""
        d, stack = b.spec.d_model, b.stack
        samples = b.op("input_values", "input", [], attrs={"dtype": "float32", "dims": ["batch", "samples"]},
                       shape=("B", "samples"))
        b.graph.ports["input_values"] = samples
        x = b.op(f"{stack}.feature_encoder", "feature_encoder", [samples], component="embedding",
                 attrs={"channels": list(self.conv_dim), "kernels": list(self.conv_kernel),
                        "strides": list(self.conv_stride), "norm": self.feature_norm, "eps": FEATURE_EPS,
                        "activation": self.activation},
                 params=self._encoder_params(), shape=("B", b.seq, self.features))
        if self.projection_norm:
            x = b.norm(f"{stack}.feature_norm", x, self.features)
        x = b.op(f"{stack}.feature_projection", "frame_projection", [x], attrs={"features": self.features},
                 params={"weight": ((d, self.features), "xavier_uniform"), "bias": ((d,), "zeros")},
                 component="embedding")
        k, groups = self.position_kernel, self.position_groups
        params = {"g": ((1, 1, k), "ones"), "v": ((d, d // groups, k), "xavier_uniform"), "bias": ((d,), "zeros")}
        if self.mask_embedding:
            params["mask_embedding"] = ((d,), "uniform:1.0")
        x = b.op(f"{stack}.pos", "conv_positions", [x], component="positional",
                 attrs={"kernel_size": k, "groups": groups, "activation": self.activation}, params=params)
        if b.spec.embed_norm:
            x = b.norm(f"{stack}.embed_norm", x)
        return b.op(f"{stack}.embed_dropout", "dropout", [x], attrs={"p": b.spec.dropout})

    def _encoder_params(self) -> dict:
        """w_i (c_i, c_{i-1}, k_i) and b_i per convolution; the norms' gain and shift (norm_w_i, norm_b_i):
        the first convolution's alone for ``group``, every one's for ``layer``."""
        params, before = {}, 1
        for i, (c, k) in enumerate(zip(self.conv_dim, self.conv_kernel)):
            params[f"w_{i}"] = ((c, before, k), "xavier_uniform")
            if self.conv_bias:
                params[f"b_{i}"] = ((c,), "zeros")
            if self.feature_norm == "layer" or i == 0:
                params |= {f"norm_w_{i}": ((c,), "ones"), f"norm_b_{i}": ((c,), "zeros")}
            before = c
        return params
