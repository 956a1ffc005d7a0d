"""The ONNX lowering of the IR ``mamba2`` op (``tfspec.layers.mamba2``), as the PyTorch backend's
``backends/torch/mamba2.py`` computes it: the scan over a call's L positions in its matrix form
(Einsum over (L, L) decays masked by Trilu), plus the carried state's share, in one chunk: a
prompt of L positions holds heads x L^2 decays (the PyTorch backend goes 128 positions at a
time; an ONNX Loop over chunks would bound this too). A step graph
takes and returns the convolution's last k - 1 inputs (``past.<node>.window``) and the state
(``past.<node>.state``, (batch, heads, head_dim, state)); heads are kept as (groups, heads per
group), so B and C broadcast over each group's heads without copies."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper

from tfspec.ir import Node

from . import lowering
from .ffn import activation
from .norms import normalize


@lowering("mamba2")
def mamba2(e, node: Node, x: str) -> str:
    b, a, p = e.b, node.attrs, node.params
    H, P, N, G, k = a["heads"], a["head_dim"], a["state"], a["groups"], a["kernel"]
    R, width, d = H // G, H * P + 2 * G * N, b.weights[p["w_in"]].shape[1]
    x, pad = b.sequence(x, d), e.padding(node.shape[1])
    if pad is not None:  # padding reaches no real position
        x = b.op("Where", b.op("Unsqueeze", pad, b.ints(-1)), b.const(0.0), x)
    z, xbc, dt = b.split(b.linear(x, p["w_in"], p.get("b_in")), H * P, width, H)
    xbc, h0 = _convolved(e, node, xbc, width, k, pad)
    xs, Bm, Cm = b.split(xbc, H * P, G * N, G * N)
    dt = b.op("Max", b.op("Softplus", b.op("Add", _f32(b, dt), b.const(b.weights[p["dt_bias"]], np.float32))),
              b.const(np.float32(a["dt_min"]), np.float32))  # (B, L, H)
    grouped = (lambda t, *dims: b.op("Reshape", t, b.batched(-1, *dims)))
    decay = b.const(-np.exp(b.weights[p["A_log"]].astype(np.float32)), np.float32)  # a = -exp(A_log) per head
    rates = grouped(b.op("Mul", dt, decay), G, R)
    x5, dt4, B4, C4 = grouped(xs, G, R, P), grouped(dt, G, R), grouped(Bm, G, N), grouped(Cm, G, N)  # (B, L, G, ...)
    y, h = _scan(b, x5, dt4, rates, B4, C4, b.op("Reshape", h0, b.batched(G, R, P, N)) if h0 else None)
    y = b.op("Add", y, b.op("Mul", x5, b.const(b.weights[p["D"]].reshape(G, R, 1), np.float32)))
    if e.carries(node):
        e.present(node, "state", b.op("Reshape", _typed(b, h), b.batched(H, P, N)), ["batch", H, P, N])
    gated = b.op("Mul", b.op("Reshape", y, b.ints(0, 0, H * P)), activation(b, _f32(b, z), "silu"))
    normed = b.op("Reshape", normalize(b, b.op("Reshape", gated, b.ints(0, 0, G, H * P // G)), "rms", a["norm_eps"],
                                       None, size=H * P // G), b.ints(0, 0, H * P))
    normed = b.op("Mul", _typed(b, normed), b.param(p["norm"]))
    return b.linear(normed, p["w_out"], p.get("b_out"))


def _convolved(e, node: Node, xbc: str, width: int, k: int, pad: str | None) -> tuple[str, str | None]:
    """x, B and C through the causal depthwise convolution and SiLU, in float32, and the carried
    state (None outside step graphs); a step graph prepends the last k - 1 inputs it carried."""
    b, p = e.b, node.params
    pads = [k - 1, 0]
    h0 = None
    if e.carries(node):
        window = e.state(node, "window", ["batch", k - 1, width])
        xbc = b.op("Concat", window, xbc, axis=1)
        e.present(node, "window", b.op("Slice", xbc, b.ints(-(k - 1)), b.ints(np.iinfo(np.int64).max), b.ints(1)),
                  ["batch", k - 1, width])
        h0 = e.state(node, "state", ["batch", node.attrs["heads"], node.attrs["head_dim"], node.attrs["state"]])
        pads = [0, 0]
    conv = b.op("Conv", b.op("Transpose", xbc, perm=[0, 2, 1]), b.param(p["w_conv"]),
                p.get("b_conv") and b.param(p["b_conv"]), group=width, pads=pads)
    conv = activation(b, _f32(b, b.op("Transpose", conv, perm=[0, 2, 1])), "silu")
    if pad is not None:
        conv = b.op("Where", b.op("Unsqueeze", pad, b.ints(-1)), b.const(np.float32(0), np.float32), conv)
    return conv, h0 and _f32(b, h0)


def _scan(b, x, dt, rates, B, C, h0: str | None) -> tuple[str, str]:
    """x (b, L, G, R, p), dt and rates (b, L, G, R: dt times the decay rate), B and C (b, L, G, N),
    h0 (b, G, R, p, N) or None -> y (b, L, G, R, p) and the final state (b, G, R, p, N)."""
    spans = _segment_sums(b, b.op("Transpose", rates, perm=[0, 2, 3, 1]))  # (b, G, R, t, s)
    weights = b.op("Mul", b.op("Exp", spans),
                   b.op("Unsqueeze", b.op("Einsum", C, B, equation="btgn,bsgn->bgts"), b.ints(2)))
    y = b.op("Einsum", weights, b.op("Mul", x, b.op("Unsqueeze", dt, b.ints(-1))), equation="bgrts,bsgrp->btgrp")
    last = b.op("Exp", b.op("Gather", spans, b.const(np.int64(-1)), axis=3))  # (b, G, R, s): decay after s to the end
    h = b.op("Einsum", last, dt, x, B, equation="bgrs,bsgr,bsgrp,bsgn->bgrpn")
    if h0 is not None:
        decay = b.op("Exp", b.op("CumSum", rates, b.const(np.int64(1))))  # (b, L, G, R): from the start to t
        y = b.op("Add", y, b.op("Mul", b.op("Einsum", C, h0, equation="btgn,bgrpn->btgrp"),
                                b.op("Unsqueeze", decay, b.ints(-1))))
        total = b.op("Exp", b.op("ReduceSum", rates, b.ints(1), keepdims=0))  # (b, G, R)
        h = b.op("Add", h, b.op("Mul", h0, b.op("Unsqueeze", total, b.ints(-1, -2))))
    return y, h


def _segment_sums(b, rates: str) -> str:
    """(..., L) -> (..., t, s): the sum of rates s + 1 .. t, -inf where s > t, as cumulative sums of
    masked copies (the PyTorch backend's ``segment_sums``)."""
    length = b.op("Shape", rates, start=-1)
    ones = b.op("ConstantOfShape", b.op("Concat", length, length, axis=0), value=_ones())  # (L, L)
    below = b.op("Cast", b.op("Trilu", ones, b.const(np.int64(-1)), upper=0), to=TensorProto.BOOL)
    causal = b.op("Cast", b.op("Trilu", ones, upper=0), to=TensorProto.BOOL)
    copies = b.op("Mul", b.op("Unsqueeze", rates, b.ints(-1)), ones)  # [.., i, j] = rate i
    sums = b.op("CumSum", b.op("Where", below, copies, b.const(np.float32(0), np.float32)), b.const(np.int64(-2)))
    return b.op("Where", causal, sums, b.const(np.float32(-np.inf), np.float32))


def _ones():
    return numpy_helper.from_array(np.ones(1, np.float32))


def _f32(b, x: str) -> str:
    return x if b.elem_type == TensorProto.FLOAT else b.op("Cast", x, to=TensorProto.FLOAT)


def _typed(b, x: str) -> str:
    return x if b.elem_type == TensorProto.FLOAT else b.op("Cast", x, to=b.elem_type)
