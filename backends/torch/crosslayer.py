"""Value residual learning and residual attention in PyTorch: what a self-attention hands to
later layers of the same call (``tfspec.layers.crosslayer``; the ONNX twin is
``backends/onnx/lower/crosslayer.py``). The source's tensors travel in ``RunContext.published``
under its node name, since an IR node has one output; the IR orders the source first."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def values(module, ctx, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(B, L, g, d_v) values of the new positions, mixed with the stack's first self-attention's
    (ResFormer, eq. 3): v_1 + lam (v - v_1), lam (B, L, g, 1) = sigmoid(x W_mix + b_mix) from the
    attention's (B, L, d) input, or the layer's fixed lam. The first layer publishes its own."""
    link = module.layer._links or {}
    if link.get("publishes_values"):
        ctx.published[(module.node_name, "values")] = v
    if "values_from" not in link:
        return v
    first = ctx.published[(link["values_from"], "values")]
    if module.layer.value_residual == "learned":
        lam = torch.sigmoid(F.linear(x, module.w_mix, module.b_mix))[..., None]  # (B, L, g, 1)
    else:
        lam = module.layer.value_residual
    return first + lam * (v - first)


def add_scores(module, ctx, scores: torch.Tensor) -> torch.Tensor:
    """(B, h, Lq, Lk) scaled q·k plus the previous self-attention's logits for the same queries
    and keys (RealFormer, eq. 3), or the scores as they are."""
    source = (module.layer._links or {}).get("scores_from")
    return scores if source is None else scores + ctx.published[(source, "scores")]


def publish_scores(module, ctx, scores: torch.Tensor) -> None:
    """Keep the masked (B, h, Lq, Lk) logits for the next self-attention, where it reads them."""
    if (module.layer._links or {}).get("publishes_scores"):
        ctx.published[(module.node_name, "scores")] = scores
