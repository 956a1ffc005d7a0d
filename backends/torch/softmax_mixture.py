"""The mixture of softmaxes' PyTorch lowering (``tfspec/spec/softmax_mixture.py``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering


@lowering("softmax_mixture")
class SoftmaxMixture(OpModule):
    """Yang et al. 2017, eq. 3: (B, L, d) -> log sum_k pi_k softmax(act(h W_k^T) w^T + b), (B, L, vocab),
    as logsumexp over k of log pi_k + log_softmax, in float32 (as x-transformers mixes them)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.k, self.scale, self.tanh = a["components"], a["scale"], a["activation"] == "tanh"

    def forward(self, ctx, x):
        h = F.linear(x, self.components).unflatten(-1, (self.k, -1))  # (B, L, K, d)
        h = torch.tanh(h) if self.tanh else h
        logits = F.linear(h * self.scale if self.scale != 1.0 else h, self.weight, getattr(self, "bias", None))
        log_prior = F.log_softmax(F.linear(x, self.prior).float(), -1)  # (B, L, K)
        joint = F.log_softmax(logits.float(), -1) + log_prior[..., None]  # (B, L, K, vocab)
        return torch.logsumexp(joint, -2)
