"""PyTorch lowering of the embed projection (``tfspec.spec.embed_projection``): narrower token
embeddings into d_model (ALBERT, ELECTRA, OPT-350m's project_in) and the last hidden states
back to their width (OPT-350m's project_out)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering


@lowering("embed_projection")
class EmbedProjection(OpModule):
    """x W^T + b; with ``transpose`` (out: tied) x W for the input projection's W, no bias."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.transpose = node.attrs.get("transpose", False)

    def forward(self, ctx, x: torch.Tensor) -> torch.Tensor:
        if self.transpose:
            return x @ self.weight
        return F.linear(x, self.weight, getattr(self, "bias", None))
