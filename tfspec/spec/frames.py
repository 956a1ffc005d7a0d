"""Frame inputs: a sequence of feature vectors (speech frames, image columns) instead of token
ids, the input CTC models read (Graves et al. 2006, §5: 26 acoustic features per 10 ms frame).

Each frame's features are projected to d_model by a learned linear layer, the counterpart of
the token embedding (§3.4), and the spec's positional encoding is added as it is to tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import Width

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec


class Frames(SpecModel):
    """The encoder reads ``frames`` (batch, n, features) floats and their ``lengths`` (batch,):
    frames past a row's length are padding, masked like padded tokens."""

    features: Width
    """Features per frame (the height of an image read column by column)."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when the rest of ``spec`` cannot read frames."""
        if spec.family != "encoder-only":
            return "family", f"frames feed an encoder alone: set family encoder-only (got {spec.family})"
        if spec.image is not None or spec.segments:
            return "frames", "frames replace token inputs: remove image and segments"
        if spec.head is None:
            return "head", ("frames have no token embedding for the output projection to tie to: give an output "
                            "head, e.g. head: {kind: ctc, alphabet: '0123456789'}")
        return None

    def lower(self, b: LayerBuilder) -> str:
        """The ``frames`` input and its projection x W^T + b to d_model (no sqrt(d_model) scale:
        that balances a token table's small init against the positions, §3.4)."""
        features, d = self.features, b.spec.d_model
        frames = b.op("frames", "input", [], attrs={"dtype": "float32", "features": features},
                      shape=("B", b.seq, features))
        b.graph.ports["frames"] = frames
        return b.op(f"{b.stack}.frame_projection", "frame_projection", [frames], attrs={"features": features},
                    params={"weight": ((d, features), "xavier_uniform"), "bias": ((d,), "zeros")},
                    component="embedding")
