"""PyTorch lowerings of the IR ops other than attention (see ``attention.py``)."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from tfspec.errors import TfspecError
from tfspec.ir.positions import sinusoids
from .registry import OpModule, lowering

ACTIVATIONS = {"relu": F.relu, "relu2": lambda x: F.relu(x).square(), "gelu": F.gelu,
               "gelu_tanh": partial(F.gelu, approximate="tanh"), "silu": F.silu,
               "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x), "tanh": torch.tanh}
"""The spec's activations, and tanh, which task heads' dense layers apply (RoBERTa's classifier)."""


@lowering("embedding")
class Embedding(OpModule):
    """Token ids (B, L) -> vectors (B, L, d_model), scaled by sqrt(d_model) (§3.4)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.scale = node.attrs["scale"]

    def forward(self, ctx, tokens):
        x = F.embedding(tokens, self.weight)
        return x * self.scale if self.scale != 1.0 else x


@lowering("positional")
class Positional(OpModule):
    """Adds sinusoidal or learned position vectors to the embeddings."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.kind, self.max_len, self.seq, self.d_model = node.attrs["kind"], node.attrs["max_len"], *node.shape[1:]
        self.layout, self.offset, self.spacing = node.attrs["layout"], node.attrs["offset"], node.attrs["spacing"]
        self._table: torch.Tensor | None = None

    def forward(self, ctx, x):
        rows = ctx.positions.get(self.seq)  # (B, L) where rows start at different lengths
        start = ctx.start(self.seq)
        end = start + x.shape[1] if rows is None else int(rows.max()) + 1
        if end > self.max_len:
            raise TfspecError(f"input of length {end} is longer than positional.max_len ({self.max_len}) "
                              "of this spec; raise max_len or shorten the input")
        table = self.weight if self.kind == "learned" else self._sinusoids(x)
        return x + (table[start + self.offset:end + self.offset] if rows is None else table[rows + self.offset])

    def _sinusoids(self, x: torch.Tensor) -> torch.Tensor:
        table = self._table
        if table is None or table.device != x.device or table.dtype != x.dtype:
            table = sinusoids(self.max_len + self.offset, self.d_model, self.layout, self.spacing)
            table = self._table = torch.from_numpy(table).to(x.device, x.dtype)
        return table


@lowering("image_positional")
class ImagePositional(OpModule):
    """Adds the row, column and channel embeddings of each position of a raster-order image
    (Image Transformer §3.1): position p is channel p % C of pixel (p // C // W, p // C % W)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.height, self.width, self.depth, self.seq = a["height"], a["width"], a["channels"], node.shape[1]

    def forward(self, ctx, x):
        if self.seq in ctx.positions:
            raise TfspecError("image positions are raster positions: rows of one batch cannot start at different "
                              "lengths (pad on the right)")
        start = ctx.start(self.seq)
        end = start + x.shape[1]
        if end > self.height * self.width * self.depth:
            raise TfspecError(f"input of length {end} is longer than the image ({self.height} x {self.width} x "
                              f"{self.depth} = {self.height * self.width * self.depth} positions)")
        p = torch.arange(start, end, device=x.device)
        pixel = p // self.depth
        return x + self.rows[pixel // self.width] + self.columns[pixel % self.width] + self.channels[p % self.depth]


@lowering("segment_embedding")
class SegmentEmbedding(OpModule):
    """Adds the embedding of each position's segment id (BERT's token types)."""

    def forward(self, ctx, x, segments):
        return x + F.embedding(segments, self.weight)


@lowering("pooler")
class Pooler(OpModule):
    """tanh(x_1 W^T + b) of the first position: (B, L, d) -> (B, d) (BERT)."""

    def forward(self, ctx, x):
        return torch.tanh(F.linear(x[:, 0], self.w_pool, self.b_pool))


@lowering("timestep")
class Timestep(OpModule):
    """Universal Transformer: adds the sinusoid of the step (and of each position) before a step."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.step, self.positions, self.seq = node.attrs["step"], node.attrs["positions"], node.shape[1]
        self.layout, self.spacing, self.offset = node.attrs["layout"], node.attrs["spacing"], node.attrs["offset"]
        self._table: torch.Tensor | None = None

    def forward(self, ctx, x):
        L, d = x.shape[1:]
        if self.positions and self.seq in ctx.positions:
            raise TfspecError("a universal stack's position signal needs rows that start together (pad on the right)")
        start = ctx.start(self.seq)
        rows = max(self.step, start + L + self.offset) + 1
        table = self._table
        if table is None or len(table) < rows or table.device != x.device or table.dtype != x.dtype:
            rows = max(rows, 0 if table is None else 2 * len(table))  # grows by doubling while decoding
            table = torch.from_numpy(sinusoids(rows, d, self.layout, self.spacing))
            table = self._table = table.to(x.device, x.dtype)
        x = x + table[self.step]
        return x + table[start + self.offset:start + self.offset + L] if self.positions else x


