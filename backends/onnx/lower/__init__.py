"""ONNX lowerings of the IR ops, one module per op or small group (as ``tfspec/ir/ops``),
found by scanning this package: a new op's lowering is a new file here, nothing more.

A lowering is ``fn(e, node, *inputs) -> output name`` where ``e`` is the graph being emitted
(``graphs.Emit``): its builder ``e.b``, its variant (``variants``: how caches, positions and
outputs work in that graph), padding masks, positions and, in step graphs, the state each layer
carries between steps. Nothing here imports the PyTorch backend or the Hugging Face families.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tfspec.registry import discover


@dataclass(frozen=True)
class Lowering:
    """One op's lowering and the layout its inputs take."""

    fn: Callable
    rows: bool = False
    """It treats every position alike and takes and gives the residual stream's flat (B * L, d)
    view (attention reads the sequence through its own reshapes). Every other lowering gets
    (B, L, d) sequences, so one that knows nothing of flat views never meets one."""

    def __call__(self, *args):
        return self.fn(*args)


LOWERINGS: dict[str, Lowering] = {}
"""IR op -> its ONNX lowering, filled by the modules of this package (``lowerings()``)."""


def lowering(op: str, rows: bool = False) -> Callable:
    """Decorator registering ``fn`` as the ONNX lowering of IR op ``op`` (``Lowering.rows``);
    a second lowering of the same op is refused (a copy must not silently replace the first)."""
    def register(fn):
        if op in LOWERINGS:
            raise ValueError(f"two ONNX lowerings for IR op {op!r}")
        LOWERINGS[op] = Lowering(fn, rows)
        return fn
    return register


def lowerings() -> dict[str, Lowering]:
    """Every lowering, its modules imported first (cheap to repeat)."""
    discover(__name__)
    return LOWERINGS
