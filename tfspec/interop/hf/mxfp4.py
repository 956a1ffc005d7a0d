"""MXFP4 checkpoints (``quantization_config: {quant_method: mxfp4}``: openai/gpt-oss-20b and -120b
as published): each quantized matrix is stored as ``<name>_blocks`` and ``<name>_scales`` and
read here as the one tensor ``<name>`` transformers dequantizes it into.

The OCP microscaling format: groups of 32 values share one power of two (``_scales``, uint8
e8m0: the exponent plus 127), each value a 4-bit float e2m1 (one of 0, 0.5, 1, 1.5, 2, 3, 4, 6
and their negatives), two to a byte, the even-numbered value in the low nibble (``_blocks``,
uint8, (E, R, G, 16) for G groups). Dequantized as transformers' ``integrations/mxfp4.py``
does (``_convert_moe_packed_tensors``): the nibbles looked up, times 2^(scale - 127), the groups
of a row joined, and the last two axes swapped: (E, R, 32 G) -> (E, 32 G, R), the expert
layout transformers multiplies by (gpt-oss's gate_up_proj (E, d, 2f), down_proj (E, f, d)).
The values are exact in bfloat16 and float32. A tensor is dequantized when the import reads
it, one at a time, as the importer streams every other tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from tfspec.errors import TfspecError

if TYPE_CHECKING:
    from tfspec.interop.hf.checkpoint import Checkpoint

FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                      dtype=np.float32)
"""The 16 e2m1 codes' values (sign bit 3)."""
METHOD = "mxfp4"


def dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 (E, 32 G, R) of uint8 ``blocks`` (E, R, G, 16) and ``scales`` (E, R, G): one float32
    copy of the tensor (scaled in place, returned as a transposed view; the writer copies what it
    keeps), as gpt-oss-120b's 128 experts make each matrix 8.5 GB in float32."""
    values = np.empty((*blocks.shape[:-1], 2 * blocks.shape[-1]), dtype=np.float32)
    values[..., 0::2] = FP4_VALUES[blocks & 0x0F]
    values[..., 1::2] = FP4_VALUES[blocks >> 4]
    np.ldexp(values, scales.astype(np.int32)[..., None] - 127, out=values)
    experts, rows = blocks.shape[:2]
    return values.reshape(experts, rows, -1).swapaxes(1, 2)


@dataclass(frozen=True)
class Packed:
    """A tensor stored as MXFP4 blocks and scales, dequantized when read."""

    checkpoint: Checkpoint
    blocks: str
    scales: str
    dtype: str = "BF16"
    """What transformers dequantizes it to by default (the import's ``auto`` dtype reads it)."""

    @property
    def shape(self) -> tuple[int, ...]:
        experts, rows, groups, width = self.checkpoint.shape(self.blocks)
        return experts, 2 * groups * width, rows

    def read(self) -> np.ndarray:
        return dequantize(self.checkpoint.read(self.blocks), self.checkpoint.read(self.scales))


def check_settings(settings: dict, where: str) -> None:
    """Nothing to refuse: MXFP4's settings name the modules left unquantized, which the tensors show
    (a matrix stored as blocks and scales is MXFP4, any other is read as stored)."""


def dequantized(checkpoint: Checkpoint, settings: dict) -> Checkpoint:
    """``checkpoint`` with each ``<name>_blocks`` and ``<name>_scales`` pair read as ``<name>`` (the
    family has accepted ``settings``)."""
    tensors, origin = dict(checkpoint.tensors), dict(checkpoint.origin)
    for blocks in [name for name in checkpoint.tensors if name.endswith("_blocks")]:
        name = blocks.removesuffix("_blocks")
        scales = _checked(checkpoint, blocks, name + "_scales")
        tensors[name] = Packed(checkpoint, blocks, scales)  # read from the checkpoint as stored
        origin[name] = checkpoint.origin.get(blocks, checkpoint.directory)
        for part in (blocks, scales):
            del tensors[part]
            origin.pop(part, None)
    return replace(checkpoint, tensors=tensors, origin=origin)


def _checked(checkpoint: Checkpoint, blocks: str, scales: str) -> str:
    """``scales``, once it and ``blocks`` are found to be MXFP4's uint8 (E, R, G, 16) and (E, R, G)."""
    where = checkpoint.where(blocks)
    if scales not in checkpoint.tensors:
        raise TfspecError(f"{where}: tensor {blocks!r} has no {scales!r}: MXFP4 stores each matrix as both")
    shape, kinds = checkpoint.shape(blocks), {_dtype(checkpoint, n) for n in (blocks, scales)}
    if kinds != {"uint8"} or len(shape) != 4 or shape[-1] != 16 or checkpoint.shape(scales) != shape[:-1]:
        raise TfspecError(f"{where}: tensors {blocks!r} {list(shape)} and {scales!r} "
                          f"{list(checkpoint.shape(scales))} are not MXFP4 (uint8 blocks (E, R, G, 16) and uint8 "
                          "scales (E, R, G))")
    return scales


def _dtype(checkpoint: Checkpoint, name: str) -> str:
    tensor = checkpoint.tensors[name]
    return "uint8" if tensor.dtype in ("U8", np.dtype("u1")) else str(tensor.dtype)
