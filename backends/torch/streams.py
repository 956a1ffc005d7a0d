"""Hyper-connections' PyTorch lowerings (``tfspec/ir/ops/streams.py``; Zhu et al. 2024, §2): the
streams as (B, L, n d), stream k at features [k d, (k + 1) d); the connections packed per
position as [A_m (n), A_r (n x n, row k: what stream k gives each stream), B (n)]."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering


def split(h: torch.Tensor, n: int) -> torch.Tensor:
    return h.unflatten(-1, (n, h.shape[-1] // n))  # (B, L, n d) -> (B, L, n, d)


def unpack(w: torch.Tensor, n: int):
    """(B, L, n + n^2 + n) -> A_m (B, L, n), A_r (B, L, n, n), B (B, L, n)."""
    return w[..., :n], w[..., n:n + n * n].unflatten(-1, (n, n)), w[..., n + n * n:]


@lowering("streams_expand")
def streams_expand(node, graph):
    n = node.attrs["streams"]
    return lambda ctx, x: x.repeat(1, 1, n)  # (B, L, d) -> (B, L, n d)


@lowering("streams_merge")
def streams_merge(node, graph):
    n = node.attrs["streams"]
    return lambda ctx, h: split(h, n).sum(-2)  # (B, L, n d) -> (B, L, d)


@lowering("streams_weights")
class StreamsWeights(OpModule):
    """Static connections, plus (dynamic, §2.2) s_alpha tanh(norm(H) W_m), s_alpha tanh(norm(H) W_r)
    and s_beta tanh(norm(H) W_beta), norm the spec's norm kind over each stream's d features."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.n, self.dynamic, self.norm = node.attrs["streams"], node.attrs["dynamic"], node.attrs["norm"]

    def forward(self, ctx, h):
        n, static = self.n, torch.cat([self.a_m, self.a_r.flatten(), self.b])
        if not self.dynamic:
            return static.expand(*h.shape[:-1], static.shape[0])
        normed = self.normed(split(h, n))  # (B, L, n, d)
        t = torch.tanh(normed @ torch.cat([self.w_m[:, None], self.w_r, self.w_b[:, None]], 1))  # (B, L, n, n + 2)
        a_m, a_r, b = self.a_m + self.s_alpha * t[..., 0], self.a_r + self.s_alpha * t[..., 1:n + 1], \
            self.b + self.s_beta * t[..., n + 1]
        return torch.cat([a_m, a_r.flatten(-2), b], -1)

    def normed(self, h):
        weight, bias, eps = getattr(self, "norm_weight", None), getattr(self, "norm_bias", None), self.norm["eps"]
        if self.norm["kind"] == "layer":
            return F.layer_norm(h, h.shape[-1:], weight, bias, eps)
        y = F.rms_norm(h.float(), h.shape[-1:], eps=eps).to(h.dtype)
        return y if weight is None else weight * y


@lowering("streams_read")
def streams_read(node, graph):
    """h_0 = A_m^T H per position."""
    n = node.attrs["streams"]
    return lambda ctx, h, w: (unpack(w, n)[0][..., None, :] @ split(h, n)).squeeze(-2)  # (B, L, d)


@lowering("streams_write")
def streams_write(node, graph):
    """H' = A_r^T H + B^T (scale y) per position."""
    n, scale = node.attrs["streams"], node.attrs["scale"]

    def write(ctx, h, y, w):
        _, a_r, b = unpack(w, n)
        out = a_r.transpose(-1, -2) @ split(h, n) + b[..., None] * (y if scale == 1.0 else scale * y)[..., None, :]
        return out.flatten(-2)  # (B, L, n, d) -> (B, L, n d)
    return write