@lowering("act")
class AdaptiveComputationTime(OpModule):
    """One step of adaptive computation time (Graves 2016), per position: the halting
    probability p = sigmoid(w · s + b) of the step's input s weighs the step's output y into the
    state, until the summed p would pass the threshold; that step gets the remainder 1 - sum p
    instead (so the weights sum to 1) and the position halts. The last step halts every position
    still running. Packed as (B, L, d + 3): state, summed halting probability, remainder, steps."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.threshold, self.penalty, self.last, self.seq = (node.attrs["threshold"], node.attrs["penalty"],
                                                             node.attrs["last"], node.shape[1])

    def forward(self, ctx, s, y, packed=None):
        d = y.shape[-1]
        p = torch.sigmoid(F.linear(s, self.w_halt, self.b_halt))[..., 0]  # (B, L)
        if packed is None:
            state, halting, remainders, updates = torch.zeros_like(y), *torch.zeros(3, *p.shape, dtype=p.dtype,
                                                                                    device=p.device)
        else:
            state, halting, remainders, updates = packed[..., :d], packed[..., d], packed[..., d + 1], packed[..., d + 2]
        running = (halting < 1.0).to(p.dtype)
        halted = running if self.last else ((halting + p * running) > self.threshold).to(p.dtype) * running
        running = running - halted
        halting = halting + p * running
        remainders = remainders + halted * (1 - halting)
        halting = halting + halted * remainders
        updates = updates + running + halted
        state = state + y * (p * running + halted * remainders)[..., None]
        if self.last and self.penalty:  # the ponder cost (steps + remainder) of non-padded positions
            pad = ctx.padding.get(self.seq)
            cost = updates + remainders
            ctx.aux_losses.append(self.penalty * (cost if pad is None else cost.masked_fill(pad, 0.0)).sum())
        return torch.cat([state, halting[..., None], remainders[..., None], updates[..., None]], -1)


@lowering("act_state")
def act_state(node, graph):
    d = node.shape[-1]
    return lambda ctx, packed: packed[..., :d]


@lowering("dropout")
def dropout(node, graph):
    p = node.attrs["p"]
    return lambda ctx, x: F.dropout(x, p, True) if ctx.training and p > 0 else x


@lowering("add")
def add(node, graph):
    """x + y, the sub-layer's output ``y`` times the spec's residual_scale (Granite)."""
    scale = node.attrs.get("scale", 1.0)
    return (lambda ctx, x, y: x + y) if scale == 1.0 else (lambda ctx, x, y: x + y * scale)


@lowering("layer_norm")
class LayerNorm(OpModule):
    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.shape, self.eps = node.shape[-1:], node.attrs["eps"]

    def forward(self, ctx, x):
        return F.layer_norm(x, self.shape, getattr(self, "weight", None), getattr(self, "bias", None), self.eps)


@lowering("rms_norm")
class RMSNorm(OpModule):
    """x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019), in float32 whatever the
    activations' type, as Llama computes it."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.shape, self.eps = node.shape[-1:], node.attrs["eps"]

    def forward(self, ctx, x):
        y = F.rms_norm(x.float(), self.shape, eps=self.eps).to(x.dtype)
        return y if getattr(self, "weight", None) is None else self.weight * y


