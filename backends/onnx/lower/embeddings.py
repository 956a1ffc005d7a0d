"""ONNX lowerings of the embedding ops (``tfspec/ir/ops/embeddings.py``): token and segment tables,
positional encodings."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node
from tfspec.ir.positions import sinusoids

from . import lowering


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
