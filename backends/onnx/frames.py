"""ONNX lowerings of frame inputs (``tfspec.spec.frames``) and of the CTC head's log-softmax
(``tfspec.spec.heads``), and the parity check of models that read frames.

A frame model's graph reads ``frames`` (batch, src_len, features) and ``lengths`` (batch,)
int64 and writes ``logits`` and ``log_probs`` (batch, src_len, classes); a CTC decoder
(``tfspec.ctc``) turns the log-probabilities into labels.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tfspec.checks import Check
from tfspec.ir import Node

from .lowerings import lowering


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


def check_frame_parity(ort_model, model, tolerance: float, seed: int = 0) -> list[Check]:
    """Frame log-probabilities of onnxruntime against PyTorch at batch 3 (one row padded from
    frame 5) and batch 1, compared at real frames (padding rows differ, as for tokens)."""
    import torch  # here: loading a frames export must not import torch

    rng = np.random.default_rng(seed)
    features = model.graph.spec.frames.features
    checks = []
    for batch, length, lengths in ((3, 11, [11, 5, 9]), (1, 7, [7])):
        frames = rng.standard_normal((batch, length, features)).astype(np.float32)
        lengths = np.array(lengths, dtype=np.int64)
        with torch.no_grad():
            ref = model.eval().run({"frames": torch.from_numpy(frames), "lengths": torch.from_numpy(lengths)},
                                   ("log_probs",))["log_probs"].numpy()
        ours = ort_model.run("model", ["log_probs"], {"frames": frames, "lengths": lengths})[0]
        keep = np.arange(length)[None, :] < lengths[:, None]
        diff = float(np.abs(ours.astype(np.float32) - ref)[keep].max())
        checks.append(Check(f"frame log-probabilities, batch {batch}", diff, tolerance))
    return checks
