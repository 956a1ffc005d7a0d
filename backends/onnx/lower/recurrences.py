"""ONNX lowerings of the layers that carry state along the sequence
(``tfspec/ir/ops/recurrences.py``): convolutions and the RNN baselines."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node

from . import lowering
from .ffn import activation


@lowering("conv")
def conv(e, node: Node, x: str) -> str:
    """Conv1d over positions. Padded positions are zeroed first; a step graph prepends the
    last W = (k - 1) * dilation inputs it carried (zeros at the start) instead of padding."""
    b, a, p = e.b, node.attrs, node.params
    pad = e.padding(node.shape[1])
    if pad is not None:
        x = b.op("Where", b.op("Unsqueeze", pad, b.ints(-1)), b.const(0.0), x)
    pads = a["padding"]
    if e.carries(node) and pads[0] > 0:
        window = pads[0]
        past = e.state(node, "window", ["batch", window, node.shape[-1]])
        x = b.op("Concat", past, x, axis=1)
        e.present(node, "window", b.op("Slice", x, b.ints(-window), b.ints(np.iinfo(np.int64).max), b.ints(1)),
                  ["batch", window, node.shape[-1]])
        pads = [0, 0]
    h = b.op("Transpose", x, perm=[0, 2, 1])  # (B, d, L)
    if a["separable"]:
        h = b.op("Conv", h, b.param(p["w_depthwise"]), p.get("b_depthwise") and b.param(p["b_depthwise"]),
                 dilations=[a["dilation"]], group=node.shape[-1], pads=pads)
        h = b.op("Conv", h, b.param(p["w_pointwise"]), p.get("b_pointwise") and b.param(p["b_pointwise"]))
    else:
        h = b.op("Conv", h, b.param(p["w_conv"]), p.get("b_conv") and b.param(p["b_conv"]),
                 dilations=[a["dilation"]], pads=pads)
    return activation(b, b.op("Transpose", h, perm=[0, 2, 1]), a["activation"])


# PyTorch stacks gate blocks as LSTM (i, f, g, o), GRU (r, z, n); ONNX wants (i, o, f, c), (z, r, h).


GATE_ORDER = {"lstm": [0, 3, 1, 2], "gru": [1, 0, 2], "rnn": [0]}


@lowering("recurrent")
def recurrent(e, node: Node, x: str) -> str:
    """ONNX LSTM/GRU/RNN with cuDNN weights reordered; bidirectional layers read each
    sequence's true length so the backward pass starts at its last token."""
    b, a, p = e.b, node.attrs, node.params
    cell, hidden = a["cell"], a["hidden"]
    directions = ["", "_reverse"] if a["bidirectional"] else [""]
    w = np.stack([_gates(e.b.weights[p[f"weight_ih_l0{s}"]], cell) for s in directions])
    r = np.stack([_gates(e.b.weights[p[f"weight_hh_l0{s}"]], cell) for s in directions])
    inputs = [b.op("Transpose", x, perm=[1, 0, 2]), b.const(w), b.const(r)]  # time-major
    if "bias_ih_l0" in p:
        inputs.append(b.const(np.stack([np.concatenate([_gates(e.b.weights[p[f"bias_{k}_l0{s}"]], cell)
                                                         for k in ("ih", "hh")]) for s in directions])))
    else:
        inputs.append(None)
    pad = e.padding(node.shape[1])
    lengths = None
    if pad is not None and a["bidirectional"]:
        kept = b.op("ReduceSum", b.op("Cast", b.op("Not", pad), to=6), b.ints(1), keepdims=0)  # int32
        lengths = b.op("Max", kept, b.const(np.int32(1)))
    inputs.append(lengths)
    states = ["h", "c"] if cell == "lstm" else ["h"]
    if e.carries(node):
        shape = ["batch", 1, hidden]
        inputs += [b.op("Transpose", e.state(node, s, shape), perm=[1, 0, 2]) for s in states]
    op = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}[cell]
    attrs = {"linear_before_reset": 1} if cell == "gru" else {}
    y, *finals = b.op(op, *inputs, outputs=1 + len(states), hidden_size=hidden,
                      direction="bidirectional" if a["bidirectional"] else "forward", **attrs)
    if e.carries(node):
        for s, final in zip(states, finals):
            e.present(node, s, b.op("Transpose", final, perm=[1, 0, 2]), ["batch", 1, hidden])
    y = b.op("Transpose", y, perm=[2, 0, 1, 3])  # (L, dirs, B, H) -> (B, L, dirs, H)
    return b.op("Reshape", y, b.ints(0, 0, len(directions) * hidden))


def _gates(weight: np.ndarray, cell: str) -> np.ndarray:
    blocks = np.split(weight, len(GATE_ORDER[cell]))
    return np.concatenate([blocks[i] for i in GATE_ORDER[cell]])
