"""Decoding over the in-place cache (``variants/inplace.py``): ``InPlaceDecoder`` binds each
``present.*`` output of ``decoder_inplace`` to its ``past.*`` buffer.

The standard step graph appends a step's keys and values with a ``Concat`` and first gathers
the pasts by ``beam_rows``: two copies of every layer's whole cache per step, a cost that grows
with the length decoded (at batch 16 and 32 positions, 1.5 ms of a base step's attention, 0.6
ms in place; tools/bench/bench_decode.py measures whole decodes). Here a step writes only its new
positions. Buffers full at ``max_len`` are copied into longer ones (``SLOTS``). When sentences
end, the rows that go on are gathered between steps. Beam search moves rows at every step,
which here would copy whole buffers each time: at its first reordering the decoder hands the
cache, cut to the positions decoded, to the standard step graph of the same export, which
gathers rows as it appends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper

from .decoding import STEP_OUTPUTS, DeviceState, OnnxDecoder
from .static import pad_graph

SLOTS = 64
"""Buffers hold a multiple of this many positions, lengthened by as many when full (a copy of
the cache once per SLOTS steps); gathering the rows that go on when sentences end copies whole
buffers, so they stay near the length decoded. 64: 1.03-1.04x the decoding speed of 16 on
`small`, where most sentences end before their buffers fill."""


@dataclass(frozen=True)
class Buffers(DeviceState):
    """A state whose pasts are the in-place step graph's buffers (others are the standard
    step graph's, after beam search's first reordering)."""


class InPlaceDecoder(OnnxDecoder):
    """``tfspec.search.Decoder`` over ``decoder_inplace``: ``Buffers`` whose pasts have
    ``max_len`` slots, written by the step graph itself; the standard step graph once rows
    are reordered (the module docstring)."""

    def __init__(self, model, first_length: int = SLOTS):
        super().__init__(model, model.sessions["decoder_inplace"])
        self.standard = OnnxDecoder(model)
        self.first_length = first_length
        self._aranges: dict[int, np.ndarray] = {}
        self._steady: _Steady | None = None  # the binding as the last plain step left it

    def start(self, src: np.ndarray | None, mask: np.ndarray | None = None) -> Buffers:
        state = super().start(src, mask)
        rows = 1 if src is None else len(src)
        return Buffers(**vars(state) | {"values": state.values | {
            name: self._zeros(name, rows, self.first_length) for name in self.pasts}})

    def select(self, state: DeviceState, rows: np.ndarray, cross: bool) -> DeviceState:
        """Rows kept in order (ended sentences left) stay in the buffers; rows reordered or
        repeated after the first position hand the cache to the standard step graph."""
        if not isinstance(state, Buffers):
            return self.standard.select(state, rows, cross)
        chosen = super().select(state, rows, cross)
        if state.offset == 0 or np.all(np.diff(rows) > 0):
            return Buffers(**vars(chosen))
        return self._handed_over(chosen)

    def step(self, state: DeviceState, tokens: np.ndarray, k: int, mask: np.ndarray | None = None):
        """A search step: one that follows the last plain step, on its rows, its buffers' room
        and its k, runs through the kept binding (``_Steady``) and does nothing else."""
        steady = self._steady
        if mask is None and steady is not None and steady.follows(state, tokens.shape, k):
            return (*steady.run(tokens, state.offset), steady.after(state, tokens.shape[1]))
        return super().step(state, tokens, k, mask)

    def run(self, state: DeviceState, tokens: np.ndarray, outputs: list[str], k: int = 1,
            mask: np.ndarray | None = None):
        """Feed ``tokens`` (B, L); return the named outputs (copied to the host), then the next
        state, whose pasts are the same buffers, now holding this step's keys and values."""
        if not isinstance(state, Buffers):
            return self.standard.run(state, tokens, outputs, k, mask)
        if tokens.shape[1] > 1 and state.offset and len(tokens) > 1:  # GroupQueryAttention's limit: one at a time
            for column in range(tokens.shape[1] - 1):
                *_, state = self.run(state, tokens[:, column:column + 1], [], k,
                                     None if mask is None else mask[:, column:column + 1])
            tokens, mask = tokens[:, -1:], None if mask is None else mask[:, -1:]
        values = self._ready(state, len(tokens), state.offset + tokens.shape[1])
        host, key_mask = self._bind_and_run(state, values, tokens, outputs, k, mask)
        after = Buffers(values, self._identity(len(tokens)), state.sources, state.offset + tokens.shape[1], key_mask,
                        state.position_offset)
        plain = key_mask is None and outputs == STEP_OUTPUTS
        self._steady = _Steady(self._raw, after, tokens, k, host, values[self.pasts[0]].shape()[2]) if plain else None
        return (*host, after)

    def _bind_and_run(self, state: DeviceState, values: dict, tokens: np.ndarray, outputs: list[str], k: int,
                      mask: np.ndarray | None) -> tuple[list[np.ndarray], np.ndarray | None]:
        """One step with every input and output bound anew: the host outputs and the key mask."""
        b = self.binding
        b.bind_cpu_input("tgt", np.ascontiguousarray(tokens, np.int64))
        b.bind_cpu_input("top_k", self._k(k))
        b.bind_cpu_input("offset", np.array([state.offset], np.int64))
        key_mask = self._bind_masks(state, tokens, mask)
        written = {present: values[past] for past, present in zip(self.pasts, self.presents)}
        host, _ = self._raw.run(values, outputs, [], written)
        return host, key_mask

    def _identity(self, rows: int) -> np.ndarray:
        """``arange(rows)``, one array per size: a state whose rows are it needs no gather."""
        if rows not in self._aranges:
            self._aranges[rows] = np.arange(rows, dtype=np.int64)
        return self._aranges[rows]

    def _ready(self, state: DeviceState, rows: int, length: int) -> dict:
        """The state's values with its pasts holding row ``i`` of the step at row ``i`` (gathered
        when sentences ended, or a decoder-only start copied its empty row) and room for
        ``length`` positions: the same dict when they already do (``_Steady``)."""
        held = state.values[self.pasts[0]].shape()
        gather = held[0] != rows or (state.rows is not self._aranges.get(rows)
                                     and not np.array_equal(state.rows, np.arange(rows)))
        if not gather and length <= held[2]:
            return state.values
        pasts = state.pasts
        if gather:
            pasts = self._take(pasts, state.rows)
        if length > held[2]:
            pasts = self._lengthened(pasts, self.cache_length(length))
        return state.values | pasts

    def cache_length(self, length: int) -> int:
        """Slots of buffers that hold ``length`` positions: a multiple of ``SLOTS``, room for the
        next step's position at least."""
        return -(-(length + 1) // SLOTS) * SLOTS

    def _lengthened(self, pasts: dict, length: int) -> dict:
        """``pasts`` copied into buffers of ``length`` slots."""
        extra = np.array([length - pasts[self.pasts[0]].shape()[2]])
        return self._apply("grown", lambda: pad_graph(self.pasts, self.inputs, self.dtype), ("extra", extra), pasts)

    def _handed_over(self, state: DeviceState) -> DeviceState:
        """The standard step graph's state: each buffer cut to the positions decoded (its rows
        still to be gathered by that graph's ``beam_rows``)."""
        cut = self._apply("cut", lambda: _cut_graph(self.pasts, self.inputs, self.dtype),
                          ("length", np.array([state.offset])), state.pasts)
        return DeviceState(**vars(state) | {"values": state.values | cut})

    def _zeros(self, name: str, rows: int, length: int):
        shape = [rows] + [length if d == "max_len" else d for d in self.inputs[name].shape[1:]]
        return self.model.on_device(np.zeros(shape, self.dtype))


class _Steady:
    """The in-place step's binding kept from one plain step to the next. The buffers are
    written where they lie, so while a search keeps its rows, its room and its k, a step
    changes no bound value but the new tokens and the offset: arrays bound once and written
    before each run, as the top-k outputs land in arrays bound once. Binding every input and
    output anew each step was ~40% of the host time of a step (base, batch 1)."""

    def __init__(self, raw, state: Buffers, tokens: np.ndarray, k: int, host: list[np.ndarray], room: int):
        import onnxruntime as ort

        self.raw, self.values, self.rows, self.shape, self.k, self.room = raw, state.values, state.rows, \
            tokens.shape, k, room
        self.tokens, self.offset = np.array(tokens, np.int64), np.zeros(1, np.int64)
        self.host = [np.empty_like(array) for array in host]
        # OrtValues over the arrays' own memory, held while bound
        self.keep = [ort.OrtValue.ortvalue_from_numpy(a) for a in (self.tokens, self.offset, *self.host)]
        for name, value in zip(("tgt", "offset"), self.keep):
            raw.binding.bind_ortvalue_input(name, value._ortvalue)
        for name, value in zip(STEP_OUTPUTS, self.keep[2:]):
            raw.binding.bind_ortvalue_output(name, value._ortvalue)

    def follows(self, state: DeviceState, shape: tuple, k: int) -> bool:
        """Whether a step of ``state`` (the values and rows the last step left: the same buffers,
        no gather), tokens of ``shape`` and ``k`` finds everything else bound and room left."""
        return (state.values is self.values and state.rows is self.rows and shape == self.shape and k == self.k
                and state.offset + shape[1] <= self.room)

    def run(self, tokens: np.ndarray, offset: int) -> list[np.ndarray]:
        self.tokens[...], self.offset[0] = tokens, offset
        self.raw.session.run_with_iobinding(self.raw.binding, None)
        return [array.copy() for array in self.host]

    def after(self, state: DeviceState, length: int) -> Buffers:
        """The state after a step of ``length`` new positions on ``state``."""
        return Buffers(self.values, self.rows, state.sources, state.offset + length, None, state.position_offset)


def _cut_graph(names: list[str], inputs: dict, dtype: np.dtype) -> bytes:
    """An ONNX graph: each (B, g, max_len, d) buffer ``name`` -> ``name.cut``, its first
    ``length`` (int64 (1,)) slots."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    zero = helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", TensorProto.INT64, [1], [0]))
    two = helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", TensorProto.INT64, [1], [2]))
    nodes = [zero, two] + [helper.make_node("Slice", [n, "zero", "length", "two"], [f"{n}.cut"]) for n in names]
    graph = helper.make_graph(
        nodes, "cut", [helper.make_tensor_value_info("length", TensorProto.INT64, [1])]
        + [helper.make_tensor_value_info(n, elem, [None] * len(inputs[n].shape)) for n in names],
        [helper.make_tensor_value_info(f"{n}.cut", elem, [None] * len(inputs[n].shape)) for n in names])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
