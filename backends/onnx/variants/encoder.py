"""``encoder.onnx``: ``src`` and ``attention_mask`` -> ``memory``, ``memory_bias`` (the source
padding as an additive mask) and ``cross.<node>.key/value`` for every cross-attention layer of
the decoder, computed once per source for the step graphs to read."""

from __future__ import annotations

from ..lower.projection import project_kv
from . import Variant, register


@register
class Encoder(Variant):
    name, order = "encoder", 1

    @classmethod
    def written(cls, graph, asked) -> bool:
        return "src" in graph.ports

    def ports(self, graph):
        ports = graph.ports
        fed = {ports["src"]} | ({ports["segments"]} if "segments" in ports else set())
        return fed, [ports[p] for p in ("memory", "pooled", "log_probs") if p in ports]

    def outputs(self, e, env: dict) -> None:
        b, graph = e.b, e.graph
        d, memory = graph.spec.d_model, env[graph.ports["memory"]]
        b.output("memory", b.sequence(memory, d), ["batch", "src_len", d])
        b.output("memory_bias", e.key_bias("S"), ["batch", 1, 1, "src_len"])
        for node in graph.nodes():
            if node.op == "attention" and node.layer.needs_memory:
                b.scope = node.name
                for role, value, size in zip(("key", "value"), project_kv(b, node, memory),
                                             (node.attrs["d_k"], node.attrs["d_v"])):
                    b.output(f"cross.{node.name}.{role}", value, ["batch", node.attrs["kv_heads"], "src_len", size])
        if "pooled" in graph.ports:
            b.output("pooled", env[graph.ports["pooled"]], ["batch", d])
