"""``export --int8``: every constant-weight matrix product with int8 weights, emitted directly.

The nodes and numbers are those onnxruntime's ``quantize_dynamic`` (``QInt8``, ``per_channel``,
``reduce_range``, MatMul and Gemm) wrote when it rewrote the float32 graphs, which held the
float32 graph and its quantised copy in memory at once (13.3 GiB for a 494M-parameter model, over
5 minutes): a Gemm x W^T + b becomes ``DynamicQuantizeLinear`` of x (uint8, one scale per tensor,
computed at run time, one node for every product reading x), ``MatMulInteger`` with W^T as int8
(K, N) and zero points 0, a ``Cast`` to float and a ``Mul`` by the two scales, then the bias's
``Add``; onnxruntime's CPU provider fuses the chain into ``DynamicQuantizeMatMul`` when a
session loads it. Here each weight is quantised when its product is emitted, in row chunks
(``int4.ROWS``), so an export holds one float32 tensor's temporaries beside the int8 weights.

Weights are symmetric per output channel in 7 of the 8 bits (``reduce_range``): scale
max|w| / 64, values round(w / scale) in [-64, 64]. On x86 CPUs without VNNI onnxruntime's
u8 x s8 kernels add pairs of products in 16 bits, and full-range weights overflow them (logits
off by 1.6 on a model whose logits reach 4, against 0.08 with the reduced range, equally fast).
Products whose weight is computed (a shortlist's gathered rows) stay float32 Gemms, as
``quantize_dynamic`` left them (it made them a Transpose and a float MatMul).

``export --int8`` streams (``streamed``): each weight is read from the checkpoint, quantised,
appended to the data file and freed, and the graphs are checked as int4's are
(``quant_parity``): against PyTorch holding the dequantised int8 weights, and against float32.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .int4 import ROWS, once

RANGE = 64
"""Largest |value| of a weight (``reduce_range``: 7 bits of int8)."""
SUFFIX = re.compile(r"(?P<transposed>\.T)?\.int8$")
"""A quantised matrix's initializer: ``W.T.int8`` holds W (PyTorch's (out, in)) transposed, ``W.int8``
W as stored (in, out); W is an IR parameter or one expert's slice of one, ``P.<expert>``."""


@dataclass(frozen=True)
class Int8:
    """How an export quantises to int8 (``Builder.quant``): every constant-weight product."""

    every_product = True
    """``Builder.gemm`` asks: not the projections only, but the pooler, task heads and routed
    experts too (``Builder.linear`` then goes through ``gemm``)."""
    label = "int8"
    same_weights = 0.2
    """Largest |diff| against PyTorch holding the dequantised int8 weights, relative to the largest
    |value| of the output compared (``quant_parity``): onnxruntime quantises each product's input
    to uint8 at run time, one scale per tensor, an error that grows with depth and with the rows
    that share a tensor (measured on random weights: 0.7-1.6% on tiny models, 4.6% for one layer
    of Qwen2.5-0.5B's shape, 7.6-8.3% for all 24 at batch 3, 4.2% at batch 1). A missing scale or a
    product wired to the wrong input errs by the outputs' own size, so it still fails."""
    float_rms = 0.25
    """Largest RMS difference of the logits from float32's, relative to their RMS: the 7-bit
    weights' and the uint8 activations' error together (measured on random weights: 1.6-3.8% on
    tiny models, 5.8% for one layer of Qwen2.5-0.5B's shape, 10.6-11.7% for all 24)."""

    def describe(self) -> str:
        return "int8 (7-bit range), per output channel"

    def record(self) -> dict:
        """What the manifest's ``int8`` entry says of the weights."""
        return {"weights": self.describe(), "ops": ["MatMul", "Gemm"]}

    def written_bytes(self, graph) -> int:
        """Bytes of the weights an export writes: token embeddings gathered in float32, the other
        matrices int8 (a tied table both), vectors float32; per-channel scales are negligible."""
        gathered = {n.params["weight"] for n in graph.nodes() if n.op == "embedding"}
        multiplied = {p for n in graph.nodes() if n.op != "embedding" for p in n.params.values()
                      if len(graph.params[p].shape) >= 2}
        total = 0
        for name, p in graph.params.items():
            n = math.prod(p.shape)
            total += (4 * n if name in gathered or name not in multiplied else 0) + (n if name in multiplied else 0)
        return total

    def matrix(self, name: str) -> str | None:
        """The matrix (``W`` or ``P.<expert>``) whose int8 values initializer ``name`` holds, else None."""
        found = SUFFIX.search(name)
        return name[:found.start()] if found else None

    def dequantize(self, name: str, read, shape: tuple[int, ...]) -> np.ndarray:
        """The float32 matrix (of ``shape``, its IR layout) that initializer ``name`` (``matrix``)
        multiplies by: q (K, N) times the (N,) scales, transposed back for ``W.T.int8``; ``read``
        reads an initializer."""
        w = read(name).astype(np.float32) * read(f"{name}.scales")
        return w.T if SUFFIX.search(name)["transposed"] else w

    def gemm(self, b, x: str, weight: str, make, bias: str | None, transposed: bool) -> str:
        """x (rows, K) times the constant weight ``make()`` (``weight`` names it) plus ``bias`` (a
        value name), as quantize_dynamic's chain of the module docstring."""
        part = once(lambda: quantize(make(), transposed))
        name = f"{weight}.T.int8" if transposed else f"{weight}.int8"  # a tied matrix may be read both ways
        q = b.stored(name, lambda: part()[0])
        scales = b.stored(f"{name}.scales", lambda: part()[1])
        zeros = b.stored(f"{name}.zero_points", lambda: np.zeros(part()[1].shape, np.int8))
        xq, xs, xz = b.op("DynamicQuantizeLinear", x, outputs=3)  # one per tensor read: ``tidy`` merges repeats
        y = b.op("Cast", b.op("MatMulInteger", xq, q, xz, zeros), to=b.elem_type)
        y = b.op("Mul", y, b.op("Mul", xs, scales))
        return b.op("Add", y, bias) if bias else y

    def gather(self, b, table: str, ids: str) -> str:
        return b.op("Gather", b.param(table), ids)  # embedding tables stay float32, as quantize_dynamic left them


def quantize(w: np.ndarray, transposed: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A float weight, (N, K) (PyTorch's (out, in)) when ``transposed``, else (K, N) -> (int8 (K, N),
    float32 scales (N,)), as ``quantize_dynamic`` computes them channel by channel: the scale
    2 max|w| / 128 in float64, 1 where it is below float32's smallest normal, stored as float32;
    values round(w / scale) in float32 (half to even). ROWS channels at a time, through one buffer."""
    n = w.shape[0] if transposed else w.shape[1]
    q, scales = np.empty((w.size // n, n), np.int8), np.empty(n, np.float32)
    values = np.empty((min(ROWS, n), w.size // n), np.float32)
    for i in range(0, n, ROWS):
        part = np.asarray(w[i:i + ROWS] if transposed else w[:, i:i + ROWS].T, dtype=np.float32)  # (rows, K)
        top = np.maximum(np.abs(np.minimum(part.min(1), 0)), np.maximum(part.max(1), 0))
        scale = top.astype(np.float64) * 2 / (2 * RANGE)
        scale = np.where(scale < np.finfo(np.float32).tiny, 1.0, scale).astype(np.float32)
        chunk = np.divide(part, scale[:, None], out=values[:len(part)])
        q[:, i:i + ROWS] = np.clip(np.round(chunk, out=chunk), -128, 127, out=chunk).T
        scales[i:i + ROWS] = scale
    return q, scales

