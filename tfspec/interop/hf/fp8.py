"""Block-scaled FP8 checkpoints (``quantization_config: {quant_method: fp8, weight_block_size:
[128, 128]}``: deepseek-ai/DeepSeek-V3 and R1 as published): each quantized matrix ``<name>.weight``
is stored in float8 e4m3fn beside ``<name>.weight_scale_inv``, one float32 multiplier per block of
128 x 128 values (the grid rounded up: DeepSeek-V3's 576-row kv_a_proj_with_mqa has 5 block rows,
the last 64 rows high), and read here as the one tensor transformers dequantizes it into.

Dequantized as transformers' ``integrations/finegrained_fp8.py`` does on loading (``Fp8Dequantize``,
which a CPU picks for a pre-quantized checkpoint): each value in float32 times its block's
multiplier in float32, one rounding, then the float type written. Matrices the checkpoint stores
unquantized (embeddings, norms, routers, lm_head) are read as they are. A tensor is dequantized
when the import reads it, one at a time, as the importer streams every other tensor. The scales
are no parameters of the dequantized model, so the count is that of the unquantized one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from tfspec.errors import TfspecError
from tfspec.interop.hf.checkpoint import CONFIG

if TYPE_CHECKING:
    from tfspec.interop.hf.checkpoint import Checkpoint

METHOD = "fp8"
SCALES = ".weight_scale_inv"
SETTINGS = {"fmt": ("e4m3",), "activation_scheme": ("dynamic",), "scale_fmt": ("float",), "expert_dtype": ("fp8",),
            "modules_to_convert": (None,)}
"""Settings with the values whose weights tfspec reads (DeepSeek-V3's ``fmt`` is read by its own
code only; transformers reads the tensors' type): static activation scales, power-of-two scales
and FP4 experts are other formats."""
FREE = ("quant_method", "weight_block_size", "dequantize", "modules_to_not_convert")
"""Settings read otherwise: ``dequantize`` is how transformers loads the weights, which tfspec always
does; the modules left unquantized are those whose tensors carry no scales."""


def check_settings(settings: dict, where: str) -> tuple[int, int]:
    """The block size (rows, columns) of a ``quantization_config`` whose weights tfspec reads."""
    for key, value in settings.items():
        if key not in SETTINGS and key not in FREE:
            raise TfspecError(f"{where}: unknown setting {key} ({json.dumps(value)}) of quant_method {METHOD}")
        if key in SETTINGS and value not in SETTINGS[key]:
            raise TfspecError(f"{where}: {key} {json.dumps(value)} is not supported; tfspec reads {METHOD} weights "
                              f"with {key} {json.dumps(SETTINGS[key][0])}")
    block = settings.get("weight_block_size")
    if not (isinstance(block, list) and len(block) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in block)):
        raise TfspecError(f"{where}: weight_block_size must be two positive integers (rows, columns), got "
                          f"{json.dumps(block)}")
    return block[0], block[1]


def dequantize(weight: np.ndarray, scales: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """float32 ``weight`` (..., R, C) times ``scales`` (..., ceil(R / b0), ceil(C / b1)), each
    block of b0 x b1 values by its own multiplier, in float32 (``weight`` is scaled in place)."""
    rows, cols = weight.shape[-2:]
    expanded = np.repeat(np.repeat(scales.astype(np.float32), block[0], axis=-2)[..., :rows, :], block[1], axis=-1)
    weight *= expanded[..., :cols]
    return weight


@dataclass(frozen=True)
class Scaled:
    """A float8 matrix and its block multipliers, dequantized when read."""

    checkpoint: Checkpoint
    weight: str
    scales: str
    block: tuple[int, int]
    dtype: str = "BF16"
    """What transformers dequantizes to on a CPU (the import's ``auto`` dtype reads it)."""

    @property
    def shape(self) -> tuple[int, ...]:
        return self.checkpoint.shape(self.weight)

    def read(self) -> np.ndarray:
        return dequantize(self.checkpoint.read(self.weight), self.checkpoint.read(self.scales), self.block)


def dequantized(checkpoint: Checkpoint, settings: dict) -> Checkpoint:
    """``checkpoint`` with each ``<name>.weight`` and ``<name>.weight_scale_inv`` pair read as the
    dequantized ``<name>.weight`` (the family has accepted ``settings``)."""
    block = check_settings(settings, f"{checkpoint.directory / CONFIG}: quantization_config")
    tensors, origin = dict(checkpoint.tensors), dict(checkpoint.origin)
    for scales in [name for name in checkpoint.tensors if name.endswith(SCALES)]:
        weight = scales.removesuffix(SCALES) + ".weight"
        _check(checkpoint, weight, scales, block)
        tensors[weight] = Scaled(checkpoint, weight, scales, block)  # read from the checkpoint as stored
        del tensors[scales]
        origin.pop(scales, None)
    return replace(checkpoint, tensors=tensors, origin=origin)


def _check(checkpoint: Checkpoint, weight: str, scales: str, block: tuple[int, int]) -> None:
    """``weight`` is float8 e4m3fn, ``scales`` float, one per block of it."""
    where = checkpoint.where(scales)
    if weight not in checkpoint.tensors:
        raise TfspecError(f"{where}: tensor {scales!r} has no {weight!r}: {METHOD} stores each matrix beside its "
                          "scales")
    shape = checkpoint.shape(weight)
    grid = (*shape[:-2], *(math.ceil(n / b) for n, b in zip(shape[-2:], block)))
    if (_code(checkpoint, weight) != "F8_E4M3" or _code(checkpoint, scales) not in ("F32", "BF16")
            or len(shape) < 2 or tuple(checkpoint.shape(scales)) != grid):
        raise TfspecError(f"{where}: tensors {weight!r} ({_code(checkpoint, weight)} {list(shape)}) and {scales!r} "
                          f"({_code(checkpoint, scales)} {list(checkpoint.shape(scales))}) are not {METHOD} blocks of "
                          f"{block[0]} x {block[1]} (float8 e4m3fn, and a float scale per block: {list(grid)})")


def _code(checkpoint: Checkpoint, name: str) -> str:
    """The tensor's safetensors dtype code (a pickled tensor's numpy type is none of fp8's)."""
    dtype = checkpoint.tensors[name].dtype
    return dtype if isinstance(dtype, str) else str(dtype)
