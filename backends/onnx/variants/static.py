"""``decoder_static.onnx``: the ``decoder`` step over shapes that stay fixed from step to step,
so that onnxruntime can capture it as a CUDA graph (``export --static-cache``).

Each self-attention past is a preallocated ``max_len`` cache into which the step writes its
keys/values at ``offset`` (1,) (later slots masked), and the per-source inputs keep one row per
source, picked by ``cross_rows`` (batch,). Every value the step computes with derives from
inputs or constants on the device, never from a shape read on the host (that would need a
copy, which capture forbids). Outputs: ``top_values``/``top_ids`` and the presents.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tfspec.errors import TfspecError

from . import register
from .decoder import Decoder


@register
class Static(Decoder):
    name, order = "decoder_static", 3
    offset_given, row_inputs, fusable, captured, preallocated, rows_per_source = True, False, False, True, True, True

    @classmethod
    def written(cls, graph, asked) -> bool:
        return asked.static and "tgt" in graph.ports

    @classmethod
    def opened_at_load(cls, provider: str) -> bool:
        return provider == "CUDAExecutionProvider"  # elsewhere when asked: CPU decoding keeps the growing cache

    def per_source(self, e, name: str, shape) -> str:
        """One row per source, each row's gathered by ``cross_rows``."""
        b = e.b

        def gathered():
            rows = e.cached("cross_rows", lambda: b.input("cross_rows", ["batch"], TensorProto.INT64))
            return b.op("Gather", b.input(name, shape), rows, axis=0)
        return e.cached(("input", name), gathered)

    def cache(self, e, node, k: str, v: str) -> tuple[str, str]:
        """Written into the preallocated cache, which is passed on whole."""
        if not self.carries(node):
            return k, v
        a = node.attrs
        g, d_k, d_v = a["kv_heads"], a["d_k"], a["d_v"]
        return (self.present(e, node, "key", self._write(e, node, "key", k, d_k), ["batch", g, "max_len", d_k]),
                self.present(e, node, "value", self._write(e, node, "value", v, d_v), ["batch", g, "max_len", d_v]))

    def append(self, e, node, role: str, new: str, width: int) -> str:
        if self.carries(node):
            raise TfspecError(f"{node.name}: {node.op.replace('_', ' ')} has no static step graph; export without "
                               "static_cache")
        return new

    def _write(self, e, node, role: str, new: str, size: int) -> str:
        """The cache ``past.<node>.<role>`` (B, g, max_len, size) with the new keys/values
        (B, g, L, size) written at slots offset..offset+L-1."""
        past = self.state(e, node, role, ["batch", node.attrs["kv_heads"], "max_len", size])
        inside, index = e.cached("slots", lambda: self._slots(e, past))
        return e.b.op("Where", inside, e.b.op("Gather", new, index, axis=2), past)

    def _slots(self, e, past: str) -> tuple[str, str]:
        """Where this step writes in a (B, g, max_len, d) cache: (1, 1, max_len, 1) True at the
        new positions, and for every slot the new position it takes (clamped)."""
        b, offset = e.b, self.offset(e)
        last = b.op("Slice", self.positions(e, "T", None), b.ints(-1), b.ints(2**62))  # (1,): the last new position
        cols = e.slots(past)
        inside = b.op("And", b.op("GreaterOrEqual", cols, offset), b.op("LessOrEqual", cols, last))
        index = b.op("Min", b.op("Max", b.op("Sub", cols, offset), b.const(np.int64(0))), b.op("Sub", last, offset))
        return b.op("Unsqueeze", inside, b.ints(0, 1, 3)), index

    def log_probs(self, e, log_probs: str) -> str:
        return log_probs  # not an output: the top-k is all a captured step returns
