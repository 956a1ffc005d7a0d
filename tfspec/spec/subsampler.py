"""Speech2Text's convolutional subsampler as a spectrogram's front (``spectrogram.subsampler``):
Wang et al. 2020, "fairseq S2T: Fast Speech-to-Text Modeling with fairseq", §3 (after Synnaeve et
al. 2019's "two 1-D convolutional layers ... with gated linear units"), transformers'
``Conv1dSubsampler``.

What the encoder reads before its layers when a spectrogram has a subsampler, each an IR op:

- ``input_features`` (batch, frames, mels): Kaldi filterbank frames, time first (the layout
  ``Speech2TextFeatureExtractor`` returns; Whisper's are mels first), made by ``tfspec.data.fbank``;
- a stack of ``len(kernel_sizes)`` convolutions over time (``tfspec/ir/ops/subsampler.py``), each of
  stride 2 zero-padded by k // 2 and followed by a gated linear unit over its channels,
  GLU(a | b) = a * sigmoid(b) (Dauphin et al. 2017, eq. 1): the first reads the mels and gives
  ``channels`` (GLU: channels / 2), the middle ones channels / 2 -> channels, the last
  channels / 2 -> 2 d_model (GLU: d_model), so F frames become ceil(F / 2^n) positions (fairseq
  S2T: n = 2, 10 ms frames to 40 ms positions);
- times sqrt(d_model) where ``embed_scale`` is set (``scale_embedding``), plus the spec's own
  ``positional`` (the decoder's kind: fairseq's sinusoids from row pad + 1, ``positional.offset``)
  over ``spectrogram.positions`` rows; dropout; then the encoder's layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import MAX_KERNEL, MAX_WIDTH

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.audio import Spectrogram

STRIDE = 2
"""Each convolution's stride (Conv1dSubsampler's, fixed: it has no field for it)."""


class Subsampler(SpecModel):
    """Convolutions of stride 2 with GLU over the filterbank frames (fairseq S2T: kernels 5, 5 and
    1024 channels)."""

    kernel_sizes: list[Annotated[int, Field(ge=1, le=MAX_KERNEL)]] = Field(min_length=1, max_length=16)
    """Frames each convolution reads, first to last (``conv_kernel_sizes``; odd: zero-padded by k // 2)."""
    channels: Annotated[int, Field(ge=2, le=MAX_WIDTH)]
    """Output channels of every convolution but the last, halved by its GLU (``conv_channels``; even)."""

    @property
    def stride(self) -> int:
        """Frames per encoder position: 2 per convolution."""
        return STRIDE ** len(self.kernel_sizes)

    def widths(self, mels: int, d_model: int) -> list[tuple[int, int]]:
        """(input, output) channels of each convolution: the GLU after it halves the output."""
        outs = [self.channels] * (len(self.kernel_sizes) - 1) + [2 * d_model]
        return [(mels if i == 0 else self.channels // 2, out) for i, out in enumerate(outs)]

    def problem(self, spectrogram: Spectrogram) -> tuple[str, str] | None:
        """(field, message) when the subsampler cannot read ``spectrogram``'s features."""
        if even := [k for k in self.kernel_sizes if k % 2 == 0]:
            return "spectrogram.subsampler.kernel_sizes", (f"kernel_sizes {self.kernel_sizes} hold even {even}: each "
                                                           "convolution pads k // 2 frames each side, so k must be odd")
        if self.channels % 2:
            return "spectrogram.subsampler.channels", (f"channels ({self.channels}) must be even: the GLU after each "
                                                       "convolution halves them")
        for name, field in type(spectrogram).model_fields.items():
            if name in ("kernel_size", "stride") and getattr(spectrogram, name) != field.default:
                return f"spectrogram.{name}", (f"{name} ({getattr(spectrogram, name)}) is Whisper's stem's; with a "
                                               "subsampler the convolutions are its kernel_sizes, each of stride 2: "
                                               "remove it")
        return None

    def lower(self, b: LayerBuilder, spectrogram: Spectrogram) -> str:
        """input_features (B, F, mels) -> the subsampler (x sqrt(d) where embed_scale) -> + the
        spec's positions over ``spectrogram.positions`` rows -> dropout: (B, S, d_model)."""
        spec, stack, mels = b.spec, b.stack, spectrogram.mels
        attrs = {"dtype": "float32", "dims": ["batch", "frames", mels], "features": mels}
        features = b.op("input_features", "input", [], attrs=attrs, shape=("B", "F", mels))
        b.graph.ports["input_features"] = features
        params = {}
        for i, ((inputs, out), k) in enumerate(zip(self.widths(mels, spec.d_model), self.kernel_sizes), 1):
            params |= {f"w_{i}": ((out, inputs, k), "xavier_uniform"), f"b_{i}": ((out,), "zeros")}
        scale = spec.d_model ** 0.5 if spec.embed_scale else 1.0
        x = b.op(f"{stack}.subsampler", "conv_subsampler", [features], component="embedding", params=params,
                 attrs={"mels": mels, "kernel_sizes": list(self.kernel_sizes), "channels": self.channels,
                        "scale": scale}, shape=("B", b.seq, spec.d_model))
        positional = spec.positional.model_copy(update={"max_len": spectrogram.positions})
        x = b.op(f"{stack}.pos", "positional", [x], attrs=positional.model_dump(), component="positional",
                 params=positional.definition.embedding_params(positional, spec.d_model),
                 shape=("B", b.seq, spec.d_model))
        return b.op(f"{stack}.embed_dropout", "dropout", [x], attrs={"p": spec.dropout})
