"""``export --int4``: weight-only block quantisation into onnxruntime's ``MatMulNBits``.

Every projection (attention, feed-forward) becomes ``com.microsoft.MatMulNBits`` with 4-bit
weights: each output row of the PyTorch (N, K) weight is cut along K into blocks of 32, 64 or
128 values, each block keeps one scale (and, asymmetric, one 4-bit zero point), as
onnxruntime's own ``MatMulNBitsQuantizer`` writes them: B (N, blocks, block/2) uint8 with the
even element of each pair in the low nibble, scales (N, blocks), zero points (N, ceil(blocks/2))
packed the same way; symmetric blocks use zero point 8 and the scale that maps the block's
largest magnitude to -8 (the full [-8, 7] range). The token embedding table and the output
projection ("tables") take int8 (per row, the default) or int4: a Gather of the quantised
rows, unpacked with standard operators, and ``MatMulNBits`` with 8 or 4 bits.

Weights are quantised one tensor at a time (``quantize``, in row chunks), so a bf16 checkpoint
never needs float32 in full. With ``Int4.channel_scales`` (``awq``), a projection's weight
columns are first multiplied by per-input-channel scales and its input divided by them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

ROWS = 2048
"""Rows quantised at once: bounds the float32 temporaries to a few times ROWS x K values."""
ACCURACY_LEVEL = 4
"""MatMulNBits' accuracy_level 4: activations quantised to int8 per block for the products
(onnxruntime's fastest CPU kernels); its error is far below the weights' 4-bit error."""
FLOAT_RMS = {32: 0.35, 64: 0.4, 128: 0.45}
"""Largest RMS difference of the logits from float32's, relative to their RMS, per block size:
the 4-bit error of random weights (trained models' perplexity tells more: BENCHMARKS.md)."""
QUANTISED = re.compile(r"\.q(?P<bits>[48])b\d+(?P<zero>z?)(?P<aware>a?)$")
"""A quantised weight's data initializer (``blocks``): ``W.q<bits>b<block>``, ``z`` with zero
points, ``a`` with activation-aware scales."""


@dataclass(frozen=True)
class Int4:
    """How an export quantises: ``block`` values per scale, ``symmetric`` or with zero points,
    the tables (embedding and output projection) in ``tables`` bits (8 or 4)."""

    block: int = 32
    symmetric: bool = True
    tables: int = 8
    channel_scales: dict[str, np.ndarray] = field(default_factory=dict, hash=False)
    """Projection weight name -> its (K,) activation-aware scales (``awq``); empty: round to nearest."""

    every_product = False
    """``Builder.gemm`` asks: the projections only (``linear``); other products stay float."""
    label = "int4"
    same_weights = 8e-2
    """Largest |diff| against PyTorch holding the dequantised weights, relative to the largest
    |logit| (``quant_parity``): onnxruntime's accuracy_level 4 quantises activations to int8 per
    block inside MatMulNBits, an error that grows with a trained model's activation outliers
    (measured: 1.4% on tiny random models, 1.8% on Llama-2-7B's first layer, 6.1% at one step of
    a 3M-parameter Llama trained here). A wrong packing or scale errs by the logits' own size, so
    it still fails; the quantisation's cost is the check against float32 and, on text,
    tools/bench/quant_quality.py."""

    @property
    def float_rms(self) -> float:
        return FLOAT_RMS[self.block]

    def describe(self) -> str:
        how = "activation-aware scales" if self.channel_scales else "round to nearest"
        return (f"int4 MatMulNBits, block {self.block}, {'symmetric' if self.symmetric else 'zero points'}, "
                f"{how}; embeddings and output projection int{self.tables}")

    def record(self) -> dict:
        """What the manifest's ``int4`` entry says of the weights."""
        return {"weights": self.describe(), "block_size": self.block, "symmetric": self.symmetric,
                "tables_bits": self.tables}

    def written_bytes(self, graph) -> int:
        """Bytes of the weights an export writes: int4 projections and int8/int4 tables with one
        float32 scale per block, vectors float32."""
        special, total = tables(graph), 0
        for name, p in graph.params.items():
            n = math.prod(p.shape)
            bits = self.tables if name in special else 4 if len(p.shape) == 2 else 32
            total += n * bits // 8 + (4 * n // self.block if bits < 32 else 0)
        return total

    def matrix(self, name: str) -> str | None:
        """The weight whose blocks initializer ``name`` holds, else None."""
        found = QUANTISED.search(name)
        return name[:found.start()] if found else None

    def dequantize(self, name: str, read, shape: tuple[int, ...]) -> np.ndarray:
        """The (N, K) float32 weight of ``shape`` that MatMulNBits multiplies by for initializer
        ``name`` (``matrix``), the activation-aware column scales divided out; ``read`` reads an
        initializer."""
        found = QUANTISED.search(name)
        w = dequantize(read(name), read(f"{name}.scales"), read(f"{name}.zero_points") if found["zero"] else None,
                       int(found["bits"]), shape[1])
        return w / read(f"{name[:found.start()]}.awq") if found["aware"] else w

    def linear(self, b, x: str, weight: str, bias: str | None, table: bool = False) -> str:
        return matmul_nbits(b, x, weight, bias, table)

    def gather(self, b, table: str, ids: str) -> str:
        return gather(b, table, ids)


def quantize(w: np.ndarray, bits: int, block: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(N, K) float weights -> (packed (N, blocks, block*bits/8) uint8, scales (N, blocks)
    float32, packed zero points or None), row chunk by row chunk."""
    parts = [_quantize_rows(np.asarray(w[i:i + ROWS], dtype=np.float32), bits, block, symmetric)
             for i in range(0, w.shape[0], ROWS)]
    packed, scales = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return packed, scales, None if symmetric else np.concatenate([p[2] for p in parts])


def _quantize_rows(w: np.ndarray, bits: int, block: int, symmetric: bool):
    n, k = w.shape
    blocks = -(-k // block)
    w = np.pad(w, ((0, 0), (0, blocks * block - k))).reshape(n, blocks, block)
    top = (1 << bits) - 1
    if symmetric:  # the largest magnitude, with its sign, maps to -2^(bits-1)
        ends = np.take_along_axis(w, np.abs(w).argmax(-1)[..., None], -1)[..., 0]
        scales = ends / -(1 << (bits - 1))
        zero = np.full(scales.shape, 1 << (bits - 1), np.float32)
    else:
        low, high = np.minimum(w.min(-1), 0), np.maximum(w.max(-1), 0)
        scales = (high - low) / top
        zero = np.clip(np.round(-low / np.where(scales == 0, 1, scales)), 0, top)
    scales = scales.astype(np.float32)
    safe = np.where(scales == 0, 1, scales)[..., None]
    q = np.clip(np.round(w / safe) + zero[..., None], 0, top).astype(np.uint8)
    if bits == 4:
        q = q[..., 0::2] | (q[..., 1::2] << 4)
    points = None
    if not symmetric:
        z = zero.astype(np.uint8)
        if bits == 4:
            z = np.pad(z, ((0, 0), (0, blocks % 2)), constant_values=1 << (bits - 1))  # as onnxruntime pads
            z = z[:, 0::2] | (z[:, 1::2] << 4)
        points = z
    return q, scales, points


def matmul_nbits(b, x: str, weight: str, bias: str | None, table: bool = False) -> str:
    """x (rows, K) times the (N, K) ``weight`` transposed, quantised, plus ``bias``: one
    MatMulNBits node. A ``table`` (the output projection) takes the tables' bits, symmetric,
    sharing its constants with a tied embedding's Gather."""
    q = b.quant
    n, k = b.shape(weight)
    bits, symmetric = (q.tables, True) if table else (4, q.symmetric)
    scales = None if table else q.channel_scales.get(weight)
    if scales is not None:  # x W^T = (x / s) (W s)^T
        x = b.op("Div", x, b.stored(f"{weight}.awq", lambda: scales.astype(b.np_dtype)))
        b.flat.add(x)
    inputs = [x, *blocks(b, weight, bits, symmetric, scales)]
    y = b.op("MatMulNBits", *inputs, domain="com.microsoft", K=k, N=n, bits=bits, block_size=q.block,
             accuracy_level=ACCURACY_LEVEL)
    return b.op("Add", y, b.param(bias)) if bias else y


def blocks(b, weight: str, bits: int, symmetric: bool, scales: np.ndarray | None = None) -> list[str]:
    """The initializers of ``weight`` quantised in blocks: data, scales and (not ``symmetric``)
    zero points, computed together on first use and written once per export."""
    part = once(lambda: quantize(b.weights[weight] if scales is None else b.weights[weight] * scales, bits,
                                 b.quant.block, symmetric))
    name = f"{weight}.q{bits}b{b.quant.block}{'' if symmetric else 'z'}{'' if scales is None else 'a'}"
    names = [b.stored(name, lambda: part()[0]), b.stored(name + ".scales", lambda: part()[1].astype(b.np_dtype))]
    return names + ([] if symmetric else [b.stored(name + ".zero_points", lambda: part()[2])])


def gather(b, table: str, ids: str) -> str:
    """Rows ``ids`` of the embedding ``table`` quantised in symmetric blocks of the tables' bits
    (the output projection's very constants when tied): gathered, unpacked (low nibble first),
    centred and scaled with standard operators."""
    q = b.quant
    v, d = b.shape(table)
    data, scales = blocks(b, table, q.tables, True)
    packed = b.op("Gather", data, ids)  # (..., blocks, block * bits / 8)
    if q.tables == 4:
        pairs = [b.op("Unsqueeze", n, b.ints(-1)) for n in (b.op("BitwiseAnd", packed, b.const(np.uint8(15))),
                                                            b.op("BitShift", packed, b.const(np.uint8(4)),
                                                                 direction="RIGHT"))]
        packed = b.op("Reshape", b.op("Concat", *pairs, axis=-1), b.ints(0, 0, -(-d // q.block), q.block))
    values = b.op("Sub", b.op("Cast", packed, to=b.elem_type), b.const(float(1 << (q.tables - 1))))
    rows = b.op("Mul", values, b.op("Unsqueeze", b.op("Gather", scales, ids), b.ints(-1)))
    flat = b.op("Reshape", rows, b.ints(0, 0, -1))
    return flat if d % q.block == 0 else b.op("Slice", flat, b.ints(0), b.ints(d), b.ints(-1))


def once(make):
    """``make`` called on first use only: a weight's quantised parts are computed together
    when the first of them is written, and not at all when every part is already stored."""
    memo = []
    return lambda: memo[0] if memo else memo.append(make()) or memo[0]


def dequantize(packed: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, bits: int, k: int) -> np.ndarray:
    """The (N, K) float32 weight that MatMulNBits multiplies by: (q - zero point) * scale per block."""
    n, blocks = scales.shape
    if bits == 4:
        q = np.stack([packed & 15, packed >> 4], -1).reshape(n, blocks, -1)
    else:
        q = packed.reshape(n, blocks, -1)
    if zero_points is None:
        zero = np.full((n, blocks), 1 << (bits - 1), np.float32)
    elif bits == 4:
        zero = np.stack([zero_points & 15, zero_points >> 4], -1).reshape(n, -1)[:, :blocks].astype(np.float32)
    else:
        zero = zero_points.reshape(n, blocks).astype(np.float32)
    w = (q.astype(np.float32) - zero[..., None]) * scales[..., None]
    return w.reshape(n, -1)[:, :k]


def tables(graph) -> set[str]:
    """The embedding and output projection weights: int8 or int4 tables, never scaled (``awq``)."""
    return {node.params["weight"] for node in graph.nodes() if node.op in ("embedding", "projection")}
