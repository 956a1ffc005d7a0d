"""Token shift's ONNX lowering (``tfspec/ir/ops/token_shift.py``), as the PyTorch backend:
mu * x_t + (1 - mu) * x_{t-1}; a step graph reads each row's last input of the previous step
(``past.<node>.previous``) and passes on its own."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node

from . import lowering

END = np.iinfo(np.int64).max


@lowering("token_shift")
def token_shift(e, node: Node, x: str) -> str:
    b, d = e.b, node.shape[-1]
    pad = e.padding(node.shape[1])
    if pad is not None:  # padding reads as zeros, as the start of a row
        x = b.op("Where", b.op("Unsqueeze", pad, b.ints(-1)), b.const(0.0), x)
    if e.carries(node):
        joined = b.op("Concat", e.state(node, "previous", ["batch", 1, d]), x, axis=1)  # (B, 1 + L, d)
        e.present(node, "previous", b.op("Slice", joined, b.ints(-1), b.ints(END), b.ints(1)), ["batch", 1, d])
    else:
        joined = b.op("Pad", x, b.ints(0, 1, 0, 0, 0, 0))  # (B, 1 + L, d), zeros first
    previous = b.op("Slice", joined, b.ints(0), b.ints(-1), b.ints(1))  # (B, L, d)
    return b.op("Add", previous, b.op("Mul", b.param(node.params["mix"]), b.op("Sub", x, previous)))
