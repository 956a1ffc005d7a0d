"""The decoding cache: how many values a decoder keeps per generated token, from the spec alone.

Decoding with a KV cache stores, for every attention layer of the decoder and every position
seen, each key/value head's key (d_k values) and value (d_v values): kv_heads x (d_k + d_v)
per position and layer. That is why grouped-query (Llama 2 70B, Mistral) and multi-query
(PaLM, Gemma 2B) attention exist: the cache, not the weights, bounds batch and context on an
accelerator. A sliding window (Mistral's 4096) caps what a layer keeps; cross-attention keeps
its keys and values once per source position. Latent attention (DeepSeek-V2) caches one
latent and one rotated key part per position, kv_lora_rank + qk_rope_head_dim values, for all
heads. Recurrent and convolution states (a fixed
number of values per sequence) are not part of this count.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfspec.ir import Graph
from tfspec.ir.ops import definition
from tfspec.ir.ops.memory_tokens import widened


@dataclass(frozen=True)
class CachedLayer:
    """One attention layer's cache."""

    name: str
    per_position: int
    """Values per cached position: kv_heads x (d_k + d_v), or a latent attention's latent and key part."""
    positions: int
    """Positions cached at the report's length: n, a window's kept positions, or m sources."""
    limit: int | None
    """The most positions it ever keeps (a sliding window or another banded kind), else None."""
    source: bool
    """Cross-attention: cached once per source position, not per generated token."""


@dataclass(frozen=True)
class KvCacheReport:
    n: int
    m: int
    layers: tuple[CachedLayer, ...]

    @property
    def per_token(self) -> int:
        """Values the cache grows by per generated token while no window is full."""
        return sum(layer.per_position for layer in self.layers if not layer.source)

    @property
    def at_n(self) -> int:
        """Values cached after n generated tokens (and m source positions)."""
        return sum(layer.per_position * layer.positions for layer in self.layers)

    def to_json(self) -> dict:
        return {"n": self.n, "m": self.m, "values_per_token": self.per_token, "values_at_n": self.at_n,
                "bytes_per_token": {"float16": 2 * self.per_token, "float32": 4 * self.per_token},
                "bytes_at_n": {"float16": 2 * self.at_n, "float32": 4 * self.at_n},
                "windowed_layers": sum(layer.limit is not None for layer in self.layers),
                "cross_attention_layers": sum(layer.source for layer in self.layers)}


def analyze_kv_cache(graph: Graph, n: int, m: int | None = None) -> KvCacheReport:
    """The decoder's attention cache after ``n`` generated tokens and ``m`` (default n) source
    positions; an encoder alone decodes nothing and caches nothing."""
    m = n if m is None else m
    layers, span = [], widened(graph)  # memory tokens: m more keys per layer, cached at the first step
    for node in graph.nodes():
        width = definition(node.op).cached(node)
        if width is None or node.stack != "decoder":
            continue
        layer = node.layer
        source = layer.needs_memory
        limit = None if source or layer.band() is None else layer.kept(2**62)
        kept = layer.kept(n + span.get(node.name, 0))
        layers.append(CachedLayer(node.name, width, m if source else kept, limit, source))
    return KvCacheReport(n, m, tuple(layers))