@lowering("ffn")
class FeedForward(OpModule):
    """act(x W1 + b1) W2 + b2 (eq. 2), or gated: act(x W1 + b1) * (x W3 + b3), then W2 + b2."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.act, self.p, self.gated = ACTIVATIONS[node.attrs["activation"]], node.attrs["dropout"], node.attrs["gated"]
        self.norm_kind = node.attrs.get("inner_norm")  # {kind, eps}; its gain and bias: roles inner_norm(_bias)

    def forward(self, ctx, x):
        h = self.act(F.linear(x, self.w_1, getattr(self, "b_1", None)))
        if self.gated:
            h = h * F.linear(x, self.w_3, getattr(self, "b_3", None))
        if self.norm_kind is not None:  # NormFormer's norm over the d_ff features
            h = self.normed(h)
        if ctx.training and self.p > 0:
            h = F.dropout(h, self.p, True)
        return F.linear(h, self.w_2, getattr(self, "b_2", None))

    def normed(self, h):
        """``inner_norm``: LayerNorm, or RMSNorm in float32 (as the ``rms_norm`` op), over d_ff."""
        weight, bias = getattr(self, "inner_norm", None), getattr(self, "inner_norm_bias", None)
        eps = self.norm_kind["eps"]
        if self.norm_kind["kind"] == "layer":
            return F.layer_norm(h, h.shape[-1:], weight, bias, eps)
        y = F.rms_norm(h.float(), h.shape[-1:], eps=eps).to(h.dtype)
        return y if weight is None else weight * y


@lowering("dense")
class Dense(OpModule):
    """act(x W^T + b) (BERT's masked-LM head transform)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.act = ACTIVATIONS[node.attrs["activation"]]

    def forward(self, ctx, x):
        return self.act(F.linear(x, self.weight, getattr(self, "bias", None)))


@lowering("projection")
class Projection(OpModule):
    """The pre-softmax linear layer: (B, L, d_model) -> logits (B, L, vocab), its input first
    multiplied by the spec's output_scale (T5's d_model^-0.5), its logits capped at
    c * tanh(logits / c) with an output_softcap c (Gemma 2)."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        self.scale, self.softcap = node.attrs["scale"], node.attrs.get("softcap")

    def forward(self, ctx, x):
        logits = F.linear(x * self.scale if self.scale != 1.0 else x, self.weight, getattr(self, "bias", None))
        return logits if self.softcap is None else torch.tanh(logits / self.softcap) * self.softcap


@lowering("conv")
class Convolution(OpModule):
    """Conv1d over positions; padded positions are zeroed first so padding changes nothing."""

    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.seq, self.padding, self.dilation = node.shape[1], tuple(a["padding"]), a["dilation"]
        self.separable, self.act = a["separable"], ACTIVATIONS[a["activation"]]

    def forward(self, ctx, x):
        pad = ctx.padding.get(self.seq)
        if pad is not None:
            x = x.masked_fill(pad[..., None], 0.0)
        if ctx.state is not None and self.seq == "T":  # a causal kernel reads the last W inputs first
            window = self.padding[0]
            past = ctx.state.cache.get(self.node_name, (x.new_zeros(x.shape[0], window, x.shape[2]),))[0]
            x = torch.cat([past, x], 1)
            ctx.state.cache[self.node_name] = (x[:, x.shape[1] - window:],)
            h = x.transpose(1, 2)
        else:
            h = F.pad(x.transpose(1, 2), self.padding)  # (B, d, L + k - 1)
        if self.separable:
            h = F.conv1d(h, self.w_depthwise, getattr(self, "b_depthwise", None), dilation=self.dilation,
                         groups=h.shape[1])
            h = F.conv1d(h, self.w_pointwise, getattr(self, "b_pointwise", None))
        else:
            h = F.conv1d(h, self.w_conv, getattr(self, "b_conv", None), dilation=self.dilation)
        return self.act(h.transpose(1, 2))


class _Recurrent:
    """Runs a cuDNN-layout RNN; bidirectional layers pack padded batches so pads stay out."""

    seq: str

    def forward(self, ctx, x):
        pad = ctx.padding.get(self.seq)
        if ctx.state is not None and self.seq == "T":  # carry the hidden state (B, 1, H) across calls
            past = [t.transpose(0, 1).contiguous() for t in ctx.state.cache.get(self.node_name, ())]
            y, hx = super().forward(x, (tuple(past) if len(past) == 2 else past[0]) if past else None)
            ctx.state.cache[self.node_name] = tuple(t.transpose(0, 1) for t in (hx if isinstance(hx, tuple) else [hx]))
            return y
        if pad is None or not self.bidirectional:
            return super().forward(x)[0]  # right padding cannot reach earlier positions
        lengths = (~pad).sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        y, _ = pad_packed_sequence(super().forward(packed)[0], batch_first=True, total_length=x.shape[1])
        return y


class LSTM(_Recurrent, nn.LSTM):
    pass


class GRU(_Recurrent, nn.GRU):
    pass


class RNN(_Recurrent, nn.RNN):
    pass


@lowering("recurrent")
def recurrent(node, graph):
    a = node.attrs
    cls = {"lstm": LSTM, "gru": GRU, "rnn": RNN}[a["cell"]]
    module = cls(node.shape[-1], a["hidden"], batch_first=True, bidirectional=a["bidirectional"],
                 bias=graph.spec.bias)
    module.seq, module.node_name = node.shape[1], node.name
    return module
