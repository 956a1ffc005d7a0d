"""Two decoding states joined into one on the device: what continuous batching (``tfspec serve``)
does when prompts join the running batch.

Each state's caches are cut to their live columns (the leading ones that are padding in every
row dropped), left-padded with zeros to one width and stacked, by a small graph of Gather,
Slice, Pad and Concat built once per decoder: the caches never pass through the host (with
CUDA, a join used to copy every cache to the host and back). The host computes only the key
mask and each row's position shift, which the next step reads: a padded column is masked, so a
row's tokens are the ones it gets alone. The in-place step graph's buffers (``inplace``) are cut
at the positions decoded and padded on the right to the decoder's room for more
(``cache_length``), so the step after a join writes where it lies again.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from onnx import TensorProto, helper, numpy_helper

PARTS = ("a", "b")


CACHE_AXES = ("past_len", "max_len")
"""Names of a ``past.*`` input's axis that grows with the positions decoded: ``past_len`` in the
standard step graph, ``max_len`` (the buffer's slots) in the in-place one."""


def cache_axis(shape: list) -> int | None:
    """The index of ``shape``'s cache axis (``CACHE_AXES``); None where it has none (a window or
    a recurrent state of fixed size)."""
    return next((shape.index(name) for name in CACHE_AXES if name in shape), None)


def live(state) -> tuple[int, int]:
    """(leading columns that are padding in every row, columns left) of ``state``."""
    dead = 0 if state.position_offset is None else int(state.position_offset.min())
    return dead, state.offset - dead


def splice_graph(axes: dict[str, int], ranks: dict[str, int], dtype) -> bytes:
    """An ONNX graph: for each cache ``name`` (its cache axis ``axes[name]``), inputs ``name.a``
    and ``name.b`` -> ``name.joined``: rows ``<part>_rows`` of each, columns ``<part>_cut`` to
    ``<part>_end``, left-padded by ``<part>_pad`` and right-padded by ``room`` (int64 (1,))
    columns, stacked."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    controls = [f"{p}_{c}" for p in PARTS for c in ("rows", "cut", "end", "pad")] + ["room"]
    nodes, inits = [], []
    nodes += [helper.make_node("Concat", [f"{p}_pad", "room"], [f"{p}_pads"], axis=0) for p in PARTS]
    for name, axis in axes.items():
        inits.append(numpy_helper.from_array(np.array([axis], np.int64), f"{name}.axis"))
        for p in PARTS:
            nodes += [helper.make_node("Gather", [f"{name}.{p}", f"{p}_rows"], [f"{name}.{p}.rows"], axis=0),
                      helper.make_node("Slice", [f"{name}.{p}.rows", f"{p}_cut", f"{p}_end", f"{name}.axis"],
                                       [f"{name}.{p}.cut"]),
                      helper.make_node("Pad", [f"{name}.{p}.cut", f"{p}_pads", "", f"{name}.axis"],
                                       [f"{name}.{p}.padded"])]
        nodes.append(helper.make_node("Concat", [f"{name}.{p}.padded" for p in PARTS], [f"{name}.joined"], axis=0))
    tensor = lambda name, rank: helper.make_tensor_value_info(name, elem, [None] * rank)  # noqa: E731
    graph = helper.make_graph(
        nodes, "splice",
        [helper.make_tensor_value_info(c, TensorProto.INT64, [None]) for c in controls]
        + [tensor(f"{name}.{p}", ranks[name]) for name in axes for p in PARTS],
        [tensor(f"{name}.joined", ranks[name]) for name in axes], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


class Splicer:
    """``join(a, b)`` for the states of ``decoder`` (an ``OnnxDecoder``), its graph made on first use."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.axes = {name: cache_axis(i.shape) for name, i in decoder.inputs.items() if name.startswith("past.")}
        self.session = self.binding = None

    def join(self, a, b):
        """One decoding state of ``a``'s rows then ``b``'s (module docstring)."""
        parts = [(state, *live(state)) for state in (a, b)]  # (state, dead columns, live width)
        width, n = max(w for _, _, w in parts), len(a.rows) + len(b.rows)
        room = self.decoder.cache_length(width) - width
        if self.session is None:
            ranks = {name: len(self.decoder.inputs[name].shape) for name in self.axes}
            self.session = self.decoder.model.session(splice_graph(self.axes, ranks, self.decoder.dtype))
            self.binding = self.session.io_binding()
        bind = self.binding
        bind.clear_binding_outputs()
        bind.bind_cpu_input("room", np.array([room], np.int64))
        for p, (state, dead, w) in zip(PARTS, parts):
            controls = {"rows": state.rows, "cut": [dead], "end": [state.offset], "pad": [width - w]}
            for control, value in controls.items():
                bind.bind_cpu_input(f"{p}_{control}", np.ascontiguousarray(value, np.int64))
            for name in self.axes:
                bind.bind_ortvalue_input(f"{name}.{p}", state.values[name])
        for name in self.axes:
            bind.bind_output(f"{name}.joined", *self.decoder.model.device)
        self.session.run_with_iobinding(bind)
        values = dict(zip(self.axes, bind.get_outputs()))
        mask, shift, first = np.zeros((n, width), np.int64), np.zeros(n, np.int64), 0
        for state, dead, w in parts:
            rows = slice(first, first + len(state.rows))
            mask[rows, width - w:] = 1 if state.key_mask is None else state.key_mask[:, dead:]
            shift[rows] = width - w + (0 if state.position_offset is None else state.position_offset - dead)
            first += len(state.rows)
        rows = np.arange(n, dtype=np.int64)
        return replace(a, values=a.values | values, rows=rows, sources=np.zeros_like(rows), offset=width,
                       key_mask=mask, position_offset=shift)
