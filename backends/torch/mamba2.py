"""The PyTorch lowering of the IR ``mamba2`` op (``tfspec.layers.mamba2``). A call runs the
scan over its positions in the state space duality's matrix form (Dao and Gu 2024, §6), chunk
by chunk: y_t = sum_{s<=t} exp(a_s+1 + .. + a_t) (C_t . B_s) dt_s x_s plus the chunk's starting
state's share exp(a_1 + .. + a_t) h_0 C_t, exact, O(L x CHUNK) like banded attention.
Decoding carries each row's state (heads, head_dim, state) and its convolution's last k - 1
inputs, so a step of one position costs O(1) in the length; the ONNX twin is
``backends/onnx/lower/mamba2.py``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering


CHUNK = 128
"""Positions a call scans at once (as transformers' chunk_size): memory O(L x CHUNK), not O(L^2)."""


def segment_sums(rates: torch.Tensor) -> torch.Tensor:
    """(b, H, L) log decays -> (b, H, t, s): the sum of those of positions s + 1 .. t, -inf where
    s > t; cumulative sums of masked copies rather than differences of cumulative sums, which
    lose the small ones to rounding over a long sequence (transformers' segment_sum)."""
    L = rates.shape[-1]
    below = torch.ones(L, L, dtype=torch.bool, device=rates.device).tril(-1)
    sums = rates[..., :, None].expand(*rates.shape, L).masked_fill(~below, 0).cumsum(-2)
    return sums.masked_fill(~below.logical_or(torch.eye(L, dtype=torch.bool, device=rates.device)), float("-inf"))


def scan(x, dt, a, B, C, h0):
    """x (b, L, H, p), dt (b, L, H), a (H,) the decay rates (negative), B and C (b, L, H, N),
    h0 (b, H, p, N) -> y (b, L, H, p) and the state after the last position (b, H, p, N)."""
    rates = (dt * a).transpose(1, 2)  # (b, H, L)
    spans = segment_sums(rates)  # (b, H, t, s)
    y = torch.einsum("bhts,bthn,bshn,bshp->bthp", spans.exp(), C, B, x * dt[..., None])
    y = y + torch.einsum("bthn,bhpn->bthp", C, h0) * rates.cumsum(-1).transpose(1, 2).exp()[..., None]
    last = spans[:, :, -1].exp()  # (b, H, s): the decay after position s to the last
    h = h0 * rates.sum(-1).exp()[..., None, None] + torch.einsum("bhs,bsh,bshp,bshn->bhpn", last, dt, x, B)
    return y, h


def chunked_scan(x, dt, a, B, C, h):
    """``scan`` CHUNK positions at a time, each chunk starting from the state the last one left."""
    ys = []
    for start in range(0, x.shape[1], CHUNK):
        part = slice(start, start + CHUNK)
        y, h = scan(x[:, part], dt[:, part], a, B[:, part], C[:, part], h)
        ys.append(y)
    return torch.cat(ys, 1), h


@lowering("mamba2")
class Mamba2(OpModule):
    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.H, self.p, self.N, self.G, self.k = a["heads"], a["head_dim"], a["state"], a["groups"], a["kernel"]
        self.dt_min, self.eps, self.seq = a["dt_min"], a["norm_eps"], node.shape[1]

    def forward(self, ctx, x):
        b, L, _ = x.shape
        H, p, N, G = self.H, self.p, self.N, self.G
        pad = ctx.padding.get(self.seq)
        if pad is not None:  # padding reaches no real position (transformers zeroes it too)
            x = x.masked_fill(pad[..., None], 0.0)
        z, xbc, dt = F.linear(x, self.w_in, getattr(self, "b_in", None)).split([H * p, H * p + 2 * G * N, H], -1)
        carried = ctx.state is not None and self.seq == "T"
        window, h0 = self._past(ctx, x, xbc.shape[-1]) if carried else (xbc.new_zeros(b, self.k - 1, xbc.shape[-1]),
                                                                          x.new_zeros(b, H, p, N))
        xbc = torch.cat([window, xbc], 1)
        conv = F.silu(F.conv1d(xbc.transpose(1, 2), self.w_conv, getattr(self, "b_conv", None), groups=xbc.shape[-1]))
        if pad is not None:
            conv = conv.masked_fill(pad[:, None, :], 0.0)
        wide = torch.promote_types(x.dtype, torch.float32)  # the scan in float32 at least
        xs, B_, C_ = conv.transpose(1, 2).to(wide).split([H * p, G * N, G * N], -1)
        dt = F.softplus(dt.to(wide) + self.dt_bias.to(wide)).clamp(min=self.dt_min)
        B_, C_ = (t.view(b, L, G, N).repeat_interleave(H // G, 2) for t in (B_, C_))
        y, h = chunked_scan(xs.view(b, L, H, p), dt, -torch.exp(self.A_log.to(wide)), B_, C_, h0.to(wide))
        if carried:
            ctx.state.cache[self.node_name] = (xbc[:, xbc.shape[1] - (self.k - 1):], h.to(x.dtype))
        y = (y + self.D.to(wide)[:, None] * xs.view(b, L, H, p)).reshape(b, L, H * p)
        return F.linear(self._gated_norm(y, z).to(x.dtype), self.w_out, getattr(self, "b_out", None))

    def _past(self, ctx, x, width: int):
        """The convolution's last k - 1 inputs and the state carried from the previous call (zeros at first)."""
        return ctx.state.cache.get(self.node_name, (x.new_zeros(x.shape[0], self.k - 1, width),
                                                    x.new_zeros(x.shape[0], self.H, self.p, self.N)))

    def _gated_norm(self, y, z):
        """y silu(z) RMS-normalised over each of ``groups`` groups of channels, times the learned gain."""
        h = y * F.silu(z.to(y.dtype))
        grouped = h.view(*h.shape[:-1], self.G, -1)
        grouped = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.norm * grouped.view_as(h)
