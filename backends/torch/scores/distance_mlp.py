"""Dynamic position bias (``tfspec.positions.distance_mlp``, CrossFormer §3.3) in PyTorch: the
layer's MLP run once per call over the distinct distances i - j of its queries and keys, then
gathered into each head's (Lq, Lk) logit bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tfspec.positions.distance_mlp import NORM_EPS

from . import score_term


@score_term("distance_mlp")
class DistanceMlp:
    def __init__(self, node):
        p = node.attrs["positions"]
        self.name, self.depth, self.norm = node.params["dpb_w0"], p["mlp_depth"], p["mlp_norm"]
        self.activation = F.relu if p["mlp_activation"] == "relu" else F.silu
        self.log = p["log_distance"]

    def mlp(self, module, distance: torch.Tensor) -> torch.Tensor:
        """(D, 1) distances -> (D, h) biases: the hidden Linear (LayerNorm) activation layers, then
        the output Linear."""
        x = torch.sign(distance) * torch.log1p(distance.abs()) if self.log else distance
        for k in range(self.depth):
            x = F.linear(x, getattr(module, f"dpb_w{k}"), getattr(module, f"dpb_b{k}"))
            if self.norm:
                x = F.layer_norm(x, x.shape[-1:], getattr(module, f"dpb_g{k}"), getattr(module, f"dpb_s{k}"),
                                 NORM_EPS)
            x = self.activation(x)
        return F.linear(x, module.dpb_w_out, module.dpb_b_out)

    def __call__(self, ctx, module, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(1, h, Lq, Lk); the queries are the last lq of the lk key positions, so i - j runs
        over 1 - lq .. lk - 1 and entry (a, j) reads distance lk - lq + a - j."""
        lq, lk, device = q.shape[2], k.shape[2], q.device

        def build():
            distance = torch.arange(1 - lq, lk, device=device, dtype=module.dpb_w0.dtype)[:, None]  # (D, 1)
            bias = self.mlp(module, distance)  # (D, h)
            index = (lk - 1) + torch.arange(lq, device=device)[:, None] - torch.arange(lk, device=device)[None, :]
            return bias[index].permute(2, 0, 1)[None]  # (1, h, Lq, Lk)
        return ctx.cached(("distance_mlp", self.name, lq, lk), build)
