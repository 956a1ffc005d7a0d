"""PyTorch lowerings of the task heads' ops (``tfspec.spec.heads``): mean pooling, the first
position, and the classifier's dense layer."""

from __future__ import annotations

import torch.nn.functional as F

from .registry import OpModule, lowering


@lowering("mean_pool")
def mean_pool(node, graph):
    """(B, S, d) -> (B, d): the mean over each sequence's non-padded positions."""
    def pool(ctx, x):
        pad = ctx.padding.get("S")
        if pad is None:
            return x.mean(1)
        keep = (~pad).unsqueeze(-1).to(x.dtype)  # (B, S, 1)
        return (x * keep).sum(1) / keep.sum(1).clamp(min=1)
    return pool


@lowering("first")
def first(node, graph):
    """(B, S, d) -> (B, d): the first position ([CLS], <s>), which RoBERTa's classification head reads."""
    return lambda ctx, x: x[:, 0]


@lowering("projector")
class Projector(OpModule):
    """x W^T + b: (B, d) -> (B, width), a pooled vector narrowed for the classifier (wav2vec 2.0's)."""

    def forward(self, ctx, x):
        return F.linear(x, self.weight, self.bias)


@lowering("classifier")
class Classifier(OpModule):
    """logits = x W^T + b: (B, d) -> (B, classes) or (B, S, d) -> (B, S, classes)."""

    def forward(self, ctx, x):
        return F.linear(x, self.weight, self.bias)
