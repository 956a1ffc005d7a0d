"""IR ops: what each op of the graph computes and keeps, declared once, one module per op or
small group, found by scanning this package (``tfspec.registry.discover``). An op states its
matrix FLOPs (``tfspec.analysis.flops``), the tensors its backward pass keeps (``report
--train``), the values it caches per decoded position (``tfspec.analysis.kvcache``) and whether
each position reads only its own input (``Node.mixes_positions``: ragged batching). Ops that
lower a layer kind take their FLOPs and position mixing from the kind (``tfspec/layers``). An
op that states no FLOPs or no saved tensors is refused when it registers, so nothing counts a
silent zero; each backend lowers every op (``tests/test_ops.py`` checks both)."""

from __future__ import annotations

import math
from typing import Callable, ClassVar

from tfspec.errors import TfspecError
from tfspec.positions import KINDS
from tfspec.registry import discover, registrar

OPS: dict[str, type[Op]] = {}
"""Each registered op by its name (``Node.op``)."""


class Op:
    """What an IR op declares. ``flops`` and ``saved`` have no default: a definition states
    them (``{}`` where an op has no products or keeps nothing). The other answers default to
    the safe side: an op mixes positions and caches nothing per position."""

    name: ClassVar[str]
    """``Node.op`` of the nodes it defines."""
    position_wise: ClassVar[bool] = False
    """Each position's output reads that position's input alone (embeddings, norms, residual
    adds, projections), so padding cannot reach a real position through it."""
    carries: ClassVar[bool] = False
    """It carries a state from one decoding step to the next besides a per-position cache (a
    recurrence's state, a convolution's window of past inputs)."""
    fed: ClassVar[bool] = False
    """A graph input the caller binds (token ids, frames): the backends lower no such op."""
    flops: ClassVar[Callable | None] = None
    """``flops(node, s, dense) -> {term: expr}``: forward matrix FLOPs over one sequence in the
    symbols ``s`` (``tfspec.analysis.flops.SYMBOLS``), 2 per multiply-add; ``dense`` counts
    scores a mask discards too."""
    saved: ClassVar[Callable | None] = None
    """``saved(graph, node, sizes, out) -> {tensor: bytes}``: what the backward pass keeps,
    IR tensors by their op's name and tensors inside the op as ``op#what``; ``sizes`` maps the
    shape symbols to numbers and ``out(name)`` is an IR tensor's float32 bytes."""

    @classmethod
    def mixes_positions(cls, node) -> bool:
        """Whether ``node``'s real positions may read padding that attention masks do not hide."""
        return not cls.position_wise

    @classmethod
    def cached(cls, node) -> int | None:
        """Values ``node`` caches per decoded position (attention's keys and values); None where
        it keeps nothing per position."""
        return None


class LayerOp(Op):
    """An op that lowers a layer kind (``tfspec/layers``): its FLOPs, with any its position kind
    adds, and its position mixing are the kind's answers."""

    @staticmethod
    def flops(node, s, dense: bool = False) -> dict:
        positions = node.attrs.get("positions")
        extra = KINDS[positions["kind"]].attention_flops(s, positions) if positions else {}
        try:
            return node.layer.flops(s, dense) | extra
        except NotImplementedError:
            raise TfspecError(f"{node.name}: layer kind {node.layer.kind!r} states no FLOP formula; define "
                              "`flops` in its module (tfspec/layers) to analyse it") from None

    @classmethod
    def mixes_positions(cls, node) -> bool:
        return node.layer.mixes_positions


def register(op: type[Op]) -> type[Op]:
    """Class decorator: record ``op`` under its name; one stating no FLOPs or saved tensors, or
    a second definition of a name, is refused."""
    missing = [what for what in ("flops", "saved") if getattr(op, what) is None]
    if missing:
        raise TypeError(f"IR op {op.name!r} ({op.__module__}) states no {' and no '.join(missing)}: declare them "
                        "({} where it has none)")
    return registrar(OPS, "IR ops")(op.name)(op)


def definition(name: str) -> type[Op]:
    """The registered definition of IR op ``name``."""
    discover(__name__)
    if name not in OPS:
        raise TfspecError(f"IR op {name!r} has no definition: add a module for it to tfspec/ir/ops")
    return OPS[name]


def every() -> dict[str, type[Op]]:
    """Every op of the package by name."""
    discover(__name__)
    return dict(sorted(OPS.items()))


def rows(node, sizes: dict, seq: str | None = None) -> int:
    """Rows of ``node``'s (B, L, ...) output: batch x its sequence's length (or ``seq``'s)."""
    return sizes["B"] * sizes[seq or node.shape[1]]


def numel(shape, sizes: dict) -> int:
    """Elements of a shape of ints and symbols."""
    return math.prod(sizes.get(d, d) if isinstance(d, str) else d for d in shape)


# Saved-tensor rules several ops share.

def keeps_nothing(graph, node, sizes, out) -> dict:
    """Nothing for the backward pass (a residual add's gradient passes through unchanged)."""
    return {}


def keeps_inputs(graph, node, sizes, out) -> dict:
    """Its inputs (a linear map needs them for its weight's gradient)."""
    return {i: out(i) for i in node.inputs}


def keeps_inputs_and_output(graph, node, sizes, out) -> dict:
    """Its inputs and its output, as an elementwise chain does; an op whose backward keeps
    more (a recurrence's states) is underestimated by what its insides add."""
    return {i: out(i) for i in node.inputs if graph.node(i).op != "input"} | {node.name: out(node.name)}


def no_products(node, s, dense: bool = False) -> dict:
    """No matrix products: gathers, elementwise work and reductions count 0 (``analysis.flops``)."""
    return {}


def width(node, s):
    """The features a projection reads: a narrower embedding's E (ALBERT, OPT-350m), else d."""
    return node.attrs.get("features") or s.d
