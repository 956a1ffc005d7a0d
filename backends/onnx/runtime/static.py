"""Decoding over the static step graph (``decoder_static``): fixed shapes, state allocated
once, each step replayed as a CUDA graph where onnxruntime runs on a GPU.

On a GPU a decoding step of onnxruntime costs its node launches, not its kernels (~3 ms per
step of base at batch 1, an order of magnitude above the kernels' time: BENCHMARKS.md). A CUDA
graph replays the whole step with one launch, but only over fixed shapes at fixed addresses.
So every tensor a step reads or writes lives in a buffer made once per shape bucket: rows
(hypotheses) and sources rounded up to powers of two, the cache length doubled when it fills.
Pasts ping-pong between two buffers (a step reads one and writes the other; an output cannot
be written into its own input), and each (bucket, parity) is one captured graph, named by its
``gpu_graph_id``. Rows beyond the live ones continue row 0 and are never read. Per step only
the new tokens, the two row maps and the offset go to the device, and the top-k comes back.

The same code runs without capture on CPU, where it is checked token for token against
``OnnxDecoder`` (tests/test_static.py); on CUDA, ``tools/checks/gpu_check.py`` times it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

import numpy as np
from onnx import TensorProto, helper

from tfspec.errors import TfspecError
from tfspec.padding import implied_mask

FIRST_LENGTH = 64
"""Cache slots a search starts with (doubled whenever a step would pass the end)."""
FIRST_SOURCE = 16
"""Smallest source-length bucket."""


def bucket(n: int, least: int = 1) -> int:
    """The power of two at or above ``n`` (and ``least``)."""
    return max(least, 1 << max(0, int(n) - 1).bit_length())


@dataclass(frozen=True)
class StaticState:
    rows: np.ndarray
    """int64 (n,): the row of the past buffers each hypothesis continues."""
    cross: np.ndarray
    """int64 (n,): each hypothesis's source row in the encoder's buffers."""
    offset: int
    """Target positions decoded so far."""
    pasts: tuple[int, int, int] | None
    """(rows, length, parity) of the buffers holding the pasts; None before the first step."""
    source: tuple[int, int] | None
    """(rows, length) bucket of the encoder's buffers; None for decoder-only models."""


