"""PyTorch lowerings of the position-wise layers: the feed-forward network (plain or gated)
and the dense layer of BERT's masked-LM head."""

from __future__ import annotations

from functools import partial

import torch.nn.functional as F

from .registry import OpModule, lowering

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": partial(F.gelu, approximate="tanh"), "silu": F.silu}


@lowering("ffn")
class FeedForward(OpModule):
    """act(x W1 + b1) W2 + b2 (eq. 2), or act(x W1 + b1) * (x W3 + b3) W2 + b2 when gated."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.act, self.p = ACTIVATIONS[node.attrs["activation"]], node.attrs["dropout"]
        self.gated = node.attrs.get("gated", False)

    def forward(self, ctx, x):
        h = self.act(F.linear(x, self.w_1, getattr(self, "b_1", None)))
        if self.gated:
            h = h * F.linear(x, self.w_3, getattr(self, "b_3", None))
        if ctx.training and self.p > 0:
            h = F.dropout(h, self.p, True)
        return F.linear(h, self.w_2, getattr(self, "b_2", None))


@lowering("dense")
class Dense(OpModule):
    """act(x W^T + b) (BERT's masked-LM head transform)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.act = ACTIVATIONS[node.attrs["activation"]]

    def forward(self, ctx, x):
        return self.act(F.linear(x, self.weight, self.bias))
