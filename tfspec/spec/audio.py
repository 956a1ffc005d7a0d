"""A log-mel spectrogram as the encoder's input: ``input_features`` (batch, mels, frames) floats,
Whisper's audio encoder front (Radford et al. 2022, "Robust Speech Recognition via Large-Scale
Weak Supervision", §2.2 and Figure 1).

What the encoder reads before its layers, each an IR op of its own (``tfspec/ir/ops/audio.py``):

- a stem of two convolutions over time of ``kernel_size`` frames (3), the first from the mels to
  d_model at stride 1, the second d_model to d_model at ``stride`` (2: 100 frames a second become
  50 positions), each zero-padded by kernel_size // 2 and followed by GELU (exact, erf: Whisper's
  ``nn.functional.gelu`` whatever ``activation`` says);
- a table of ``positions`` rows (1500: 30 s) added to the stem's output, row i to position i.
  Whisper's are sinusoids, [sin | cos] of d_model / 2 timescales geometric from 1 to 10,000
  (``sinusoids``), stored in its checkpoints (``encoder.embed_positions``) and held here as a
  parameter that starts as them; the decoder's positions are the spec's ``positional`` (learned);
- dropout; then the encoder's pre-norm layers and final norm, as any encoder's.

The features themselves (STFT, mel filters, log) are data, made in numpy by ``tfspec.data.audio``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np
from pydantic import Field

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import MAX_KERNEL, Positions, Width
from tfspec.spec.subsampler import Subsampler

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec


def sinusoids(rows: int, width: int) -> np.ndarray:
    """float32 (rows, width): [sin(t w_j) | cos(t w_j)] for t = 0..rows-1 and w_j = 10000^(-j / (width/2 - 1)),
    j < width / 2 (Whisper's ``sinusoids``: its timescales run to exactly 10,000, Vaswani et al.'s
    §3.5 to 10,000^(1 - 2/width), and its sines and cosines are halves, not interleaved)."""
    half = width // 2
    rates = np.exp(-np.log(10000.0) / (half - 1) * np.arange(half))
    angles = np.arange(rows)[:, None] * rates[None, :]  # (rows, width / 2)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


class Spectrogram(SpecModel):
    """The encoder reads ``input_features`` (batch, mels, frames) floats: any number of frames up to
    ``stride x positions`` (Whisper: exactly 3000, 30 s padded with silence); no mask (every frame
    is read, the padding's silence too, as Whisper does)."""

    mels: Width
    """Mel bins per frame (Whisper: 80; large-v3: 128)."""
    positions: Positions
    """Rows of the encoder's position table: the most positions the stem gives (Whisper: 1500,
    ``max_source_positions``)."""
    kernel_size: Annotated[int, Field(ge=1, le=MAX_KERNEL)] = 3
    """Frames each convolution of the stem reads (odd: zero-padded by kernel_size // 2 each side)."""
    stride: Annotated[int, Field(ge=1, le=64)] = 2
    """Stride of the stem's second convolution (Whisper: 2)."""
    subsampler: Subsampler | None = None
    """Speech2Text's front in place of Whisper's stem and table (``tfspec.spec.subsampler``): features
    time first, convolutions of stride 2 with GLU, then the spec's own ``positional``."""

    @property
    def frames(self) -> int:
        """The most frames the position table covers (Whisper: 3000)."""
        return (self.stride if self.subsampler is None else self.subsampler.stride) * self.positions

    def shape(self, batch: int, frames: int) -> tuple[int, int, int]:
        """The shape of ``input_features`` for ``batch`` rows of ``frames`` frames: (batch, mels, frames)
        for Whisper's stem, (batch, frames, mels) for a subsampler's filterbank frames."""
        return (batch, self.mels, frames) if self.subsampler is None else (batch, frames, self.mels)

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when the rest of ``spec`` cannot read a spectrogram."""
        if spec.family != "encoder-decoder":
            return "family", ("a spectrogram feeds the encoder of an encoder-decoder (Whisper): set family "
                              f"encoder-decoder (got {spec.family})")
        if spec.image is not None or spec.frames is not None or spec.patches is not None or spec.segments:
            return "spectrogram", "a spectrogram replaces the source tokens: remove image, frames, patches, segments"
        if self.subsampler is not None and (problem := self.subsampler.problem(self)):
            return problem
        if self.kernel_size % 2 == 0:
            return "spectrogram.kernel_size", (f"kernel_size ({self.kernel_size}) must be odd: the stem pads "
                                               "kernel_size // 2 frames each side")
        if spec.d_model % 2 or spec.d_model < 4:
            return "d_model", (f"the encoder's sinusoids are d_model / 2 sines then as many cosines: d_model "
                               f"({spec.d_model}) must be even and at least 4")
        if spec.tie_embeddings in ("all", "inputs"):
            return "tie_embeddings", ("the encoder reads no tokens, so no source embedding to tie: use "
                                      f"'output' or 'none' (got {spec.tie_embeddings})")
        if not spec.positional.definition.embedded or spec.positional.definition.in_attention:
            return "positional", ("the decoder's positions must be added to its embeddings (the encoder's are the "
                                  f"spectrogram's table): use learned or sinusoidal (got {spec.positional.kind})")
        return None

    def lower(self, b: LayerBuilder) -> str:
        """input_features -> conv, GELU -> conv (stride), GELU -> + the position table -> dropout:
        the (B, S, d_model) sequence, S = ceil(frames / stride). A subsampler lowers its own front."""
        if self.subsampler is not None:
            return self.subsampler.lower(b, self)
        d, stack = b.spec.d_model, b.stack
        attrs = {"dtype": "float32", "dims": ["batch", self.mels, "frames"], "features": self.mels}
        features = b.op("input_features", "input", [], attrs=attrs, shape=("B", self.mels, "F"))
        b.graph.ports["input_features"] = features
        k = self.kernel_size
        x = b.op(f"{stack}.conv_stem", "conv_stem", [features], component="embedding",
                 attrs={"mels": self.mels, "kernel_size": k, "stride": self.stride},
                 params={"w_1": ((d, self.mels, k), "xavier_uniform"), "b_1": ((d,), "zeros"),
                         "w_2": ((d, d, k), "xavier_uniform"), "b_2": ((d,), "zeros")})
        x = b.op(f"{stack}.pos", "table_positions", [x], component="positional", attrs={"rows": self.positions},
                 params={"weight": ((self.positions, d), "sinusoids")})
        return b.op(f"{stack}.embed_dropout", "dropout", [x], attrs={"p": b.spec.dropout})