class StaticDecoder:
    """``tfspec.search.Decoder`` over the static step graph (see the module docstring)."""

    def __init__(self, model, capture: bool, first_length: int = FIRST_LENGTH):
        vocab = model.spec.vocab
        self.bos, self.eos, self.pad = vocab.bos_id, vocab.eos_id, vocab.pad_id
        self.eos_ids = vocab.stop_ids
        self.positions = model.spec.positional
        """What bounds a search's length (``Positional.room``)."""
        self.model, self.session, self.capture = model, model.static_session(), capture
        self.first_length = first_length
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.presents = [o.name for o in self.session.get_outputs() if o.name.startswith("present.")]
        self.pasts = [name.replace("present.", "past.", 1) for name in self.presents]
        self.shared = [n for n in self.inputs if n.startswith("cross.") or n == "memory_bias"]
        self.vocab = model.spec.vocab.tgt_size
        self.buffers: dict[tuple, object] = {}
        self.bindings: dict[tuple, tuple] = {}  # step shape -> (binding, run options, top_k)
        self.graph_ids = count(1)  # 0 is onnxruntime's own default
        self._grow = None

    def start(self, src: np.ndarray | None, mask: np.ndarray | None = None) -> StaticState:
        """Encode ``src`` (B, S), ``mask`` (B, S) true at real tokens, into buffers of a bucket's
        shape (the rows and columns added are padding)."""
        if src is None:
            return StaticState(np.zeros(1, np.int64), np.zeros(1, np.int64), 0, None, None)
        batch, length = src.shape
        padded_length = bucket(length, FIRST_SOURCE)
        if (limit := self.model.spec.positional.table_rows) is not None:  # never past the encoder's table
            padded_length = max(length, min(padded_length, limit))
        source = bucket(batch), padded_length
        padded, real = np.full(source, self.pad, np.int64), np.zeros(source, np.int64)
        padded[:batch, :length] = src
        real[:batch, :length] = implied_mask(src, self.pad) if mask is None else mask
        feeds = self.model.feeds("encoder", {"src": padded, "attention_mask": real})
        session = self.model.sessions["encoder"]
        binding = session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        for name in self.shared:
            binding.bind_ortvalue_output(name, self._buffer(("source", name, *source), name, source[0],
                                                            src_len=source[1]))
        session.run_with_iobinding(binding)
        rows = np.arange(batch, dtype=np.int64)
        return StaticState(rows, rows, 0, None, source)

    def select(self, state: StaticState, rows: np.ndarray, cross: bool) -> StaticState:
        """Only the row maps change; the next step gathers the rows it reads."""
        return StaticState(state.rows[rows], state.cross[rows], state.offset, state.pasts, state.source)

    def step(self, state: StaticState, tokens: np.ndarray, k: int):
        n, new = tokens.shape
        rows, length = bucket(n), state.offset + new
        if state.pasts is None:
            before = (rows, bucket(length, self.first_length), 0)
        else:
            before = state.pasts
            if length > before[1]:
                before = self._grown(before, bucket(length))
        after = (rows, before[1], 1 - before[2])
        k = min(k, self.vocab)
        key = (before, after, k, state.source, new)
        binding, options = self._binding(key, replay=self.capture and new == 1 and before[0] == rows)
        self._set("tgt", (rows, new), tokens, self.pad)
        self._set("beam_rows", (rows,), state.rows, 0)
        if "cross_rows" in self.inputs:
            self._set("cross_rows", (rows,), state.cross, 0)
        self._set("offset", (1,), np.array([state.offset]), 0)
        self._run(binding, options)
        values, ids = (self.buffers[("out", name, rows, k)].numpy()[:n] for name in ("top_values", "top_ids"))
        return values, ids, StaticState(np.arange(n, dtype=np.int64), state.cross, length, after, state.source)

    def _run(self, binding, options) -> None:
        try:
            self.session.run_with_iobinding(binding, options)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
            if not self.capture:
                raise
            raise TfspecError(f"onnxruntime failed to capture or replay a CUDA graph of the static step "
                              f"({str(e).strip().splitlines()[0][:200]}); decode without them "
                              "(`tfspec translate --no-cuda-graphs`, `OnnxModel(..., cuda_graphs=False)`)") from e

    def _binding(self, key: tuple, replay: bool):
        """The IO binding of one step shape, its buffers bound once; with ``replay`` its own
        ``gpu_graph_id`` (captured by onnxruntime on its first runs, then replayed)."""
        if key in self.bindings:
            return self.bindings[key][:2]
        import onnxruntime as ort

        before, after, k, source, new = key
        rows = after[0]
        b = self.session.io_binding()
        b.bind_ortvalue_input("tgt", self._control("tgt", (rows, new)))
        for name, shape in (("beam_rows", (rows,)), ("cross_rows", (rows,)), ("offset", (1,))):
            if name in self.inputs:
                b.bind_ortvalue_input(name, self._control(name, shape))
        top_k = np.array([k], np.int64)  # bound by reference: kept alive with the binding
        b.bind_cpu_input("top_k", top_k)
        for name in self.shared:
            b.bind_ortvalue_input(name, self.buffers[("source", name, *source)])
        for past, present in zip(self.pasts, self.presents):
            b.bind_ortvalue_input(past, self._buffer(("state", past, *before), past, before[0], max_len=before[1]))
            b.bind_ortvalue_output(present, self._buffer(("state", past, *after), past, after[0], max_len=after[1]))
        for name, dtype in (("top_values", self.model.dtype), ("top_ids", np.int64)):
            b.bind_ortvalue_output(name, self._make(("out", name, rows, k), (rows, k), dtype))
        options = ort.RunOptions()
        if self.capture:  # -1: run without capture (shapes met once: prompts, bucket changes)
            options.add_run_config_entry("gpu_graph_id", str(next(self.graph_ids)) if replay else "-1")
        self.bindings[key] = b, options, top_k
        return b, options

    def _set(self, name: str, shape: tuple, values: np.ndarray, fill: int) -> None:
        """Write ``values`` into the control input ``name``, its rows past theirs set to ``fill``."""
        full = np.full(shape, fill, np.int64)
        full[: len(values)] = values
        self._control(name, shape).update_inplace(full)

    def _control(self, name: str, shape: tuple):
        return self._make(("in", name, *shape), shape, np.int64)

    def _buffer(self, key: tuple, name: str, rows: int, **dims: int):
        """The device buffer ``key`` for input ``name``: ``rows`` rows, named axes from ``dims``."""
        shape = [rows] + [dims[d] if isinstance(d, str) else d for d in self.inputs[name].shape[1:]]
        return self._make(key, tuple(shape), self.model.dtype)

    def _make(self, key: tuple, shape: tuple, dtype):
        if key not in self.buffers:
            self.buffers[key] = self.model.on_device(np.zeros(shape, dtype))
        return self.buffers[key]

    def _grown(self, pasts: tuple[int, int, int], length: int) -> tuple[int, int, int]:
        """Copy the pasts into buffers of ``length`` slots (a step would pass the end)."""
        rows, old, parity = pasts
        grown = rows, length, parity
        if self._grow is None:
            session = self.model.session(pad_graph(self.pasts, self.inputs, self.model.dtype))
            self._grow = session, session.io_binding()
        session, b = self._grow
        b.bind_cpu_input("extra", np.array([length - old], np.int64))
        for name in self.pasts:
            b.bind_ortvalue_input(name, self.buffers[("state", name, *pasts)])
            b.bind_ortvalue_output(f"{name}.grown", self._buffer(("state", name, *grown), name, rows, max_len=length))
        session.run_with_iobinding(b)
        return grown


def pad_graph(names: list[str], inputs: dict, dtype: np.dtype) -> bytes:
    """An ONNX graph: each ``name`` -> ``name.grown``, its ``max_len`` axis (the third of
    four) padded at the end by ``extra`` (int64 (1,)) slots; other states are copied."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    ints = lambda name, values: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
    nodes = [ints("before", [0] * 6), ints("after", [0]),
             helper.make_node("Concat", ["before", "extra", "after"], ["pads"], axis=0)]
    for name in names:
        grown = "max_len" in inputs[name].shape
        nodes.append(helper.make_node("Pad" if grown else "Identity", [name, "pads"] if grown else [name],
                                      [f"{name}.grown"]))
    rank = {name: len(inputs[name].shape) for name in names}
    graph = helper.make_graph(
        nodes, "grow", [helper.make_tensor_value_info("extra", TensorProto.INT64, [1])]
        + [helper.make_tensor_value_info(n, elem, [None] * rank[n]) for n in names],
        [helper.make_tensor_value_info(f"{n}.grown", elem, [None] * rank[n]) for n in names])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
