"""Reading and writing checkpoint tensors without trusting the file.

safetensors files are parsed here (8-byte header length, JSON header, raw little-endian data)
rather than through a framework, for three reasons: every offset is checked against the file
before anything is read, so a truncated or corrupt file is refused naming the tensor; tensors
are read one at a time through a memory map, so converting a checkpoint needs the memory of
one tensor, not of the model; and bfloat16 becomes float32 exactly without numpy knowing the
type. ``pytorch_model.bin`` files are pickles: they are opened only with
``torch.load(weights_only=True)``, which refuses anything but tensors and plain containers.
"""

from __future__ import annotations

import json
import math
import struct
import warnings
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tfspec.errors import TfspecError
from tfspec.untrusted import parse_json

DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
          "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
          "U8": np.dtype("u1"), "BOOL": np.dtype("?"), "F8_E4M3": np.dtype("u1")}
"""safetensors dtype codes -> how their bytes are laid out (bfloat16: the upper half of a float32;
float8 e4m3fn: one byte, looked up in ``E4M3``)."""


def _e4m3_values() -> np.ndarray:
    """float8 e4m3fn's 256 codes as float32 (OCP FP8: a sign, 4 exponent bits biased by 7, 3 mantissa
    bits, subnormals at exponent 0; no infinities, S.1111.111 the NaN), every one exact."""
    code = np.arange(256)
    exponent, mantissa = (code >> 3) & 0xF, code & 7
    magnitude = np.where(exponent == 0, mantissa * 2.0 ** -9, (8 + mantissa) * 2.0 ** (exponent - 10))
    magnitude[(code & 0x7F) == 0x7F] = np.nan
    return np.where(code >> 7, -magnitude, magnitude).astype(np.float32)


E4M3 = _e4m3_values()
MAX_HEADER = 100 << 20
"""safetensors' own limit on the JSON header."""


@dataclass(frozen=True)
class Entry:
    """Where one tensor's bytes are: its file, dtype code, shape and byte range."""

    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


def read_header(path: Path) -> tuple[dict[str, Entry], dict[str, str]]:
    """The tensors of a safetensors file and its metadata, every offset checked against the file."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
        if length is None or length > min(MAX_HEADER, size - 8):
            raise TfspecError(f"{path}: not a safetensors file, or truncated: the file has {size:,} bytes, too few "
                              f"for its header")
        try:
            header = parse_json(f.read(length))
        except ValueError as e:
            raise TfspecError(f"{path}: corrupt safetensors header ({e})") from None
    if not isinstance(header, dict):
        raise TfspecError(f"{path}: corrupt safetensors header (not a JSON object)")
    metadata = header.pop("__metadata__", None) or {}
    entries, data = {}, size - 8 - length
    for name, info in header.items():
        entries[name] = _entry(path, name, info, data, 8 + length)
    return entries, metadata


def _entry(path: Path, name: str, info, data: int, base: int) -> Entry:
    try:
        dtype, shape, (start, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        ok = dtype in DTYPES and all(isinstance(d, int) and d >= 0 for d in (*shape, start, end))
    except (TypeError, KeyError, ValueError):
        ok = False
    if not ok:
        raise TfspecError(f"{path}: corrupt safetensors header: tensor {name!r} has no valid dtype, shape and offsets")
    if end > data:
        raise TfspecError(f"{path}: truncated: tensor {name!r} needs bytes {start:,}-{end:,} of the data, but the "
                          f"file holds {data:,}")
    if end - start != math.prod(shape) * DTYPES[dtype].itemsize:
        raise TfspecError(f"{path}: corrupt: tensor {name!r} ({dtype} {list(shape)}) spans {end - start:,} bytes")
    return Entry(path, dtype, shape, base + start, base + end)


def read_tensor(entry: Entry) -> np.ndarray:
    """The tensor as float32 (floating types, float8 too) or its own integer type."""
    raw = np.memmap(entry.file, dtype=DTYPES[entry.dtype], mode="r", offset=entry.start,
                    shape=entry.shape) if entry.end > entry.start else np.zeros(entry.shape, DTYPES[entry.dtype])
    if entry.dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if entry.dtype == "F8_E4M3":
        return E4M3[raw]
    return np.array(raw, dtype=np.float32 if entry.dtype.startswith("F") else raw.dtype)


def read_pickled(path: Path) -> dict[str, np.ndarray]:
    """Tensors of a ``pytorch_model.bin``: ``torch.load(weights_only=True)`` only, so the pickle
    cannot run code. torch is a tfspec dependency; no backend is involved."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same to the user
        raise TfspecError(f"{path}: not a readable weights file ({type(e).__name__}: {str(e).strip()[:200]})") from e
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise TfspecError(f"{path}: expected a mapping of tensor names to tensors")
    return {k: (v.float() if v.is_floating_point() else v).numpy() for k, v in state.items()}


def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], dtype: str, tensors,
                      metadata: dict[str, str]) -> None:
    """Stream ``tensors`` (an iterable of (name, array) in the order of ``shapes``) into a
    safetensors file of one float dtype: only one tensor is in memory at a time."""
    code = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[dtype]
    header, offset = {"__metadata__": metadata}, 0
    for name, shape in shapes.items():
        size = math.prod(shape) * DTYPES[code].itemsize
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, array in tensors:
            _write(f, name, shapes[name], array, code)


def _write(f: BinaryIO, name: str, shape: tuple[int, ...], array: np.ndarray, code: str) -> None:
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name}: shape {array.shape}, header says {shape}")
    array = np.ascontiguousarray(array, dtype=np.float32)
    if code == "BF16":  # round to nearest even, keeping NaN a NaN
        bits = array.view(np.uint32)  # no overflow below NaN's bit patterns (0xFF807FFF at most)
        with np.errstate(over="ignore"):
            rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        array = np.where(np.isnan(array), np.uint16(0x7FC0), rounded)
    elif code == "F16":
        array = array.astype("<f2")
    f.write(array.tobytes())


class SafetensorsWeights(Mapping):
    """A safetensors file's tensors as a read-only mapping whose values are read (as float32)
    only when asked for, one at a time: ``shapes`` answers shape questions without reading.
    ``peak`` counts the most values alive at once, so a streaming consumer can prove it holds
    a bounded number of tensors."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.entries = read_header(self.path)[0]
        self.shapes = {name: entry.shape for name, entry in self.entries.items()}
        self.live = self.peak = self.reads = 0
        self.on_read = None
        """Called with each name read (a progress bar)."""

    def __getitem__(self, name: str) -> np.ndarray:
        array = read_tensor(self.entries[name])
        self.live, self.reads = self.live + 1, self.reads + 1
        self.peak = max(self.peak, self.live)
        weakref.finalize(array, self._freed)
        if self.on_read is not None:
            self.on_read(name)
        return array

    def _freed(self) -> None:
        self.live -= 1

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def dtypes(self) -> set[str]:
        return {entry.dtype for entry in self.entries.values()}
