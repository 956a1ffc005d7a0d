"""ONNX lowerings of the image encoder ops (``tfspec/ir/ops/patches.py``), as the PyTorch backend's
(``backends/torch/patches.py``).

An image model's graph reads ``pixel_values`` (batch, channels, height, width) floats, the name
transformers and optimum give it; height and width are dynamic: the position table's patch rows
are resized to each image's grid with ``Resize`` (cubic, a = -0.75, half-pixel centres: PyTorch's
``interpolate(mode="bicubic", align_corners=False)``), which returns them unchanged when the grid
is the table's own.
"""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node

from . import lowering

GRID = ("published", "patch_embedding", "grid")
"""``Emit.cached`` key of the int64 (2,) patch grid (H // p, W // p): BEiT's 2-D bias reads it."""


def pixels_input(e, node: Node) -> str:
    """Declare ``pixel_values`` (batch, channels, height, width)."""
    batch = "images" if e.graph.spec.dual is not None else "batch"  # a dual encoder's images are not its texts
    return e.b.input(node.name, [batch, node.attrs["channels"], "height", "width"])


@lowering("patch_embedding")
def patch_embedding(e, node: Node, pixels: str) -> str:
    """Conv of kernel and stride p -> (B, d, H/p, W/p) -> (B, N, d) in raster order."""
    b, p, d = e.b, node.attrs["patch_size"], node.shape[-1]
    bias = [b.param(node.params["bias"])] if "bias" in node.params else []  # CLIP's has none
    grid = b.op("Conv", pixels, b.param(node.params["weight"]), *bias, kernel_shape=[p, p], strides=[p, p])
    e.cached(GRID, lambda: b.op("Slice", b.op("Shape", grid), b.ints(2), b.ints(4), b.ints(0)))  # (H/p, W/p)
    return b.op("Transpose", b.op("Reshape", grid, b.ints(0, d, -1)), perm=[0, 2, 1])  # (B, N, d)


@lowering("learned_tokens")
def learned_tokens(e, node: Node, x: str) -> str:
    """The (count, d) ``tokens`` put in every row at index ``at``."""
    b, at, d = e.b, node.attrs["at"], node.shape[-1]
    tokens = b.op("Expand", b.op("Unsqueeze", b.param(node.params["tokens"]), b.ints(0)),
                  b.batched(node.attrs["count"], d))  # (B, count, d)
    if at == 0:
        return b.op("Concat", tokens, x, axis=1)
    before = b.op("Slice", x, b.ints(0), b.ints(at), b.ints(1))
    after = b.op("Slice", x, b.ints(at), b.ints(np.iinfo(np.int64).max), b.ints(1))
    return b.op("Concat", before, tokens, after, axis=1)


@lowering("patch_positions")
def patch_positions(e, node: Node, x: str, pixels: str) -> str:
    """x + the table: its ``prefix`` rows, then its grid x grid rows resized to (H // p, W // p)."""
    b, a, d = e.b, node.attrs, node.shape[-1]
    table, prefix, grid = b.param(node.params["weight"]), a["prefix"], a["grid"]
    end = b.ints(np.iinfo(np.int64).max)
    patches = b.op("Slice", table, b.ints(prefix), end, b.ints(0))
    patches = b.op("Transpose", b.op("Reshape", patches, b.ints(1, grid, grid, d)), perm=[0, 3, 1, 2])  # (1, d, g, g)
    size = b.op("Div", b.op("Slice", b.op("Shape", pixels), b.ints(2), b.ints(4), b.ints(0)),
                b.ints(a["patch_size"]))  # (H // p, W // p): sizes are >= 0, Div floors
    sizes = b.op("Concat", b.ints(1, d), size, axis=0)
    resized = b.op("Resize", patches, None, None, sizes, mode="cubic", cubic_coeff_a=-0.75,
                   coordinate_transformation_mode="half_pixel", exclude_outside=0)  # (1, d, h, w)
    rows = b.op("Reshape", b.op("Transpose", resized, perm=[0, 2, 3, 1]), b.ints(-1, d))  # (h w, d)
    if prefix:
        rows = b.op("Concat", b.op("Slice", table, b.ints(0), b.ints(prefix), b.ints(0)), rows, axis=0)
    return b.op("Add", x, rows)


@lowering("channel_gain", rows=True)
def channel_gain(e, node: Node, x: str) -> str:
    return e.b.op("Mul", x, e.b.param(node.params["gain"]))


@lowering("token_pool")
def token_pool(e, node: Node, x: str) -> str:
    """(B, S, d) -> (B, k d): the class token, the distillation token, the patches' mean, side by side."""
    b, prefix = e.b, node.attrs["prefix"]
    end = b.ints(np.iinfo(np.int64).max)
    parts = {"class": lambda: b.op("Gather", x, b.const(np.int64(0)), axis=1),
             "distillation": lambda: b.op("Gather", x, b.const(np.int64(1)), axis=1),
             "patch_mean": lambda: b.op("ReduceMean", b.op("Slice", x, b.ints(prefix), end, b.ints(1)), b.ints(1),
                                        keepdims=0)}
    pooled = [parts[r]() for r in node.attrs["reads"]]
    return pooled[0] if len(pooled) == 1 else b.op("Concat", *pooled, axis=-1)


@lowering("average")
def average(e, node: Node, *xs: str) -> str:
    return e.b.op("Div", e.b.op("Sum", *xs), e.b.const(float(len(xs))))
