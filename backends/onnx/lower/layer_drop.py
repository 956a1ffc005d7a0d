"""LayerDrop's ONNX lowering (``tfspec/ir/ops/layer_drop.py``): inference runs every layer."""

from __future__ import annotations

from tfspec.ir import Node

from . import lowering


@lowering("layer_drop", rows=True)
def layer_drop(e, node: Node, x: str, y: str) -> str:
    return y
