"""``encoder.onnx``: ``src`` and ``attention_mask`` (or a spectrogram's ``input_features``,
Whisper's, which has no padding) -> ``memory``, ``memory_bias`` (the source padding as an
additive mask; zeros without padding) and ``cross.<node>.key/value`` for every cross-attention
layer of the decoder, computed once per source for the step graphs to read."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from ..lower.projection import project_kv
from . import Variant, register

SOURCES = ("src", "input_features", "pixel_values")
"""The ports an encoder reads its source from: token ids, a spectrogram (``tfspec.spec.audio``), or
pixels under a text decoder (``tfspec.spec.image_encoder``)."""


def source(graph) -> str | None:
    """The port ``graph``'s encoder reads, or None (no encoder, or one fed frames or pixels alone,
    with no decoder after it)."""
    return next((port for port in SOURCES if port in graph.ports and (port != "pixel_values" or "tgt" in graph.ports)),
                None)


@register
class Encoder(Variant):
    name, order = "encoder", 1

    @classmethod
    def written(cls, graph, asked) -> bool:
        return source(graph) is not None

    def ports(self, graph):
        ports = graph.ports
        fed = {ports[source(graph)]} | ({ports["segments"]} if "segments" in ports else set())
        return fed, [ports[p] for p in ("memory", "pooled", "log_probs") if p in ports]

    def outputs(self, e, env: dict) -> None:
        b, graph = e.b, e.graph
        d, memory = graph.node(graph.ports["memory"]).shape[-1], env[graph.ports["memory"]]
        viewed = b.sequence(memory, d)
        named = b.output("memory", viewed, ["batch", "src_len", d])
        memory = named if viewed == memory else memory  # renamed where it was made (a projection's output)
        b.output("memory_bias", e.key_bias("S") or no_bias(b, b.sequence(memory, d)), ["batch", 1, 1, "src_len"])
        for node in graph.nodes():
            if node.op == "attention" and node.layer.needs_memory:
                b.scope = node.name
                for role, value, size in zip(("key", "value"), project_kv(b, node, memory),
                                             (node.attrs["d_k"], node.attrs["d_v"])):
                    b.output(f"cross.{node.name}.{role}", value, ["batch", node.attrs["kv_heads"], "src_len", size])
        if "pooled" in graph.ports:
            b.output("pooled", env[graph.ports["pooled"]], ["batch", d])


def no_bias(b, memory: str) -> str:
    """Zeros (B, 1, 1, S) for a source without padding, shaped by ``memory`` (B, S, d)."""
    shape = b.op("Concat", b.op("Shape", memory, start=0, end=1), b.ints(1, 1), b.op("Shape", memory, start=1, end=2),
                 axis=0)
    return b.op("ConstantOfShape", shape, value=numpy_helper.from_array(np.zeros(1, b.np_dtype)))
