"""ONNX lowerings of the Universal Transformer's step signal and adaptive computation time
(``tfspec/ir/ops/halting.py``)."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node
from tfspec.ir.positions import sinusoids

from . import lowering


@lowering("timestep")
def timestep(e, node: Node, x: str) -> str:
    """Universal Transformer: the step's sinusoid (and the positions') added before a step."""
    b, a = e.b, node.attrs
    d = node.shape[-1]
    x = b.op("Add", x, b.const(sinusoids(a["step"] + 1, d, a["layout"], a["spacing"])[a["step"]]))
    if a["positions"]:
        table = b.const(sinusoids(e.graph.spec.positional.max_len + a["offset"], d, a["layout"], a["spacing"]))
        positions = b.op("Add", e.positions(node.shape[1], x), b.const(np.int64(a["offset"])))
        x = b.op("Add", x, b.op("Gather", table, positions))
    return x


@lowering("act", rows=True)
def act(e, node: Node, s: str, y: str, packed: str | None = None) -> str:
    """One step of adaptive computation time, as the PyTorch backend's ``AdaptiveComputationTime``."""
    b, a, p = e.b, node.attrs, node.params
    d = node.shape[-1] - 3
    one, zero = b.const(1.0), b.const(0.0)
    halt = b.op("Sigmoid", b.linear(s, p["w_halt"], p["b_halt"]))  # (B, L, 1)
    if packed is None:
        state, halting = b.op("Mul", y, zero), b.op("Mul", halt, zero)
        remainders = updates = halting
    else:
        state, halting, remainders, updates = b.op("Split", packed, b.ints(d, 1, 1, 1), axis=-1, outputs=4)

    def flag(condition):
        return b.op("Cast", condition, to=b.elem_type)

    running = flag(b.op("Less", halting, one))
    if a["last"]:  # every position still running halts at the last step
        halted = running
    else:
        reached = b.op("Add", halting, b.op("Mul", halt, running))
        halted = b.op("Mul", flag(b.op("Greater", reached, b.const(a["threshold"]))), running)
    running = b.op("Sub", running, halted)
    halting = b.op("Add", halting, b.op("Mul", halt, running))
    remainders = b.op("Add", remainders, b.op("Mul", halted, b.op("Sub", one, halting)))
    halting = b.op("Add", halting, b.op("Mul", halted, remainders))
    updates = b.op("Add", updates, b.op("Add", running, halted))
    weight = b.op("Add", b.op("Mul", halt, running), b.op("Mul", halted, remainders))
    state = b.op("Add", state, b.op("Mul", y, weight))
    return b.op("Concat", state, halting, remainders, updates, axis=-1)


@lowering("act_state", rows=True)
def act_state(e, node: Node, packed: str) -> str:
    return e.b.op("Slice", packed, e.b.ints(0), e.b.ints(node.shape[-1]), e.b.ints(-1))
