"""Decoding with onnxruntime, the state kept on the session's device (IO binding).

Each step binds the previous step's ``present.*`` OrtValues as this step's ``past.*`` inputs
and lets onnxruntime allocate the new presents on the device (CPU or CUDA, one code path);
only the top-k values and ids come back to the host. Beam search moves no past key or value
itself: ``select`` records on the host which row each hypothesis continues, and the step
graph gathers those rows (``beam_rows``) before appending to them. Cross-attention
keys/values and ``memory_bias`` are computed once per batch of sources and keep one row per
source, which a sentence's beams read together (the step graph's grouped cross-attention); a
small gather graph built here narrows them, on the device, when sentences end
(``select(..., cross=True)``), never per step. Gathering them inside the
step graph instead (a ``cross_rows`` input) cost 3.5% of the batch-16 beam-4 step time in
onnxruntime's profile (base model, CPU), for copies this does once per search.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from onnx import TensorProto, helper


NO_PADDING = (np.ones((1, 1), np.int64), np.zeros(1, np.int64))
"""``attention_mask`` and ``position_offset`` of a batch without padding (they broadcast)."""
STEP_OUTPUTS = ["top_values", "top_ids"]
"""What a search step asks of the step graph (``OnnxDecoder.step``)."""


@dataclass(frozen=True)
class DeviceState:
    """What a search carries from step to step."""

    values: dict
    """Input name -> OrtValue on the device: ``past.*`` (one row per row of the last step),
    ``cross.*`` and ``memory_bias`` (one row per hypothesis)."""
    rows: np.ndarray
    """int64 (B,): the row of the ``past.*`` values each hypothesis continues."""
    sources: np.ndarray
    """int64 (B,): the row of the per-source values each hypothesis reads, in equal runs
    (``repeat(arange(S), B // S)``, the step graph's grouping)."""
    offset: int
    """Target positions decoded so far (the ``offset`` input of graphs that take one)."""
    key_mask: np.ndarray | None = None
    """int64 (B, offset): 0 at the padding of a batch of prompts of different lengths (the step
    graph's ``attention_mask``); None when no row had padding."""
    position_offset: np.ndarray | None = None
    """int64 (B,): each row's padding count, subtracted from its positions (``position_offset``)."""

    @property
    def pasts(self) -> dict:
        return {n: v for n, v in self.values.items() if n.startswith("past.")}


class OnnxDecoder:
    """The encoder and decoder-step graphs as a ``tfspec.search.Decoder`` over ``DeviceState``."""

    def __init__(self, model, session=None):
        vocab = model.spec.vocab
        self.bos, self.eos, self.pad = vocab.bos_id, vocab.eos_id, vocab.pad_id
        self.eos_ids = vocab.stop_ids
        self.positions = model.spec.positional
        """What bounds a search's length (``Positional.room``)."""
        self.model, self.session = model, session or model.sessions["decoder"]
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self._masks = "attention_mask" in self.inputs
        outputs = {o.name: o for o in self.session.get_outputs()}
        self.presents = [name for name in outputs if name.startswith("present.")]
        self.pasts = [name.replace("present.", "past.", 1) for name in self.presents]
        self.vocab = outputs["log_probs"].shape[1]
        self.dtype = model.dtype
        self.binding = self.session.io_binding()  # one binding, rebound each step
        self._raw = _RawBinding(self.session, self.binding, model.device)
        self.shared = [n for n in self.inputs if n.startswith("cross.") or n == "memory_bias"]
        self._top_k: dict[int, np.ndarray] = {}  # k -> the (1,) top_k input, made once
        self._helpers: dict[tuple, tuple] = {}  # (kind, names) -> (session, binding) of a small graph (``_apply``)

    def start(self, src: np.ndarray | None, mask: np.ndarray | None = None) -> DeviceState:
        """Encode ``src`` (B, S); ``mask`` (B, S) true at real tokens (``OnnxModel.feeds``). A float
        ``src`` is a spectrogram's features (B, mels, frames) or images' pixel values (B, C, H, W), without
        a mask (Whisper's, TrOCR's)."""
        values = {}
        if src is not None and src.dtype.kind == "f":
            port = next(i.name for i in self.model.sessions["encoder"].get_inputs())  # the one float input
            values |= self.model.run_on_device("encoder", self.shared, {port: src.astype(self.dtype)})
        elif src is not None:
            feeds = {"src": src.astype(np.int64)} | ({} if mask is None else {"attention_mask": mask})
            values |= self.model.run_on_device("encoder", self.shared, feeds)
        batch = len(src) if src is not None else 1
        for name, info in self.inputs.items():
            if name.startswith("past."):  # empty keys/values, zero windows and hidden states
                shape = [batch if d == "past_batch" else 0 if isinstance(d, str) else d for d in info.shape]
                values[name] = self.model.on_device(np.zeros(shape, self.dtype))
        rows = np.arange(batch, dtype=np.int64)
        return DeviceState(values, rows, rows, 0)

    @property
    def takes_masks(self) -> bool:
        """The step graph takes ``attention_mask`` and ``position_offset`` (``graphs``): prompts
        of different lengths decode in one left-padded batch."""
        return self._masks


    def step(self, state: DeviceState, tokens: np.ndarray, k: int, mask: np.ndarray | None = None):
        if mask is not None:  # a left-padded batch of prompts: keys masked, positions shifted per row
            state = replace(state, key_mask=np.zeros((len(tokens), state.offset), np.int64),
                            position_offset=(~mask).sum(1).astype(np.int64))
        values, ids, state = self.run(state, tokens, STEP_OUTPUTS, k, mask)
        return values, ids, state

    def run(self, state: DeviceState, tokens: np.ndarray, outputs: list[str], k: int = 1,
            mask: np.ndarray | None = None):
        """Feed ``tokens`` (B, L); return the named outputs (copied to the host), then the
        next state, whose pasts are this step's presents, still on the device."""
        b = self.binding
        b.bind_cpu_input("tgt", np.ascontiguousarray(tokens, np.int64))
        b.bind_cpu_input("top_k", self._k(k))
        if "beam_rows" in self.inputs:  # absent where no layer carries state (a decoder of FFNs alone)
            b.bind_cpu_input("beam_rows", state.rows)
        if "offset" in self.inputs:
            b.bind_cpu_input("offset", np.array(state.offset, np.int64))
        key_mask = self._bind_masks(state, tokens, mask)
        host, presents = self._raw.run(state.values, outputs, self.presents)
        values = state.values | dict(zip(self.pasts, presents))
        rows = np.arange(len(tokens), dtype=np.int64)
        return (*host, DeviceState(values, rows, state.sources, state.offset + tokens.shape[1], key_mask,
                                   state.position_offset))

    def _bind_masks(self, state: DeviceState, tokens: np.ndarray, mask: np.ndarray | None) -> np.ndarray | None:
        """Bind the step graph's ``attention_mask`` (the state's key mask, this step's columns
        appended) and ``position_offset``, where it takes them; return the key mask."""
        key_mask = state.key_mask
        if key_mask is not None:
            new = np.ones(tokens.shape, np.int64) if mask is None else mask.astype(np.int64)
            key_mask = np.ascontiguousarray(np.concatenate([key_mask, new], 1))
        if self.takes_masks:  # bound every step: a binding outlives the search that made it
            self.binding.bind_cpu_input("attention_mask", NO_PADDING[0] if key_mask is None else key_mask)
            self.binding.bind_cpu_input("position_offset", NO_PADDING[1] if key_mask is None else state.position_offset)
        return key_mask

    def cache_length(self, length: int) -> int:
        """Columns of a cache of ``length`` positions: the standard step graph appends, so no more."""
        return length

    def select(self, state: DeviceState, rows: np.ndarray, cross: bool) -> DeviceState:
        """Pasts: only the row map changes (the next step gathers them). Per-source values
        keep one row per source: when rows change sources (``cross``), the sources still
        read are gathered now, on the device, in the order of the rows' runs."""
        rows = np.ascontiguousarray(rows, np.int64)
        values, sources = state.values, state.sources[rows]
        if cross and self.shared:
            first = np.flatnonzero(np.r_[True, sources[1:] != sources[:-1]])  # where each run starts
            if len(set(np.diff(np.r_[first, len(sources)]))) > 1:
                first = np.arange(len(sources))  # runs of unequal length: one row of values per row
            kept = sources[first]
            if not np.array_equal(kept, np.arange(state.sources[-1] + 1)):
                values = values | self._take({n: values[n] for n in self.shared}, kept)
            sources = np.repeat(np.arange(len(first)), len(sources) // len(first))
        masks = (None if m is None else np.ascontiguousarray(m[rows]) for m in (state.key_mask, state.position_offset))
        return DeviceState(values, np.ascontiguousarray(state.rows[rows]), sources, state.offset, *masks)

    def _take(self, values: dict, rows: np.ndarray) -> dict:
        """``values``' rows ``rows``, gathered on the device by a graph of Gathers."""
        return self._apply("rows", lambda: _gather_graph(list(values), self.inputs, self.dtype), ("rows", rows),
                           values)

    def _apply(self, kind: str, graph, control: tuple[str, np.ndarray], values: dict) -> dict:
        """``values`` (name -> OrtValue) through the small graph ``graph()`` (made once per
        ``kind`` and names), which takes the int64 input ``control`` (name, value) and gives
        ``<name>.<kind>`` for each, left on the device."""
        key = kind, tuple(values)
        if key not in self._helpers:
            session = self.model.session(graph())
            self._helpers[key] = session, session.io_binding()
        session, b = self._helpers[key]
        b.bind_cpu_input(control[0], np.ascontiguousarray(control[1], np.int64))
        for name, value in values.items():
            b.bind_ortvalue_input(name, value)
        b.clear_binding_outputs()
        for name in values:
            b.bind_output(f"{name}.{kind}", *self.model.device)
        session.run_with_iobinding(b)
        return dict(zip(values, b.get_outputs()))

    def _k(self, k: int) -> np.ndarray:
        """The ``top_k`` input for ``k``: at least 2 (a caller reads the first k columns), as
        onnxruntime's CPU TopK over a 37,000-word vocabulary took 24 us for k = 1 and 15 us for
        k = 2 (0.7% of a `base` int8 greedy step)."""
        if k not in self._top_k:
            self._top_k[k] = np.array([min(max(k, 2), self.vocab)], np.int64)
        return self._top_k[k]


class _RawBinding:
    """A step's OrtValue inputs, its outputs and the run, through onnxruntime's C-level binding
    (``IOBinding._iobinding``, ``InferenceSession._sess``). The Python wrappers check every
    value's session and device on each call and wrap every output: at batch 1 that was ~40% of
    the host time of a step (~50 us of `small`'s 0.13 ms)."""

    def __init__(self, session, binding, device: tuple[str, int]):
        import onnxruntime as ort

        self.session, self.binding, self.wrap = session._sess, binding._iobinding, ort.OrtValue
        self.cpu = ort.OrtDevice.make("cpu", 0)._get_c_device()
        self.device = ort.OrtDevice.make(*device)._get_c_device()

    def run(self, values: dict, host: list[str], device: list[str],
            written: dict | None = None) -> tuple[list[np.ndarray], list]:
        """Bind ``values`` (name -> OrtValue), run, return the ``host`` outputs as arrays and
        the ``device`` outputs as OrtValues on the device; ``written`` (output name ->
        OrtValue): outputs written into those values (the in-place cache's buffers)."""
        b = self.binding
        for name, value in values.items():
            b.bind_ortvalue_input(name, value._ortvalue)
        b.clear_binding_outputs()  # fresh outputs: ORT must not write into last step's presents
        for name in host:
            b.bind_output(name, self.cpu)
        for name in device:
            b.bind_output(name, self.device)
        for name, value in (written or {}).items():
            b.bind_ortvalue_output(name, value._ortvalue)
        self.session.run_with_iobinding(b, None)
        results = b.get_outputs()
        return ([results[i].numpy() for i in range(len(host))],
                [self.wrap(results[i]) for i in range(len(host), len(host) + len(device))])


def _gather_graph(names: list[str], inputs: dict, dtype: np.dtype) -> bytes:
    """An ONNX graph: ``rows`` (int64, n) and each tensor ``name`` -> ``name.rows``, its rows."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rank = {name: len(inputs[name].shape) for name in names}
    graph = helper.make_graph(
        [helper.make_node("Gather", [name, "rows"], [f"{name}.rows"], axis=0) for name in names], "rows",
        [helper.make_tensor_value_info("rows", TensorProto.INT64, ["n"])]
        + [helper.make_tensor_value_info(name, elem, [None] * rank[name]) for name in names],
        [helper.make_tensor_value_info(f"{name}.rows", elem, [None] * rank[name]) for name in names])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
