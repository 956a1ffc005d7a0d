"""ONNX lowerings of the IR ops other than attention (``attention.py``), one per op.

A lowering is ``fn(e, node, *inputs) -> output name`` where ``e`` is the graph being emitted
(``graphs.Emit``): its builder ``e.b``, the graph kind (``full``, ``encoder`` or ``step``),
padding masks, positions and, in step graphs, the state each layer carries between steps.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from onnx import TensorProto

from tfspec.ir import Node
from tfspec.ir.positions import sinusoids
from tfspec.registry import registrar

LOWERINGS: dict[str, Callable] = {}


lowering = registrar(LOWERINGS, "ONNX lowerings for IR op")
"""Decorator registering the ONNX lowering of IR op ``op``."""


@lowering("embedding")
def embedding(e, node: Node, tokens: str) -> str:
    x = e.b.gather(node.params["weight"], tokens)
    scale = node.attrs["scale"]
    return e.b.op("Mul", x, e.b.const(scale)) if scale != 1.0 else x


@lowering("positional")
def positional(e, node: Node, x: str) -> str:
    """Adds the table rows of positions past..past+L (past > 0 only in step graphs; the
    table's rows start after its ``offset`` unused ones)."""
    b, a = e.b, node.attrs
    positions = e.positions(node.shape[1], x)
    if a["offset"]:
        positions = b.op("Add", positions, b.const(np.int64(a["offset"])))
    if a["kind"] == "learned":
        table = b.param(node.params["weight"])
    else:
        table = b.const(sinusoids(a["max_len"] + a["offset"], node.shape[-1], a["layout"], a["spacing"]))
    return b.op("Add", x, b.op("Gather", table, positions))


@lowering("image_positional")
def image_positional(e, node: Node, x: str) -> str:
    """Adds row, column and channel embeddings, as the PyTorch backend's ``ImagePositional``."""
    b, a, p = e.b, node.attrs, node.params
    positions = e.positions(node.shape[1], x)
    depth, width = b.const(np.int64(a["channels"])), b.const(np.int64(a["width"]))
    pixel = b.op("Div", positions, depth)  # positions are >= 0: Div floors
    for role, index in (("rows", b.op("Div", pixel, width)), ("columns", b.op("Mod", pixel, width)),
                        ("channels", b.op("Mod", positions, depth))):
        x = b.op("Add", x, b.op("Gather", b.param(p[role]), index))
    return x


@lowering("segment_embedding")
def segment_embedding(e, node: Node, x: str, segments: str) -> str:
    return e.b.op("Add", x, e.b.op("Gather", e.b.param(node.params["weight"]), segments))


@lowering("pooler")
def pooler(e, node: Node, x: str) -> str:
    """tanh(x_1 W^T + b) of the first position: (B, L, d) -> (B, d)."""
    b, p = e.b, node.params
    first = b.op("Gather", x, b.const(np.int64(0)), axis=1)
    return b.op("Tanh", b.gemm(first, p["w_pool"], b.param(p["b_pool"])))


@lowering("timestep")
def timestep(e, node: Node, x: str) -> str:
    """Universal Transformer: the step's sinusoid (and the positions') added before a step."""
    b, a = e.b, node.attrs
    d = node.shape[-1]
    x = b.op("Add", x, b.const(sinusoids(a["step"] + 1, d, a["layout"], a["spacing"])[a["step"]]))
    if a["positions"]:
        table = b.const(sinusoids(e.graph.spec.positional.max_len + a["offset"], d, a["layout"], a["spacing"]))
        positions = b.op("Add", e.positions(node.shape[1], x), b.const(np.int64(a["offset"])))
        x = b.op("Add", x, b.op("Gather", table, positions))
    return x


@lowering("act")
def act(e, node: Node, s: str, y: str, packed: str | None = None) -> str:
    """One step of adaptive computation time, as the PyTorch backend's ``AdaptiveComputationTime``."""
    b, a, p = e.b, node.attrs, node.params
    d = node.shape[-1] - 3
    one, zero = b.const(1.0), b.const(0.0)
    halt = b.op("Sigmoid", b.linear(s, p["w_halt"], p["b_halt"]))  # (B, L, 1)
    if packed is None:
        state, halting = b.op("Mul", y, zero), b.op("Mul", halt, zero)
        remainders = updates = halting
    else:
        state, halting, remainders, updates = b.op("Split", packed, b.ints(d, 1, 1, 1), axis=-1, outputs=4)

    def flag(condition):
        return b.op("Cast", condition, to=b.elem_type)

    running = flag(b.op("Less", halting, one))
    if a["last"]:  # every position still running halts at the last step
        halted = running
    else:
        reached = b.op("Add", halting, b.op("Mul", halt, running))
        halted = b.op("Mul", flag(b.op("Greater", reached, b.const(a["threshold"]))), running)
    running = b.op("Sub", running, halted)
    halting = b.op("Add", halting, b.op("Mul", halt, running))
    remainders = b.op("Add", remainders, b.op("Mul", halted, b.op("Sub", one, halting)))
    halting = b.op("Add", halting, b.op("Mul", halted, remainders))
    updates = b.op("Add", updates, b.op("Add", running, halted))
    weight = b.op("Add", b.op("Mul", halt, running), b.op("Mul", halted, remainders))
    state = b.op("Add", state, b.op("Mul", y, weight))
    return b.op("Concat", state, halting, remainders, updates, axis=-1)


@lowering("act_state")
def act_state(e, node: Node, packed: str) -> str:
    return e.b.op("Slice", packed, e.b.ints(0), e.b.ints(node.shape[-1]), e.b.ints(-1))


@lowering("dense")
def dense(e, node: Node, x: str) -> str:
    """act(x W^T + b) on each position, or on one vector per sequence (B, d) (a task head's transform)."""
    b, p = e.b, node.params
    if len(node.shape) == 2:
        y = b.gemm(x, p["weight"], b.param(p["bias"]) if "bias" in p else None)
    else:
        y = b.linear(x, p["weight"], p.get("bias"))
    return activation(b, y, node.attrs["activation"])


@lowering("dropout")
def dropout(e, node: Node, x: str) -> str:
    return x  # inference graphs


@lowering("add")
def add(e, node: Node, x: str, y: str) -> str:
    """x + y, the sub-layer's output ``y`` times the spec's residual_scale (Granite)."""
    scale = node.attrs.get("scale", 1.0)
    return e.b.op("Add", x, y if scale == 1.0 else e.b.op("Mul", y, e.b.const(scale)))


@lowering("layer_norm")
def layer_norm(e, node: Node, x: str) -> str:
    p = node.params
    return normalize(e.b, x, "layer", node.attrs["eps"], p.get("weight"), p.get("bias"), node.shape[-1])


@lowering("rms_norm")
def rms_norm(e, node: Node, x: str) -> str:
    return normalize(e.b, x, "rms", node.attrs["eps"], node.params.get("weight"), size=node.shape[-1])


def normalize(b, x: str, kind: str, eps: float, weight: str | None, bias: str | None = None,
              size: int | None = None) -> str:
    """LayerNorm, or RMSNorm: x / sqrt(mean(x^2) + eps) * weight in float32, as the PyTorch
    backend (the RMSNormalization op at opset 23, its formula before), over the last axis of
    ``size`` features; without a gain (``weight`` None) its scale is ones."""
    scale = b.param(weight) if weight is not None else b.const(np.ones(size))
    if kind == "layer":
        return b.op("LayerNormalization", x, scale, b.param(bias) if bias else None, axis=-1, epsilon=eps)
    if b.opset >= 23:
        return b.op("RMSNormalization", x, scale, axis=-1, epsilon=eps, stash_type=TensorProto.FLOAT)
    h = x if b.elem_type == TensorProto.FLOAT else b.op("Cast", x, to=TensorProto.FLOAT)
    mean_square = b.op("ReduceMean", b.op("Mul", h, h), b.ints(-1), keepdims=1)
    h = b.op("Div", h, b.op("Sqrt", b.op("Add", mean_square, b.const(eps, np.float32))))
    h = h if b.elem_type == TensorProto.FLOAT else b.op("Cast", h, to=b.elem_type)
    return h if weight is None else b.op("Mul", h, scale)


def activation(b, x: str, kind: str) -> str:
    """relu, relu2 (squared), gelu (erf), gelu_tanh, silu, quick_gelu (x sigmoid(1.702 x)); opset 20
    has Gelu, older opsets get its formula."""
    if kind == "tanh":  # task heads' dense layers (RoBERTa's classifier)
        return b.op("Tanh", x)
    if kind in ("relu", "relu2"):
        y = b.op("Relu", x)
        return y if kind == "relu" else b.op("Mul", y, y)
    if kind in ("silu", "quick_gelu"):
        return b.op("Mul", x, b.op("Sigmoid", x if kind == "silu" else b.op("Mul", x, b.const(1.702))))
    if b.opset >= 20:
        return b.op("Gelu", x, approximate="tanh" if kind == "gelu_tanh" else None)
    if kind == "gelu":  # x/2 (1 + erf(x / sqrt 2))
        inner = b.op("Erf", b.op("Mul", x, b.const(1 / math.sqrt(2))))
    else:  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = b.op("Mul", b.op("Mul", x, x), x)
        inner = b.op("Tanh", b.op("Mul", b.op("Add", x, b.op("Mul", cube, b.const(0.044715))),
                                  b.const(math.sqrt(2 / math.pi))))
    return b.op("Mul", b.op("Mul", x, b.const(0.5)), b.op("Add", inner, b.const(1.0)))


@lowering("ffn")
def ffn(e, node: Node, x: str) -> str:
    """act(x W1 + b1) W2 + b2 (eq. 2), or gated: act(x W1 + b1) * (x W3 + b3), then W2 + b2."""
    p = node.params
    h = activation(e.b, e.b.linear(x, p["w_1"], p.get("b_1")), node.attrs["activation"])
    if node.attrs["gated"]:
        h = e.b.op("Mul", h, e.b.linear(x, p["w_3"], p.get("b_3")))
    return e.b.linear(h, p["w_2"], p.get("b_2"))


@lowering("projection")
def projection(e, node: Node, x: str) -> str:
    """The pre-softmax linear layer, its input times the spec's output_scale (T5: d_model^-0.5):
    flat (B * L, vocab) logits; in step graphs (B, vocab), the last position's only, or the
    shortlist's candidates' only (B, n) in the shortlist step graph (``Emit.shortlisted``)."""
    b, d = e.b, e.b.shape(node.params["weight"])[1]
    if e.kind == "step":  # only the next token's distribution is wanted: (B, d) rows
        last = b.op("Slice", b.sequence(x, d), b.ints(-1), b.ints(np.iinfo(np.int64).max), b.ints(1))
        x = b.op("Reshape", last, b.ints(-1, d))
        b.flat.add(x)
    if node.attrs["scale"] != 1.0:
        x = b.op("Mul", x, b.const(node.attrs["scale"]))
    weight, bias = node.params["weight"], node.params.get("bias")
    logits = b.linear(x, weight, bias, table=True) if e.shortlist is None else e.shortlisted(x, weight, bias)
    if (cap := node.attrs.get("softcap")) is None:
        return logits
    return b.op("Mul", b.op("Tanh", b.op("Div", logits, b.const(float(cap)))), b.const(float(cap)))  # Gemma 2


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
