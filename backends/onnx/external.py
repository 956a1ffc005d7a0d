"""Initializers written to one external data file as the graph is built, for exports that must
not hold the model in memory (``streamed``).

The graph protos hold references only (``data_location: EXTERNAL``, location, offset, length,
as ``onnx.external_data_helper`` writes them and onnxruntime reads them); every graph of an
export names the same file, and an initializer already written for an earlier graph is
referenced again, not rewritten. Large tensors start at 64 KiB boundaries, so onnxruntime can
map them from the file instead of copying them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

ALIGN, SMALL_ALIGN, LARGE = 1 << 16, 64, 1 << 20
"""Tensors of LARGE bytes or more start at ALIGN boundaries, others at SMALL_ALIGN."""


class ExternalData:
    """One data file beside the graphs, appended to tensor by tensor."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.file = open(self.path, "wb")
        self.written: dict[str, TensorProto] = {}
        """Initializer name -> its reference (reused by every later graph)."""

    def tensor(self, name: str, make) -> TensorProto:
        """A reference to initializer ``name``, writing ``make()`` first if it is new."""
        if name not in self.written:
            array = np.ascontiguousarray(make())
            self.written[name] = self._write(name, array)
        reference = TensorProto()
        reference.CopyFrom(self.written[name])
        return reference

    def _write(self, name: str, array: np.ndarray) -> TensorProto:
        size = array.nbytes
        align = ALIGN if size >= LARGE else SMALL_ALIGN
        offset = -(-self.file.tell() // align) * align
        self.file.write(b"\0" * (offset - self.file.tell()))
        self.file.write(array.tobytes() if array.ndim == 0 else memoryview(array.reshape(-1)).cast("B"))
        proto = TensorProto(name=name, dims=array.shape,
                            data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
                            data_location=TensorProto.EXTERNAL)
        for key, value in (("location", self.path.name), ("offset", str(offset)), ("length", str(size))):
            entry = proto.external_data.add()
            entry.key, entry.value = key, value
        return proto

    def close(self) -> None:
        self.file.close()
