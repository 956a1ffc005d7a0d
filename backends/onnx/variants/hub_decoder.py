"""The decoder of a seq2seq model in Hugging Face's ONNX layout (``hub.py``):
``onnx/decoder_model_merged.onnx``, what optimum's ``ORTModelForSeq2SeqLM`` and transformers.js's
encoder-decoder models run at every step::

    input_ids                           int64 (batch_size, decoder_sequence_length)
    encoder_hidden_states               (batch_size, encoder_sequence_length, d_model): encoder_model.onnx's
    encoder_attention_mask              int64 (batch_size, encoder_sequence_length), 0 at padding
    past_key_values.N.decoder.key       (batch_size, heads, past_decoder_sequence_length, d), value alike
    past_key_values.N.encoder.key       (batch_size, heads, encoder_sequence_length_out, d), value alike
    use_cache_branch                    bool (1,): whether the pasts are real (every call but the first)
    -> logits                           (batch_size, decoder_sequence_length, vocab)
    -> present.N.decoder.key/value      the next call's decoder pasts
    -> present.N.encoder.key/value      the cross-attention keys and values

optimum's "merged" decoder joins its first-step and later-step graphs in one file with an ``If``
on ``use_cache_branch``; here the two differ only in where cross-attention keys and values come
from: projected from ``encoder_hidden_states`` at the first call, the pasts after (the loaders
keep the first call's), so each layer joins its (empty at first) pasts with the projection of
the encoder rows the flag leaves (all at first, none after). The weights are held
once, the self-attention caches grow as the ``decoder`` step graph's, and target positions follow
the past length. Beams are reordered by the loaders (``_reorder_cache``), so there is no
``beam_rows``; each row reads its own row of encoder states.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..lower.projection import project_kv
from .decoder import Decoder

BATCH = "batch_size"
"""optimum's and transformers.js's name of the batch axis: transformers.js sizes the empty pasts
of the first call from the inputs' dimension names, ``batch_size`` its only known one."""


class HubDecoder(Decoder):
    """The merged decoder; not registered (no ``tfspec.json`` lists it): ``hub.export_hub``
    passes an instance to ``graphs.emit``."""

    name, listed, fusable, rows_per_source, every_position = "hub_decoder", False, False, True, True

    def declare(self, e) -> None:
        """The inputs every call feeds, in optimum's order, the token ids first (the builder
        reads the batch size from them)."""
        b, d = e.b, e.graph.spec.d_model
        b.input("input_ids", [BATCH, "decoder_sequence_length"], TensorProto.INT64)
        mask = b.input("encoder_attention_mask", [BATCH, "encoder_sequence_length"], TensorProto.INT64)
        e.pads["S"] = b.op("Equal", mask, b.const(np.int64(0)))  # the cross-attention's key padding
        b.input("encoder_hidden_states", [BATCH, "encoder_sequence_length", d])

    def tokens(self, e, node) -> str:
        e.lengths[node.shape[1]] = e.b.shape_of("input_ids", 1)
        return "input_ids"

    def fed(self, e, node) -> None:
        """The encoder's output comes in as ``encoder_hidden_states``, its padding as
        ``encoder_attention_mask`` (both declared up front)."""

    def state(self, e, node, role: str, shape) -> str:
        name = f"past_key_values.{layer_of(e, node)}.decoder.{role}"
        return e.cached(("past", name), lambda: e.b.input(name, [BATCH, shape[1], "past_decoder_sequence_length",
                                                                 shape[3]]))

    def present(self, e, node, role: str, value: str, shape) -> str:
        return e.b.output(f"present.{layer_of(e, node)}.decoder.{role}", value, [BATCH, *shape[1:]])

    def per_source(self, e, name: str, shape) -> str:
        """Cross-attention keys or values (``cross.<node>.key``) of one layer: the first call's
        projection of the encoder states, or the pasts (module docstring)."""
        node, role = name.removeprefix("cross.").rsplit(".", 1)
        key, value = e.cached(("cross", node), lambda: self._cross(e, e.graph.node(node)))
        return key if role == "key" else value

    def _cross(self, e, node) -> tuple[str, str]:
        """The pasts joined with the keys and values of the encoder rows (``_fresh``): all of
        them at the first call, none after, so a later call projects nothing (no ``If``, whose
        subgraph call costs more per step than the rest of a small decoder's layer)."""
        b, a, i = e.b, node.attrs, layer_of(e, node)
        fresh = project_kv(b, node, e.cached("fresh", lambda: self._fresh(e)))
        joined = []
        for role, new, d in zip(("key", "value"), fresh, ("d_k", "d_v")):
            past = b.input(f"past_key_values.{i}.encoder.{role}", [BATCH, a["kv_heads"], "encoder_sequence_length_out",
                                                                   a[d]])
            joined.append(b.output(f"present.{i}.encoder.{role}", b.op("Concat", past, new, axis=2),
                                   [BATCH, a["kv_heads"], "encoder_sequence_length", a[d]]))
        return tuple(joined)

    def _fresh(self, e) -> str:
        """``encoder_hidden_states`` at the first call (``use_cache_branch`` false: its pasts are
        empty), none of its rows after (the pasts hold their keys and values)."""
        b = e.b
        flag = b.input("use_cache_branch", [1], TensorProto.BOOL)
        rows = b.op("Where", flag, b.ints(0), b.op("Shape", "encoder_hidden_states", start=1, end=2))
        return b.op("Slice", "encoder_hidden_states", b.ints(0), rows, b.ints(1))

    def outputs(self, e, env: dict) -> None:
        vocab = e.graph.node(e.graph.ports["logits"]).attrs["vocab"]
        logits = e.b.sequence(env[e.graph.ports["logits"]], vocab)
        e.b.output("logits", logits, [BATCH, "decoder_sequence_length", vocab])


def layer_of(e, node) -> int:
    """The layer index of decoder attention ``node`` in the names above: its place among the
    decoder's self-attentions, or among its cross-attentions."""
    def number():
        found, seen = {}, {True: 0, False: 0}
        for n in e.graph.nodes():
            if n.op == "attention" and n.stack == "decoder":
                found[n.name], seen[n.layer.needs_memory] = seen[n.layer.needs_memory], seen[n.layer.needs_memory] + 1
        return found
    return e.cached("hub_layers", number)[node.name]
