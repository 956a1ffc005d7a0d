"""ONNX lowerings of frame inputs (``tfspec.spec.frames``) and of the CTC head's log-softmax
(``tfspec.spec.heads``).

A frame model's graph reads ``frames`` (batch, src_len, features) and ``lengths`` (batch,)
int64 and writes ``logits`` and ``log_probs`` (batch, src_len, classes); a CTC decoder
(``tfspec.ctc``) turns the log-probabilities into labels.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tfspec.ir import Node

from . import lowering


def frames_input(e, node: Node) -> str:
    """Declare ``frames`` and ``lengths``; frames at or past a row's length are padding."""
    b = e.b
    frames = b.input(node.name, ["batch", "src_len", node.attrs["features"]])
    lengths = b.op("Unsqueeze", b.input("lengths", ["batch"], TensorProto.INT64), b.ints(1))  # (B, 1)
    e.lengths["S"] = b.shape_of(frames, 1)
    index = b.op("Range", b.const(np.int64(0)), e.lengths["S"], b.const(np.int64(1)))
    e.pads["S"] = b.op("GreaterOrEqual", b.op("Unsqueeze", index, b.ints(0)), lengths)  # (B, L)
    return frames


@lowering("frame_projection")
def frame_projection(e, node: Node, frames: str) -> str:
    return e.b.linear(frames, node.params["weight"], node.params["bias"])


@lowering("log_softmax")
def log_softmax(e, node: Node, logits: str) -> str:
    return e.b.op("LogSoftmax", logits, axis=-1)
