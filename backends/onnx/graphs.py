"""Emitting ONNX graphs straight from the IR: no tracing, every axis named and dynamic.

Three kinds of graph serve inference (tensor names are the runtime's contract):

``model``    full sequences: ``src`` and/or ``tgt`` (batch, len) -> ``logits``; for scoring.
             Each token input comes with its mask, int64 (batch, len), 1 at real tokens (as
             transformers and optimum name them: ``attention_mask`` for ``src``, or for a
             decoder-only model's ``tgt``; ``decoder_attention_mask`` for an encoder-decoder's
             ``tgt``): padding is what the mask says, never a token id. Where a row starts with
             padding, each row counts positions among its real tokens (``TorchModel.run``).
``encoder``  ``src`` and ``attention_mask`` -> ``memory``, ``memory_bias`` (the source padding
             as an additive mask) and ``cross.<node>.key/value`` for every cross-attention
             layer of the decoder.
``decoder``  one decoding step: ``tgt`` (batch, new_len) new tokens plus the past each decoder
             layer carries (``past.<node>.key/value`` for attention, kv_heads heads wide,
             ``.window`` for causal convolutions, ``.h``/``.c`` for recurrent layers;
             zero-length or zeros at step 0)
             -> ``log_probs`` of the next token, its ``top_values``/``top_ids`` (``top_k``
             asked for) and ``present.<node>.*``. Positions continue from the past length.
             ``beam_rows`` (batch,) says which row of the pasts each row continues: beam
             search reorders the state inside the graph. ``cross.*`` and ``memory_bias``
             have one row per source (``src_batch``); the batch's rows come in equal groups,
             one per source, in order (a sentence's hypotheses), which share its rows.
             Decoder-only models' step graphs whose padding masks alone hide
             (``Graph.masks_padding``) also take ``attention_mask`` (batch, total_len), 0 at
             padded keys, and ``position_offset`` (batch,), subtracted from each row's positions:
             a batch of prompts of different lengths, left-padded, decodes in one batch
             (without padding: ones and zeros, which broadcast from (1, 1) and (1,)).
``decoder_static``  the same step over shapes that stay fixed from step to step, so onnxruntime
             can capture it as a CUDA graph: each self-attention past is a preallocated
             ``max_len`` cache into which the step writes its keys/values at ``offset`` (1,)
             (later slots masked), and the per-source inputs keep one row per source, picked
             by ``cross_rows`` (batch,). Every value the step computes with derives from
             inputs or constants on the device, never from a shape read on the host (that
             would need a copy, which capture forbids). Outputs: ``top_values``/``top_ids``
             and the presents.
``decoder_shortlist``  the ``decoder`` step whose output projection and softmax cover only
             ``candidates`` (n,), int64 target ids (a target-vocabulary shortlist,
             ``tfspec.shortlist``): the projection's rows are gathered by them, ``log_probs``
             is (batch, n) over them and ``top_ids`` are mapped back to vocabulary ids.
``decoder_inplace``  the ``decoder`` step whose self-attention caches are ``max_len`` buffers
             that onnxruntime's ``GroupQueryAttention`` extends in place (``inplace``): the
             runtime binds each ``present.*`` to its ``past.*``, so no step copies the cache.
             Positions start at ``offset`` (1,); no ``beam_rows`` (the runtime reorders rows
             between steps). onnxruntime only (``export --fused``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from tfspec.ir import Graph
from tfspec.registry import discover

from .builder import Builder, Index
from .frames import frames_input
from .inplace import NotInPlace
from .lowerings import LOWERINGS
from .projection import project_kv

KINDS = ("model", "encoder", "decoder", "decoder_static", "decoder_shortlist", "decoder_inplace")


class Emit:
    """One graph being emitted: what lowerings ask of it beyond the builder."""

    def __init__(self, graph: Graph, kind: str, b: Builder, static: bool = False, inplace: bool = False):
        self.graph, self.kind, self.b, self.static, self.inplace = graph, kind, b, static, inplace
        self.pads: dict[str, str] = {}
        """Sequence symbol -> bool (B, L), True at padding (absent in step graphs' targets)."""
        self.bias: dict[str, str] = {}
        self._cache: dict = {}
        self._offset: str | None = None
        self.key_pads: dict[str, str] = {}
        """Sequence symbol -> bool (B, total), True at padded keys of a step graph's cache."""
        self.shift: str | None = None
        """int64 (B,) or (1,): subtracted from a step graph's target positions (``position_offset``)."""
        self.rows: dict[str, str] = {}
        """Sequence symbol -> int64 (B, L) positions of each row, read from a full-sequence or
        encoder graph's mask (``_padding``)."""
        self.lengths: dict[str, str] = {}
        """Sequence symbol -> int64 scalar length, read from its token input (a flat view of a
        sequence no longer shows it)."""
        self.shortlist: str | None = None
        """int64 (n,): the ``candidates`` input of the shortlist step graph."""

    def padding(self, seq: str) -> str | None:
        return self.pads.get(seq)

    def carries(self, node) -> bool:
        """Whether ``node`` carries state from one step to the next in this graph."""
        return self.kind == "step" and node.stack == "decoder"

    def state(self, node, role: str, shape, prefix: str = "past") -> str:
        """The step graph's input ``prefix.<node>.<role>`` (``shape`` batch first). Pasts are
        gathered first by ``beam_rows``, the row of the past each row continues: beam search
        then reorders them where they live instead of copying them to the host."""
        name = f"{prefix}.{node.name}.{role}"
        if prefix != "past":
            return self.per_source(name, shape)
        if self.inplace:  # a buffer extended in place: only GroupQueryAttention's (``inplace``)
            if shape[2] != "max_len":
                raise NotInPlace(f"{node.name} carries state GroupQueryAttention does not hold")
            return self.cached(("past", name), lambda: self.b.input(name, shape))

        def gathered():
            rows = self.cached("beam_rows", lambda: self.b.input("beam_rows", ["batch"], TensorProto.INT64))
            return self.b.op("Gather", self.b.input(name, ["past_batch", *shape[1:]]), rows, axis=0)
        return self.cached(("past", name), gathered)

    def per_source(self, name: str, shape) -> str:
        """Input ``name`` the encoder computed per source (cross keys/values, ``memory_bias``);
        static graphs take one row per source and gather each row's by ``cross_rows``."""
        if not self.static:
            return self.cached(("input", name), lambda: self.b.input(name, shape))

        def gathered():
            rows = self.cached("cross_rows", lambda: self.b.input("cross_rows", ["batch"], TensorProto.INT64))
            return self.b.op("Gather", self.b.input(name, shape), rows, axis=0)
        return self.cached(("input", name), gathered)

    def write(self, node, role: str, new: str, size: int) -> str:
        """Static graphs: the cache ``past.<node>.<role>`` (B, g, max_len, size) with the
        new keys/values (B, g, L, size) written at slots offset..offset+L-1."""
        past = self.state(node, role, ["batch", node.attrs["kv_heads"], "max_len", size])
        inside, index = self.cached("slots", lambda: self._slots(past))
        return self.b.op("Where", inside, self.b.op("Gather", new, index, axis=2), past)

    def _slots(self, past: str) -> tuple[str, str]:
        """Where this step writes in a (B, g, max_len, d) cache: (1, 1, max_len, 1) True at
        the new positions, and for every slot the new position it takes (clamped)."""
        b, offset = self.b, self.offset()
        last = b.op("Slice", self.positions("T", None), b.ints(-1), b.ints(2**62))  # (1,): the last new position
        cols = self.slots(past)
        inside = b.op("And", b.op("GreaterOrEqual", cols, offset), b.op("LessOrEqual", cols, last))
        index = b.op("Min", b.op("Max", b.op("Sub", cols, offset), b.const(np.int64(0))), b.op("Sub", last, offset))
        return b.op("Unsqueeze", inside, b.ints(0, 1, 3)), index

    def slots(self, cache: str) -> str:
        """Static graphs: int64 (max_len,) 0..max_len-1 for a (B, g, max_len, d) ``cache``, made
        on the device (Range from a shape)."""
        return self.cached("cols", lambda: self.b.op("Range", self.b.const(np.int64(0)), self.b.shape_of(cache, 2),
                                                     self.b.const(np.int64(1))))

    def shortlisted(self, x: str, weight: str, bias: str | None) -> str:
        """Logits (B, n) of the shortlist's candidates only: x W[candidates]^T + b[candidates],
        the (vocab, d) matrix's rows gathered per batch (a step then reads n rows, not vocab)."""
        b, ids = self.b, self.shortlist
        rows = b.op("Gather", b.param(weight), ids, axis=0)
        y = b.op("Gemm", x, rows, None if bias is None else b.op("Gather", b.param(bias), ids, axis=0), transB=1)
        b.flat.add(y)
        return y

    def present(self, node, role: str, value: str, shape) -> str:
        """Expose ``value`` as the state ``node`` passes to the next step; use the returned name."""
        return self.b.output(f"present.{node.name}.{role}", value, shape)

    def positions(self, seq: str, x: str) -> str:
        """int64 (L,) positions of the L vectors of ``x``: they follow the past in step graphs;
        (B, L) per row where a mask gave them (``rows``, ``row_positions``)."""
        if seq in self.rows:
            return self.rows[seq]
        length = self.lengths.get(seq) or self.b.shape_of(x, 1)
        if (self.static or self.inplace) and seq == "T":  # offset (1,) on the device, added to a Range
            positions = self.cached("positions", lambda: self.b.op("Add", self.offset(), self.b.op(
                "Range", self.b.const(np.int64(0)), length, self.b.const(np.int64(1)))))
        else:
            start = self.offset() if self.kind == "step" and seq == "T" else self.b.const(np.int64(0))
            positions = self.b.op("Range", start, self.b.op("Add", start, length), self.b.const(np.int64(1)))
        if self.shift is None or seq != "T":
            return positions
        return self.cached("row_positions", lambda: self.b.op("Max", self.b.op(  # (B, L): each row's own
            "Sub", self.b.op("Unsqueeze", positions, self.b.ints(0)), self.b.op("Unsqueeze", self.shift, self.b.ints(1))),
            self.b.const(np.int64(0))))

    def offset(self) -> str:
        """Target positions already decoded: the past length of the first self-attention that
        keeps every past key (an ``offset`` input for decoders without one: banded kinds keep
        only their band)."""
        if self._offset is None and (self.static or self.inplace):
            self._offset = self.b.input("offset", [1], TensorProto.INT64)
        if self._offset is None:
            attn = next((n for n in self.graph.nodes() if n.stack == "decoder" and n.op == "attention"
                         and not n.layer.needs_memory and n.layer.band() is None), None)
            if attn is None:
                self._offset = self.b.input("offset", [], TensorProto.INT64)
            else:
                past = self.state(attn, "key", ["batch", attn.attrs["kv_heads"], "past_len", attn.attrs["d_k"]])
                self._offset = self.b.shape_of(past, 2)
        return self._offset

    def key_bias(self, seq: str) -> str | None:
        """Additive (B, 1, 1, L) mask: a large negative value at padded keys."""
        pads = self.pads.get(seq) or self.key_pads.get(seq)
        if seq not in self.bias and pads is not None:
            b = self.b
            self.bias[seq] = b.op("Unsqueeze", b.op("Where", pads, b.neg(), b.const(0.0)), b.ints(1, 2))
        return self.bias.get(seq)

    def mask(self, layer, q_seq: str, kv_seq: str, q: str, k: str) -> str | None:
        """The kind's visibility plus key padding, as one additive mask shared by all layers
        of the kind; None when every key is visible."""
        key = (layer, q_seq, kv_seq)
        if key not in self._cache:
            b, bias = self.b, self.key_bias(kv_seq)
            if bias is not None and kv_seq in self.key_pads and layer.band() is not None:  # keys it kept
                bias = b.op("Slice", bias, b.op("Unsqueeze", b.op("Neg", b.shape_of(k, 2)), b.ints(0)),
                            b.ints(2**62), b.ints(3))
            rows, cols = (Index(b, t) for t in self.grid(q_seq, kv_seq, q, k))
            visible = layer.visible(rows, cols)
            if self.static and q_seq == kv_seq:  # slots not yet written hold stale values
                visible = cols <= rows if visible is None else visible & (cols <= rows)
            if visible is not None:
                visible = b.op("Where", visible.name, b.const(0.0), b.neg())  # (Lq, Lk)
                bias = visible if bias is None else b.op("Add", bias, visible)
            self._cache[key] = bias
        return self._cache[key]

    def grid(self, q_seq: str, kv_seq: str, q: str, k: str) -> tuple[str, str]:
        """int64 positions of the queries (Lq, 1) and keys (1, Lk) of (B, h, L, d) ``q`` and
        ``k``: self-attention queries are the last Lq of the Lk positions in step graphs, and
        those from ``offset`` among every slot of the cache in static ones."""
        def build():
            b = self.b
            if self.static and q_seq == kv_seq:
                return (b.op("Unsqueeze", self.positions(q_seq, None), b.ints(1)),
                        b.op("Unsqueeze", self.slots(k), b.ints(0)))
            lq, lk = b.shape_of(q, 2), b.shape_of(k, 2)
            first = b.op("Sub", lk, lq) if q_seq == kv_seq else b.const(np.int64(0))
            one = b.const(np.int64(1))
            return (b.op("Unsqueeze", b.op("Range", first, b.op("Add", first, lq), one), b.ints(1)),
                    b.op("Unsqueeze", b.op("Range", b.const(np.int64(0)), lk, one), b.ints(0)))
        return self.cached(("grid", q_seq, kv_seq, q, k), build)

    def cached(self, key, build):
        """Nodes built once per graph (a rotation table) and shared by the layers that ask."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]


def emit(graph: Graph, kind: str, weights: dict[str, np.ndarray], opset: int = 18,
         dtype: str = "float32", metadata: dict[str, str] | None = None, quant=None, sink=None) -> onnx.ModelProto:
    """The ONNX graph ``kind`` (see the module docstring) of ``graph`` with ``weights``
    (IR parameter name -> array, or a mapping that reads them lazily), quantised with
    ``quant`` (``int4.Int4``), its initializers written to ``sink`` (``external.ExternalData``)."""
    discover(__package__)  # every module of the backend registers its lowerings: a new op is one file
    ports, b = graph.ports, Builder(f"{graph.name}.{kind}", opset, dtype, weights, quant, sink)
    static, shortlist, inplace = (kind == f"decoder_{k}" for k in ("static", "shortlist", "inplace"))
    if static or shortlist or inplace:
        kind = "decoder"
    e = Emit(graph, "step" if kind == "decoder" else kind, b, static, inplace)
    if shortlist:
        e.shortlist = b.input("candidates", ["candidates"], TensorProto.INT64)
    pooled = [ports["pooled"]] if "pooled" in ports else []
    if kind == "encoder":
        fed, targets = {ports["src"]} | ({ports["segments"]} if "segments" in ports else set()), [ports["memory"]]
    elif kind == "decoder":
        fed, targets = {ports["tgt"]} | ({ports["memory"]} if "memory" in ports else set()), [ports["logits"]]
    else:
        fed, targets = {ports[p] for p in ("src", "tgt", "segments", "frames") if p in ports}, [ports["logits"]]
    if kind != "decoder":
        targets += pooled + ([ports["log_probs"]] if "log_probs" in ports else [])
    needed = graph.needed(fed, targets)
    env: dict[str, str | None] = {}
    for node in graph.nodes():
        if node.name not in needed:
            continue
        b.scope = node.name
        if node.op == "input":
            env[node.name] = _tokens(e, node)
        elif node.name in fed:  # the encoder output, in a step graph: read through cross.* inputs
            env[node.name] = None
            e.bias["S"] = e.per_source("memory_bias", ["src_batch", 1, 1, "src_len"])
        else:
            env[node.name] = lower(e, node, env)
    b.scope = "outputs"
    if kind == "encoder":
        d = graph.spec.d_model
        memory = env[ports["memory"]]
        b.output("memory", b.sequence(memory, d), ["batch", "src_len", d])
        b.output("memory_bias", e.key_bias("S"), ["batch", 1, 1, "src_len"])
        for node in graph.nodes():
            if node.op == "attention" and node.layer.needs_memory:
                b.scope = node.name
                for role, value, size in zip(("key", "value"), project_kv(b, node, memory),
                                             (node.attrs["d_k"], node.attrs["d_v"])):
                    b.output(f"cross.{node.name}.{role}", value, ["batch", node.attrs["kv_heads"], "src_len", size])
    elif kind == "decoder":
        log_probs = b.op("LogSoftmax", env[ports["logits"]], axis=-1)  # (B, vocab): the projection's last rows
        if not static:
            width = "candidates" if shortlist else graph.node(ports["logits"]).attrs["vocab"]
            log_probs = b.output("log_probs", log_probs, ["batch", width])
        values, ids = b.op("TopK", log_probs, b.input("top_k", [1], TensorProto.INT64), axis=-1, outputs=2)
        if shortlist:  # positions among the candidates -> vocabulary ids
            ids = b.op("Gather", e.shortlist, ids, axis=0)
        b.output("top_values", values, ["batch", "k"])
        b.output("top_ids", ids, ["batch", "k"], TensorProto.INT64)
    else:  # (batch, len, vocab), or a task head's (batch, classes) or (batch, src_len, classes)
        names = {"B": "batch", "S": "src_len", "T": "tgt_len"}
        for port in ("logits", "log_probs"):  # log_probs: a CTC head's frame log-probabilities
            if port in ports:
                shape = graph.node(ports[port]).shape
                value = b.sequence(env[ports[port]], shape[-1]) if len(shape) == 3 else env[ports[port]]
                b.output(port, value, [names.get(d, d) for d in shape])
    if pooled and kind != "decoder":
        b.output("pooled", env[ports["pooled"]], ["batch", graph.spec.d_model])
    return b.model(metadata or {})


def _row_inputs(e: Emit) -> None:
    """A step graph's ``attention_mask`` and ``position_offset`` (module docstring). Required
    inputs, not initializers onnxruntime could default: IO binding cannot bind those."""
    b = e.b
    mask = b.input("attention_mask", ["batch", "total_len"], TensorProto.INT64)
    e.key_pads["T"] = b.op("Equal", mask, b.const(np.int64(0)))
    e.shift = b.input("position_offset", ["batch"], TensorProto.INT64)


ROWWISE = {"add", "dropout", "dense", "ffn", "layer_norm", "rms_norm", "attention", "act", "act_state", "projection"}
"""IR ops that treat every position alike (attention reads the sequence through its own
reshapes): they take and give the residual stream's flat (B * L, d) view. Every other op gets
(B, L, d) sequences, so a lowering that knows nothing of flat views never meets one."""


def lower(e: Emit, node, env: dict[str, str | None]) -> str:
    """Emit ``node`` from its inputs' values in ``env``, each in the layout its lowering takes."""
    value = LOWERINGS[node.op](e, node, *_layout(e, node, [env[i] for i in node.inputs]))
    if node.op in ROWWISE and len(node.shape) == 3:
        e.b.flat.add(value)
    return value


def _layout(e: Emit, node, values: list[str | None]) -> list[str | None]:
    """``node``'s inputs in the layout its lowering takes (``ROWWISE``)."""
    view = e.b.rows if node.op in ROWWISE else e.b.sequence
    shapes = [e.graph.node(i).shape for i in node.inputs]
    return [v if v is None or not isinstance(s[-1], int) or len(s) != 3 else view(v, s[-1])
            for v, s in zip(values, shapes)]


def _tokens(e: Emit, node) -> str:
    """Declare a token (or frame) input and, outside step graphs, its padding mask."""
    if node.attrs["dtype"] == "float32":
        return frames_input(e, node)
    b, seq = e.b, node.shape[1]
    length = "new_len" if e.kind == "step" else {"S": "src_len", "T": "tgt_len"}[seq]
    tokens = b.input(node.name, ["batch", length], TensorProto.INT64)
    if seq not in e.lengths:
        e.lengths[seq] = b.shape_of(tokens, 1)
    decoder_only = e.graph.spec.family == "decoder-only"
    if e.kind == "step" and not e.static and decoder_only and e.graph.masks_padding("decoder"):
        _row_inputs(e)
    if e.kind != "step" and not node.attrs.get("optional"):
        _padding(e, seq, b.input(mask_name(e.graph, node.name), ["batch", length], TensorProto.INT64))
    return tokens


def mask_name(graph: Graph, port: str) -> str:
    """The mask input of token input ``port`` in full-sequence and encoder graphs, named as
    transformers and optimum name them: ``attention_mask`` for the source (or a decoder-only
    model's tokens), ``decoder_attention_mask`` for an encoder-decoder's target."""
    return "decoder_attention_mask" if port == "tgt" and "src" in graph.ports else "attention_mask"


def _padding(e: Emit, seq: str, mask: str) -> None:
    """Padding and positions of ``seq`` from its ``mask`` (B, L), 1 at real tokens, as
    ``TorchModel.run`` reads ``src_mask``/``tgt_mask``: where some row starts with padding
    (prompts of different lengths, left-padded), each row counts positions among its real
    tokens; otherwise positions are the index."""
    b, zero = e.b, e.b.const(np.int64(0))
    e.pads[seq] = b.op("Equal", mask, zero)
    real = b.op("Cast", b.op("Not", e.pads[seq]), to=TensorProto.INT64)
    counted = b.op("Max", b.op("Sub", b.op("CumSum", real, b.const(np.int64(1))), b.const(np.int64(1))), zero)
    index = b.op("Unsqueeze", b.op("Range", zero, e.lengths[seq], b.const(np.int64(1))), b.ints(0))  # (1, L)
    first = b.op("Slice", real, b.ints(0), b.ints(1), b.ints(1))  # (B, 1): whether each row starts real
    e.rows[seq] = b.op("Where", b.op("Equal", b.op("ReduceMin", first, keepdims=0), zero), counted, index)
