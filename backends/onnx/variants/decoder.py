"""``decoder.onnx``: one decoding step over a cache that grows.

``tgt`` (batch, new_len) new tokens plus the past each decoder layer carries
(``past.<node>.key/value`` for attention, kv_heads heads wide, ``.window`` for causal
convolutions, ``.h``/``.c`` for recurrent layers; zero-length or zeros at step 0) ->
``log_probs`` of the next token, its ``top_values``/``top_ids`` (``top_k`` asked for) and
``present.<node>.*``. Positions continue from the past length. ``beam_rows`` (batch,) says which
row of the pasts each row continues: beam search reorders the state inside the graph.
``cross.*`` and ``memory_bias`` have one row per source (``src_batch``); the batch's rows come
in equal groups, one per source, in order (a sentence's hypotheses), which share its rows.

Decoder-only models' step graphs whose padding masks alone hide (``Graph.masks_padding``) also
take ``attention_mask`` (batch, total_len), 0 at padded keys, and ``position_offset`` (batch,),
subtracted from each row's positions: a batch of prompts of different lengths, left-padded,
decodes in one batch (without padding: ones and zeros, which broadcast from (1, 1) and (1,)).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tfspec.errors import TfspecError

from . import Variant, register


@register
class Decoder(Variant):
    name, order, step = "decoder", 2, True
    offset_given = False
    """The step's first position comes in as ``offset`` (1,) rather than from a past's length."""
    row_inputs = True
    """Left-padded prompts come in as ``attention_mask`` and ``position_offset``."""

    @classmethod
    def written(cls, graph, asked) -> bool:
        return "tgt" in graph.ports

    def ports(self, graph):
        ports = graph.ports
        return {ports["tgt"]} | ({ports["memory"]} if "memory" in ports else set()), [ports["logits"]]

    def tokens(self, e, node) -> str:
        b = e.b
        tokens = b.input(node.name, ["batch", "new_len"], TensorProto.INT64)
        if node.shape[1] not in e.lengths:
            e.lengths[node.shape[1]] = b.shape_of(tokens, 1)
        if self.row_inputs and e.graph.spec.family == "decoder-only" and e.graph.masks_padding("decoder"):
            mask = b.input("attention_mask", ["batch", "total_len"], TensorProto.INT64)  # required inputs:
            e.key_pads["T"] = b.op("Equal", mask, b.const(np.int64(0)))  # IO binding cannot bind defaults
            e.shift = b.input("position_offset", ["batch"], TensorProto.INT64)
        return tokens

    def carries(self, node) -> bool:
        return node.stack == "decoder"

    def state(self, e, node, role: str, shape) -> str:
        """The input ``past.<node>.<role>``, gathered first by ``beam_rows``, the row of the past
        each row continues: beam search then reorders pasts where they live instead of copying
        them to the host."""
        name, b = f"past.{node.name}.{role}", e.b

        def gathered():
            rows = e.cached("beam_rows", lambda: b.input("beam_rows", ["batch"], TensorProto.INT64))
            return b.op("Gather", b.input(name, ["past_batch", *shape[1:]]), rows, axis=0)
        return e.cached(("past", name), gathered)

    def positions(self, e, seq: str, x: str | None) -> str:
        """Target positions follow the past; (B, L) per row with ``position_offset``."""
        if seq != "T" or seq in e.rows:  # rows: the memory tokens' and the tokens' (``lower/memory_tokens``)
            return super().positions(e, seq, x)
        b = e.b
        length = e.lengths.get(seq) or b.shape_of(x, 1)
        if self.offset_given:  # offset (1,) on the device, added to a Range
            positions = e.cached("positions", lambda: b.op("Add", self.offset(e), b.op(
                "Range", b.const(np.int64(0)), length, b.const(np.int64(1)))))
        else:
            start = self.offset(e)
            positions = b.op("Range", start, b.op("Add", start, length), b.const(np.int64(1)))
        if e.shift is None:
            return positions
        return e.cached("row_positions", lambda: b.op("Max", b.op(  # (B, L): each row's own
            "Sub", b.op("Unsqueeze", positions, b.ints(0)), b.op("Unsqueeze", e.shift, b.ints(1))),
            b.const(np.int64(0))))

    def offset(self, e) -> str:
        """The past length of the first self-attention that keeps every past key (an ``offset``
        input for decoders without one: banded kinds keep only their band), less the memory
        tokens cached with the keys (``memory_tokens`` on the decoder)."""
        def find():
            if self.offset_given:
                return e.b.input("offset", [1], TensorProto.INT64)
            past = self.past_length(e)
            if past is None:
                return e.b.input("offset", [], TensorProto.INT64)
            m = e.graph.spec.decoder.memory_tokens
            if not m:
                return past
            return e.b.op("Max", e.b.op("Sub", past, e.b.const(np.int64(m))), e.b.const(np.int64(0)))
        return e.cached("offset", find)

    def past_length(self, e) -> str | None:
        """int64 scalar: the keys the first self-attention that keeps every past key holds; None
        where none does (banded kinds keep only their band)."""
        attn = next((n for n in e.graph.nodes() if n.stack == "decoder" and n.op == "attention"
                     and not n.layer.needs_memory and n.layer.band() is None), None)
        if attn is None:
            return None
        past = self.state(e, attn, "key", ["batch", attn.attrs["kv_heads"], "past_len", attn.attrs["d_k"]])
        return e.b.shape_of(past, 2)

    def memory_cached(self, e, count: int) -> str:
        """The memory is cached from the first step on (the past is empty only before it): min(past, m).
        A step graph given its offset (a preallocated or in-place cache) or positions of its own
        (onnxruntime-genai's) cannot tell its first step by the past: refused."""
        if self.offset_given or type(self).positions is not Decoder.positions:
            raise TfspecError(f"{self.name}.onnx cannot carry memory tokens (decoder.memory_tokens): its cache or "
                              "positions do not start from an empty past; export without it")
        b = e.b
        return e.cached(("memory_cached", count), lambda: b.op("Unsqueeze", b.op(
            "Min", self.past_length(e), b.const(np.int64(count))), b.ints(0)))

    def cache(self, e, node, k: str, v: str) -> tuple[str, str]:
        """Keys and values of earlier positions, then these; a banded kind never looks further
        back than its band, so it passes on just that."""
        if not self.carries(node):
            return k, v
        b, a = e.b, node.attrs
        g, d_k, d_v = a["kv_heads"], a["d_k"], a["d_v"]
        k = b.op("Concat", self.state(e, node, "key", ["batch", g, "past_len", d_k]), k, axis=2)
        v = b.op("Concat", self.state(e, node, "value", ["batch", g, "past_len", d_v]), v, axis=2)
        band = node.layer.band()
        if band is None:
            return (self.present(e, node, "key", k, ["batch", g, "total_len", d_k]),
                    self.present(e, node, "value", v, ["batch", g, "total_len", d_v]))
        first = dropped(b, node.layer, b.shape_of(k, 2))
        for role, t, size in (("key", k, d_k), ("value", v, d_v)):
            self.present(e, node, role, b.op("Slice", t, first, b.ints(2**62), b.ints(2)), ["batch", g, "kept_len", size])
        return k, v

    def append(self, e, node, role: str, new: str, width: int) -> str:
        if not self.carries(node):
            return new
        joined = e.b.op("Concat", self.state(e, node, role, ["batch", "past_len", width]), new, axis=1)
        return self.present(e, node, role, joined, ["batch", "total_len", width])

    def outputs(self, e, env: dict) -> None:
        b, graph = e.b, e.graph
        log_probs = env[graph.ports["logits"]]  # (B, vocab): the last rows only
        if not graph.spec.outputs_log_probs:  # a softmax mixture's rows are log-probabilities already
            log_probs = b.op("LogSoftmax", log_probs, axis=-1)
        log_probs = self.log_probs(e, log_probs)
        values, ids = b.op("TopK", log_probs, b.input("top_k", [1], TensorProto.INT64), axis=-1, outputs=2)
        b.output("top_values", values, ["batch", "k"])
        b.output("top_ids", self.ids(e, ids), ["batch", "k"], TensorProto.INT64)

    def log_probs(self, e, log_probs: str) -> str:
        """The ``log_probs`` output (batch, vocab)."""
        return e.b.output("log_probs", log_probs, ["batch", e.graph.node(e.graph.ports["logits"]).attrs["vocab"]])

    def ids(self, e, ids: str) -> str:
        """Vocabulary ids of the top candidates' columns."""
        return ids


def dropped(b, layer, total: str) -> str:
    """(1,) int64: how many of ``total`` cached keys a banded kind drops (``Attention.kept``)."""
    behind, period = layer.band()[0], layer.period
    over = b.op("Max", b.op("Sub", total, b.const(np.int64(behind))), b.const(np.int64(0)))
    if period > 1:
        over = b.op("Mul", b.op("Div", over, b.const(np.int64(period))), b.const(np.int64(period)))
    return b.op("Unsqueeze", over, b.ints(0))
