"""Query temperature by position (``tfspec/positions/temperature.py``: Llama 4's NoPE layers) in
ONNX graphs, as the PyTorch backend's stage: queries times 1 + s log(1 + floor((i + 1) / f))."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from . import PositionStage, position_stage


@position_stage("temperature")
class Temperature(PositionStage):
    def turn(self, e, q: str, k: str) -> tuple[str, str]:
        """(B, L, h*d) queries (or their flat view) scaled by their positions' temperature; keys unchanged."""
        a, b = self.node.attrs, e.b
        positions, width = a["positions"], a["heads"] * a["d_k"]
        at = e.positions(self.node.shape[1], q)  # (L,) or (B, L), int64
        steps = b.op("Div", b.op("Add", at, b.const(np.int64(1))), b.const(np.int64(positions["temperature_floor"])))
        one = b.const(np.float32(1), dtype=np.float32)
        log = b.op("Log", b.op("Add", b.op("Cast", steps, to=TensorProto.FLOAT), one))
        scale = b.const(np.float32(positions["temperature_scale"]), dtype=np.float32)
        factor = b.op("Add", b.op("Mul", log, scale), one)
        factor = b.op("Unsqueeze", b.op("Cast", factor, to=b.elem_type), b.ints(-1))  # (L, 1) or (B, L, 1)
        return b.op("Mul", b.op("Reshape", q, b.batched(-1, width)), factor), k
