"""A second tower in one graph: a whole spec (the image tower of a dual encoder,
``tfspec.spec.dual``) lowered beside the spec the graph was built from, its ops and parameters
named under ``<tower>.`` and its nodes' ``stack`` the tower's name, so that analyses read its sizes
(``Graph.spec_of``) and the backends lower it as they lower any encoder."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfspec.ir.build import LayerBuilder, _embed, _stack
from tfspec.ir.graph import Graph

SEQ = "V"
"""The tower's sequence symbol: its own length, and no token padding (which is ``S``'s)."""


@dataclass
class TowerBuilder(LayerBuilder):
    """A ``LayerBuilder`` whose ops and parameters are named under ``<tower>.``, whose nodes belong
    to stack ``tower`` with a batch ``N`` of their own; the layer kinds lower through it unchanged
    (they see ``encoder``, the stack of the tower's own spec)."""

    tower: str = "vision"
    ports: dict[str, str] = field(default_factory=dict)
    """The tower's own endpoints (``memory``), apart from the graph's."""

    def op(self, name: str, op: str, inputs: list[str], **kwargs) -> str:
        prefix, share, stack = f"{self.tower}.", self.share, self.stack
        shape = kwargs.pop("shape", None) or ("B", self.seq, self.spec.d_model)
        kwargs["shape"] = ("N", *shape[1:]) if shape[0] == "B" else shape  # N images, apart from the B texts
        if share is not None:  # a shared layer's parameters tie to the owner's, under the prefix too
            self.share = (prefix + share[0], prefix + share[1])
        self.stack = self.tower
        try:
            return super().op(name if op == "input" else prefix + name, op, inputs, **kwargs)  # pixel_values
        finally:
            self.share, self.stack = share, stack

    def stack_param(self, name: str, role: str, shape: tuple[int, ...], init: str):
        owner = self.per_stack.setdefault(role, f"{self.tower}.{name}.{role}")
        return (shape, init) if owner == f"{self.tower}.{name}.{role}" else owner


def build_tower(graph: Graph, spec, tower: str) -> TowerBuilder:
    """Lower encoder-only ``spec`` into ``graph`` as tower ``tower``: embeddings (patches), its
    stack and final norm; ``ports["memory"]`` is its last hidden states (B, V, d)."""
    b = TowerBuilder(graph, spec, "encoder", SEQ, tower=tower)
    graph.towers[tower] = spec
    x, _ = _embed(b, spec.vocab.size, tie=None)
    b.ports["memory"] = _stack(b, spec.encoder, x)
    return b
