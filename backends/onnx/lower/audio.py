"""ONNX lowerings of a spectrogram encoder's front (``tfspec/ir/ops/audio.py``), as the PyTorch
backend's (``backends/torch/audio.py``).

The encoder graph reads ``input_features`` (batch, mels, frames) floats, the name transformers
and optimum give Whisper's input; frames is dynamic (the table's first rows are sliced to the
stem's output length).
"""

from __future__ import annotations

from tfspec.ir import Node

from . import lowering
from .ffn import activation


@lowering("conv_stem")
def conv_stem(e, node: Node, features: str) -> str:
    """Conv (pad k // 2) -> GELU -> Conv (stride, pad k // 2) -> GELU -> (B, S, d)."""
    b, a, p = e.b, node.attrs, node.params
    k, pad = a["kernel_size"], a["kernel_size"] // 2
    x = b.op("Conv", features, b.param(p["w_1"]), b.param(p["b_1"]), kernel_shape=[k], pads=[pad, pad])
    x = activation(b, x, "gelu")  # (B, d, F)
    x = b.op("Conv", x, b.param(p["w_2"]), b.param(p["b_2"]), kernel_shape=[k], pads=[pad, pad], strides=[a["stride"]])
    return b.op("Transpose", activation(b, x, "gelu"), perm=[0, 2, 1])  # (B, S, d)


@lowering("table_positions")
def table_positions(e, node: Node, x: str) -> str:
    """x + the table's first S rows."""
    b = e.b
    length = b.op("Shape", x, start=1, end=2)  # (1,): S
    rows = b.op("Slice", b.param(node.params["weight"]), b.ints(0), length, b.ints(0))  # (S, d)
    return b.op("Add", x, rows)
