"""PyTorch lowerings of frame inputs (``tfspec.spec.frames``) and of the CTC head's
log-softmax (``tfspec.spec.heads``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering


@lowering("frame_projection")
class FrameProjection(OpModule):
    """Frames (B, n, features) -> (B, n, d_model): x W^T + b, the frames' embedding."""

    def forward(self, ctx, frames: torch.Tensor) -> torch.Tensor:
        return F.linear(frames, self.weight, self.bias)


@lowering("log_softmax")
def log_softmax(node, graph):
    """Log-probabilities over the last axis, in float32 (CTC's forward-backward sums them)."""
    return lambda ctx, logits: F.log_softmax(logits.float(), dim=-1)


def frame_padding(lengths: torch.Tensor, n: int) -> torch.Tensor | None:
    """bool (B, n), True at frames past each row's length; None when no row is padded."""
    pad = torch.arange(n, device=lengths.device)[None, :] >= lengths[:, None]
    return pad if bool(pad.any()) else None
