"""ONNX lowerings of a waveform encoder's front (``tfspec/ir/ops/waveform.py``), as the PyTorch
backend's (``backends/torch/waveform.py``).

The graph reads ``input_values`` (batch, samples) floats and ``attention_mask`` (batch, samples)
int64, 1 at real samples (all ones for an unpadded batch), the names transformers gives them; the
feature encoder's lowering derives each row's frames from the mask's sum and sets the sequence's
padding (``e.pads["S"]``) that the position convolution and attention read.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tfspec.ir import Node

from ..builder import Index
from . import lowering
from .ffn import activation


@lowering("feature_encoder")
def feature_encoder(e, node: Node, samples: str) -> str:
    """Unsqueeze -> per layer Conv (stride) -> [InstanceNorm (GroupNorm, one group per channel) |
    LayerNorm over the channels] -> act -> (B, S, c_last); the frames' padding from the mask."""
    b, a, p = e.b, node.attrs, node.params
    x = b.op("Unsqueeze", samples, b.ints(1))  # (B, 1, samples)
    for i, (k, stride) in enumerate(zip(a["kernels"], a["strides"])):
        bias = [b.param(p[f"b_{i}"])] if f"b_{i}" in p else []
        x = b.op("Conv", x, b.param(p[f"w_{i}"]), *bias, kernel_shape=[k], strides=[stride])  # (B, c_i, L_i)
        if a["norm"] == "group" and i == 0:
            x = b.op("InstanceNormalization", x, b.param(p["norm_w_0"]), b.param(p["norm_b_0"]), epsilon=a["eps"])
        elif a["norm"] == "layer":
            x = b.op("Transpose", b.op("LayerNormalization", b.op("Transpose", x, perm=[0, 2, 1]),
                                       b.param(p[f"norm_w_{i}"]), b.param(p[f"norm_b_{i}"]), axis=-1,
                                       epsilon=a["eps"]), perm=[0, 2, 1])
        x = activation(b, x, a["activation"])
    x = b.op("Transpose", x, perm=[0, 2, 1])  # (B, S, c_last)
    _frame_padding(e, node, x)
    return x


def _frame_padding(e, node: Node, features: str) -> None:
    """``attention_mask`` (B, samples) -> lengths (B,) -> floor((L - k) / stride) + 1 per layer ->
    padding (B, S), True at frames at or past each row's length."""
    b = e.b
    mask = b.input("attention_mask", ["batch", "samples"], TensorProto.INT64)
    lengths = Index(b, b.op("ReduceSum", mask, b.ints(1), keepdims=0))  # (B,)
    for k, stride in zip(node.attrs["kernels"], node.attrs["strides"]):
        lengths = (lengths - k) // stride + 1
    e.lengths["S"] = b.shape_of(features, 1)
    index = b.op("Range", b.const(np.int64(0)), e.lengths["S"], b.const(np.int64(1)))
    e.pads["S"] = b.op("GreaterOrEqual", b.op("Unsqueeze", index, b.ints(0)),
                       b.op("Unsqueeze", lengths.name, b.ints(1)))  # (B, S)


@lowering("conv_positions")
def conv_positions(e, node: Node, x: str) -> str:
    """x (padded frames zeroed) + act(grouped Conv(x) trimmed to S), the weight g v / ||v||."""
    b, a, p = e.b, node.attrs, node.params
    if "S" in e.pads:
        x = b.op("Where", b.op("Unsqueeze", e.pads["S"], b.ints(2)), b.const(0.0), x)
    v, k = b.param(p["v"]), a["kernel_size"]
    norm = b.op("Sqrt", b.op("ReduceSum", b.op("Mul", v, v), b.ints(0, 1), keepdims=1))  # (1, 1, K)
    weight = b.op("Mul", v, b.op("Div", b.param(p["g"]), norm))  # (d, d / groups, K)
    y = b.op("Conv", b.op("Transpose", x, perm=[0, 2, 1]), weight, b.param(p["bias"]), kernel_shape=[k],
             pads=[k // 2, k // 2], group=a["groups"])  # (B, d, S + 1 - K % 2)
    y = b.op("Slice", y, b.ints(0), b.op("Shape", x, start=1, end=2), b.ints(2))  # (B, d, S)
    return b.op("Add", x, b.op("Transpose", activation(b, y, a["activation"]), perm=[0, 2, 1]))
