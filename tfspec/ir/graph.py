"""The IR: a networkx DiGraph of ops (nodes) and tensors (edges), plus a parameter table.

Only this module touches raw networkx node dicts; everything else reads ``Node`` views.
Shapes are tuples of ints and symbols: ``B`` (batch), ``S`` (source length), ``T`` (target
length). Parameters live in one table keyed by their canonical name, and nodes refer to them
by role, so a tied matrix is one entry referenced by several nodes and counted once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import networkx as nx

from tfspec.ir.ops import definition

Dim = int | str
Shape = tuple[Dim, ...]


@dataclass(frozen=True)
class Param:
    """A trainable tensor: canonical name, concrete shape and how to initialise it.

    ``init`` is ``xavier_uniform``, ``zeros``, ``ones``, ``normal:<std>``, ``uniform:<bound>``,
    ``constant:<value>``, ``eye`` (a square identity), ``onehot:<index>`` (a vector's unit entry) or
    ``sinusoids`` (Whisper's [sin | cos] position table, ``tfspec.spec.audio.sinusoids``).
    """

    name: str
    shape: tuple[int, ...]
    init: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Node:
    """A read-only view of one op of the IR."""

    name: str
    op: str
    inputs: tuple[str, ...]
    shape: Shape
    attrs: Mapping[str, Any]
    params: Mapping[str, str]
    """Role (e.g. ``w_qkv``) -> canonical parameter name; a tied role names another node's."""
    component: str
    """Report category: embedding, positional, attention, ffn, norm, recurrent, conv, projection."""
    stack: str
    """``encoder``, ``decoder``, or ``""`` for model-level ops."""
    layer: Any = None
    """The validated spec object of the layer kind this op lowers, if any."""

    @property
    def mixes_positions(self) -> bool:
        """Whether a real position's output may depend on padding that attention masks do not
        hide: the op's definition says (``tfspec/ir/ops``), a layer op through its kind."""
        return definition(self.op).mixes_positions(self)

    def owns(self, role: str) -> bool:
        """Whether this node declared the parameter (rather than tying to another node's)."""
        return self.params[role] == f"{self.name}.{role}"


@dataclass
class Graph:
    """A lowered model. Build it with ``tfspec.ir.build_graph``."""

    name: str
    spec: Any = None
    nx: nx.DiGraph = field(default_factory=nx.DiGraph)
    params: dict[str, Param] = field(default_factory=dict)
    ports: dict[str, str] = field(default_factory=dict)
    """Named endpoints: ``src``/``tgt`` inputs, ``memory`` (encoder output), ``logits``."""
    outputs: list[str] = field(default_factory=list)
    """Further ports the full-sequence graph outputs (a dual encoder's scores and embeddings)."""
    towers: dict[str, Any] = field(default_factory=dict)
    """Stack name -> the spec of a tower lowered beside ``spec`` (``tfspec.ir.build.build_tower``)."""

    def spec_of(self, stack: str):
        """The spec whose sizes the nodes of ``stack`` have: a tower's own, else ``spec``."""
        return self.towers.get(stack, self.spec)

    def add_param(self, name: str, shape: tuple[int, ...], init: str) -> str:
        if name in self.params:
            raise ValueError(f"parameter {name!r} declared twice")
        self.params[name] = Param(name, tuple(int(s) for s in shape), init)
        return name

    def add_op(self, name: str, op: str, inputs: list[str], shape: Shape, *, attrs=None, params=None,
               component: str = "", stack: str = "", layer: Any = None) -> str:
        definition(op)  # an op without a definition fails here, by name, not later in an analysis
        if name in self.nx:
            raise ValueError(f"op {name!r} added twice")
        for source in inputs:
            if source not in self.nx:
                raise ValueError(f"op {name!r} reads unknown op {source!r}")
        for param in (params or {}).values():
            if param not in self.params:
                raise ValueError(f"op {name!r} uses undeclared parameter {param!r}")
        self.nx.add_node(name, op=op, inputs=tuple(inputs), shape=tuple(shape), attrs=dict(attrs or {}),
                         params=dict(params or {}), component=component, stack=stack, layer=layer)
        for port, source in enumerate(inputs):
            self.nx.add_edge(source, name, port=port, shape=self.nx.nodes[source]["shape"])
        return name

    def node(self, name: str) -> Node:
        return Node(name=name, **self.nx.nodes[name])

    def nodes(self) -> list[Node]:
        """All ops in execution order (insertion order is topological: inputs exist first)."""
        return [self.node(name) for name in self.nx.nodes]

    @property
    def num_params(self) -> int:
        """Trainable parameters, tied matrices counted once. Nothing is allocated."""
        return sum(p.numel for p in self.params.values())

    def tied(self) -> dict[str, str]:
        """Each tied use ``<node>.<role>`` -> the canonical parameter it shares."""
        return {f"{n.name}.{role}": p for n in self.nodes() for role, p in n.params.items() if not n.owns(role)}

    def masks_padding(self, stack: str) -> bool:
        """Whether padding inside ``stack``'s rows is hidden by attention masks alone: no op
        there mixes positions otherwise (``Node.mixes_positions``: convolutions, recurrences,
        halting, an expert's capacity, rotary frequencies chosen by the call's length), so
        prompts of different lengths may share a left-padded batch. Every ragged batcher asks
        this (``takes_masks`` of both decoders, hence search, generate.onnx and the server)."""
        return not any(n.mixes_positions for n in self.nodes() if n.stack == stack)

    def needed(self, fed: set[str] | tuple[str, ...], targets) -> set[str]:
        """Ops on the paths into ``targets`` that stop at ``fed`` ops (which are included):
        what a backend must run, or declare as inputs, to compute ``targets``."""
        needed, stack = set(), list(targets)
        while stack:
            name = stack.pop()
            if name not in needed:
                needed.add(name)
                if name not in fed:
                    stack.extend(self.nx.nodes[name]["inputs"])
        return needed
