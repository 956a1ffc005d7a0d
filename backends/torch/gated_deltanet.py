"""The PyTorch lowering of the IR ``gated_deltanet`` op (``tfspec.layers.gated_deltanet``). A call
runs the gated delta rule over its positions CHUNK at a time in the chunked form of Yang et al.
(2024, "Parallelizing Linear Transformers with the Delta Rule over Sequence Length", the WY/UT
representation): within a chunk the corrections delta solve one unit lower-triangular system,
(I + A) delta = beta v - beta gamma k S_0, with A_ts = beta_t (k_t . k_s) gamma_t / gamma_s for s < t
(gamma: the decays' running product), and outputs and the final state follow by matrix products:
exact, O(L x CHUNK) work like banded attention. Decoding carries each row's state (heads, d_k,
d_v) and its convolution's last k - 1 inputs, so a step of one position costs O(1) in the length;
the ONNX twin is ``backends/onnx/lower/gated_deltanet.py``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import OpModule, lowering


CHUNK = 64
"""Positions solved at once (transformers' chunk_size): memory O(L x CHUNK), not O(L^2)."""
L2_EPS = 1e-6
"""The epsilon of the queries' and keys' L2 norms (the FLA kernels' and transformers' value)."""


def l2norm(x):
    """x / sqrt(|x|^2 + eps) over the last axis (FLA's and transformers' form: not F.normalize's max(|x|, eps))."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + L2_EPS)


def chunk(q, k, v, g, beta, S):
    """One chunk: q, k (b, H, C, d_k) (normalised, q scaled), v (b, H, C, d_v), g and beta
    (b, H, C), S the state before it (b, H, d_k, d_v) -> outputs (b, H, C, d_v) and the state after."""
    C = g.shape[-1]
    c = g.cumsum(-1)  # log gamma_t: the decay from the chunk's start through t
    causal = torch.ones(C, C, dtype=torch.bool, device=g.device).tril()
    decay = (c[..., :, None] - c[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # gamma_t / gamma_s, s <= t
    kb = k * beta[..., None]
    system = (kb @ k.transpose(-1, -2)) * decay  # its strictly lower part is A (the diagonal is taken as 1)
    u = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(system, kb * c.exp()[..., None], upper=False, unitriangular=True)
    delta = u - w @ S  # (b, H, C, d_v): each position's correction, beta (v - its decayed prediction)
    o = (q * c.exp()[..., None]) @ S + ((q @ k.transpose(-1, -2)) * decay) @ delta
    last = c[..., -1:]
    S = S * last.exp()[..., None] + (k * (last - c).exp()[..., None]).transpose(-1, -2) @ delta
    return o, S


def delta_rule(q, k, v, g, beta, S):
    """``chunk`` CHUNK positions at a time over (b, H, L, ...) inputs, each starting from the state the last left."""
    outs = []
    for start in range(0, g.shape[-1], CHUNK):
        part = slice(start, start + CHUNK)
        o, S = chunk(q[:, :, part], k[:, :, part], v[:, :, part], g[:, :, part], beta[:, :, part], S)
        outs.append(o)
    return torch.cat(outs, 2), S


@lowering("gated_deltanet")
class GatedDeltaNet(OpModule):
    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.H, self.G, self.dk, self.dv, self.k = a["heads"], a["key_heads"], a["d_k"], a["d_v"], a["kernel"]
        self.eps, self.seq = a["norm_eps"], node.shape[1]

    def forward(self, ctx, x):
        b, L, _ = x.shape
        H, G, dk, dv, r = self.H, self.G, self.dk, self.dv, self.H // self.G
        pad = ctx.padding.get(self.seq)
        if pad is not None:  # padding reaches no real position (transformers zeroes it too)
            x = x.masked_fill(pad[..., None], 0.0)
        q, k, v, z = F.linear(x, self.w_qkvz).view(b, L, G, -1).split([dk, dk, r * dv, r * dv], -1)
        beta, a = F.linear(x, self.w_ba).view(b, L, G, 2 * r).split([r, r], -1)
        mixed = torch.cat([q.reshape(b, L, -1), k.reshape(b, L, -1), v.reshape(b, L, -1)], -1)
        carried = ctx.state is not None and self.seq == "T"
        window, S0 = self._past(ctx, x, mixed.shape[-1]) if carried else (
            mixed.new_zeros(b, self.k - 1, mixed.shape[-1]), x.new_zeros(b, H, dk, dv))
        mixed = torch.cat([window, mixed], 1)
        conv = F.silu(F.conv1d(mixed.transpose(1, 2), self.w_conv, groups=mixed.shape[-1])).transpose(1, 2)
        if pad is not None:
            conv = conv.masked_fill(pad[..., None], 0.0)
        wide = torch.promote_types(x.dtype, torch.float32)  # the recurrence in float32 at least
        q, k, v = conv.to(wide).split([G * dk, G * dk, H * dv], -1)
        q, k = (l2norm(t.view(b, L, G, dk)).repeat_interleave(r, 2) for t in (q, k))  # key head -> its value heads
        y, S = self._recur(q, k, v.view(b, L, H, dv), beta, a, S0.to(wide))
        if carried:
            ctx.state.cache[self.node_name] = (mixed[:, mixed.shape[1] - (self.k - 1):], S.to(x.dtype))
        return F.linear(self._gated_norm(y, z.reshape(b, L, H, dv)).to(x.dtype).reshape(b, L, H * dv), self.w_out)

    def _recur(self, q, k, v, beta, a, S0):
        """The gated delta rule over (b, L, H, ...) inputs: beta = sigmoid(b), g = -exp(A_log)
        softplus(a + dt_bias) -> outputs (b, L, H, d_v) and the final state."""
        b, L, H, _ = v.shape
        beta = torch.sigmoid(beta.reshape(b, L, H).to(v.dtype))
        g = -torch.exp(self.A_log.to(v.dtype)) * F.softplus(a.reshape(b, L, H).to(v.dtype) + self.dt_bias.to(v.dtype))
        heads_first = (lambda t: t.transpose(1, 2))  # noqa: E731
        y, S = delta_rule(heads_first(q) * self.dk ** -0.5, heads_first(k), heads_first(v), heads_first(g),
                          heads_first(beta), S0)
        return heads_first(y), S

    def _past(self, ctx, x, width: int):
        """The convolution's last k - 1 inputs and the state carried from the previous call (zeros at first)."""
        return ctx.state.cache.get(self.node_name, (x.new_zeros(x.shape[0], self.k - 1, width),
                                                    x.new_zeros(x.shape[0], self.H, self.dk, self.dv)))

    def _gated_norm(self, y, z):
        """Each head's output RMS-normalised over d_v, times the shared gain, then times silu(z)."""
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.norm.to(y.dtype) * y * F.silu(z.to(y.dtype))
