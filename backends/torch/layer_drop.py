"""LayerDrop's PyTorch lowering (``tfspec/ir/ops/layer_drop.py``)."""

from __future__ import annotations

import torch

from .registry import lowering


@lowering("layer_drop")
def layer_drop(node, graph):
    """In training, the layer's input ``x`` with probability p (one draw per call, the batch
    alike, from torch's generator), else its output ``y``, unscaled (Fan et al. 2019, §3)."""
    p = node.attrs["p"]
    return lambda ctx, x, y: x if ctx.training and p > 0 and torch.rand(()).item() < p else y
