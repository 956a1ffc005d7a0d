"""Emitting ONNX graphs straight from the IR: no tracing, every axis named and dynamic.

``emit(graph, kind)`` runs the lowerings (``lower/``) over the nodes a graph variant
(``variants/``: ``model``, ``encoder``, the ``decoder`` steps, ``genai``) needs, in one ``Emit``
that holds what the graph's lowerings share: padding masks, positions, masks built once, and
the variant, which they ask how state, positions and outputs work. Tensor names are the
runtime's contract; each variant's module docstring lists its own.
"""

from __future__ import annotations

import numpy as np
import onnx

from tfspec.errors import TfspecError
from tfspec.ir import Graph

from .builder import Builder, Index
from .lower import lowerings
from .lower.frames import frames_input
from .lower.patches import pixels_input
from .variants import Variant, variant


class Emit:
    """One graph being emitted: what lowerings ask of it beyond the builder."""

    def __init__(self, graph: Graph, variant: Variant, b: Builder):
        self.graph, self.variant, self.b = graph, variant, b
        self.pads: dict[str, str] = {}
        """Sequence symbol -> bool (B, L), True at padding (absent in step graphs' targets)."""
        self.bias: dict[str, str] = {}
        self._cache: dict = {}
        self.key_pads: dict[str, str] = {}
        """Sequence symbol -> bool (B, total), True at padded keys of a step graph's cache."""
        self.shift: str | None = None
        """int64 (B,): subtracted from a step graph's target positions (``position_offset``)."""
        self.rows: dict[str, str] = {}
        """Sequence symbol -> int64 (B, L) positions of each row, read from a full-sequence or
        encoder graph's mask (``variants.padding``)."""
        self.lengths: dict[str, str] = {}
        """Sequence symbol -> int64 scalar length, read from its token input (a flat view of a
        sequence no longer shows it)."""

    def padding(self, seq: str) -> str | None:
        return self.pads.get(seq)

    # What the variant decides (``variants.Variant``), asked by the lowerings.

    def carries(self, node) -> bool:
        return self.variant.carries(node)

    def state(self, node, role: str, shape) -> str:
        return self.variant.state(self, node, role, shape)

    def per_source(self, name: str, shape) -> str:
        return self.variant.per_source(self, name, shape)

    def present(self, node, role: str, value: str, shape) -> str:
        return self.variant.present(self, node, role, value, shape)

    def positions(self, seq: str, x: str | None) -> str:
        return self.variant.positions(self, seq, x)

    def offset(self) -> str:
        return self.variant.offset(self)

    # Masks and position grids, built once per graph and shared by the layers that ask.

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
            if self.variant.preallocated and q_seq == kv_seq:  # slots not yet written hold stale values
                visible = cols <= rows if visible is None else visible & (cols <= rows)
            if visible is not None:
                visible = b.op("Where", visible.name, b.const(0.0), b.neg())  # (Lq, Lk)
                bias = visible if bias is None else b.op("Add", bias, visible)
            self._cache[key] = bias
        return self._cache[key]

    def grid(self, q_seq: str, kv_seq: str, q: str, k: str) -> tuple[str, str]:
        """int64 positions of the queries (Lq, 1) and keys (1, Lk) of (B, h, L, d) ``q`` and
        ``k``: self-attention queries are the last Lq of the Lk positions in step graphs, and
        those from ``offset`` among every slot of a preallocated cache."""
        def build():
            b = self.b
            if self.variant.preallocated and q_seq == kv_seq:
                return (b.op("Unsqueeze", self.positions(q_seq, None), b.ints(1)),
                        b.op("Unsqueeze", self.slots(k), b.ints(0)))
            lq, lk = b.shape_of(q, 2), b.shape_of(k, 2)
            first = b.op("Sub", lk, lq) if q_seq == kv_seq else b.const(np.int64(0))
            one = b.const(np.int64(1))
            return (b.op("Unsqueeze", b.op("Range", first, b.op("Add", first, lq), one), b.ints(1)),
                    b.op("Unsqueeze", b.op("Range", b.const(np.int64(0)), lk, one), b.ints(0)))
        return self.cached(("grid", q_seq, kv_seq, q, k), build)

    def slots(self, cache: str) -> str:
        """int64 (max_len,) 0..max_len-1 for a (B, g, max_len, d) preallocated ``cache``, made on
        the device (Range from a shape)."""
        return self.cached("cols", lambda: self.b.op("Range", self.b.const(np.int64(0)), self.b.shape_of(cache, 2),
                                                     self.b.const(np.int64(1))))

    def cached(self, key, build):
        """Nodes built once per graph (a rotation table) and shared by the layers that ask."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]


def emit(graph: Graph, kind: str | Variant, weights: dict[str, np.ndarray], opset: int = 18,
         dtype: str = "float32", metadata: dict[str, str] | None = None, quant=None, sink=None) -> onnx.ModelProto:
    """The ONNX graph of variant ``kind`` (a name in ``variants/``, or a variant that takes
    arguments: ``variants.hub.HubEncoder(task)``) of ``graph`` with ``weights`` (IR parameter
    name -> array, or a mapping that reads them lazily), quantised with ``quant``
    (``passes.int4.Int4``), its initializers written to ``sink`` (``external.ExternalData``)."""
    v = kind if isinstance(kind, Variant) else variant(kind)()
    if not v.emitted:
        raise TfspecError(f"{v.name}.onnx is composed from emitted graphs, not emitted from the IR")
    b = Builder(f"{graph.name}.{v.name}", opset, dtype, weights, quant, sink)
    e = Emit(graph, v, b)
    v.declare(e)
    fed, targets = v.ports(graph)
    needed = graph.needed(fed, targets)
    env: dict[str, str | None] = {}
    batches: dict[str, str] = {}  # stack -> its batch size: a tower's images need not be as many as the texts
    for node in graph.nodes():
        if node.name not in needed:
            continue
        b.scope = node.name
        b.batch = batches.get(node.stack, batches.get("", b.batch))
        if node.op == "input":
            env[node.name] = (b.input(node.name, node.attrs["dims"]) if "dims" in node.attrs  # named axes, no mask
                              else pixels_input(e, node) if node.attrs.get("pixels") else frames_input(e, node)
                              if node.attrs["dtype"] == "float32" else v.tokens(e, node))
            if node.stack in graph.towers:  # tfspec.ir.build.build_tower
                batches.setdefault("", b.batch)
                batches[node.stack] = b.batch = b.op("Shape", env[node.name], start=0, end=1)
        elif node.name in fed:  # computed by another graph: read through that graph's outputs
            env[node.name] = None
            v.fed(e, node)
        else:
            env[node.name] = lower(e, node, env)
    b.scope = "outputs"
    v.outputs(e, env)
    return b.model(metadata or {})


def lower(e: Emit, node, env: dict[str, str | None]) -> str:
    """Emit ``node`` from its inputs' values in ``env``, each in the layout its lowering takes."""
    known = lowerings()
    if node.op not in known:
        raise TfspecError(f"{e.graph.name}: no ONNX lowering of IR op {node.op!r} ({node.name}); add one in "
                          "backends/onnx/lower/ (docs/extending.md)")
    value = known[node.op](e, node, *_layout(e, node, [env[i] for i in node.inputs]))
    if known[node.op].rows and len(node.shape) == 3:
        e.b.flat.add(value)
    return value


def _layout(e: Emit, node, values: list[str | None]) -> list[str | None]:
    """``node``'s inputs in the layout its lowering takes (``Lowering.rows``)."""
    view = e.b.rows if lowerings()[node.op].rows else e.b.sequence
    shapes = [e.graph.node(i).shape for i in node.inputs]
    return [v if v is None or not isinstance(s[-1], int) or len(s) != 3 else view(v, s[-1])
            for v, s in zip(values, shapes)]
