"""ONNX lowerings of memory tokens (``tfspec/ir/ops/memory_tokens.py``), as the PyTorch backend's
(``backends/torch/memory_tokens.py``).

A step graph cannot tell its first call from the others but by the past's length: the memory
rows put in are the tokens' rows from ``Variant.memory_cached`` (0 in full-sequence graphs and at
a first step, m once the cache holds them) to m, a Slice that is empty after the first step.
The stack's padding gains m unpadded columns (the cached memory keys are never padded) and its
positions -m..-1 for the rows put in; the drop restores the tokens' own.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tfspec.ir import Node

from . import lowering

SEQ = {"encoder": "S", "decoder": "T"}
FALSE = helper.make_tensor("false", TensorProto.BOOL, [1], [False])
"""ConstantOfShape's value: unpadded columns."""


@lowering("memory_tokens")
def memory_tokens(e, node: Node, x: str) -> str:
    """(B, L, d) -> (B, m - cached + L, d); padding and positions widened to match."""
    b, m, d, seq = e.b, node.attrs["count"], node.shape[-1], SEQ[node.stack]
    cached = e.variant.memory_cached(e, m)  # int64 (1,): memory rows already in the cache
    start, end = (b.ints(0), b.ints(m)) if cached is None else (cached, b.ints(m))
    tokens = b.op("Slice", b.param(node.params["tokens"]), start, end, b.ints(0))  # (m', d)
    put = b.op("Shape", tokens, start=0, end=1)  # (1,): m'
    rows = e.positions(seq, x)  # the tokens' positions, (L,) or (B, L)
    memory = b.op("Slice", b.const(np.arange(-m, 0, dtype=np.int64)), start, end, b.ints(0))  # (m',)
    memory = b.op("Expand", memory, b.op("Concat", b.op("Shape", rows, end=-1), put, axis=0))
    e.cached(("memory_tokens", seq), lambda: (put, e.rows.get(seq), e.pads.get(seq), e.key_pads.get(seq),
                                              e.bias.pop(seq, None)))  # what the drop puts back
    e.rows[seq] = b.op("Concat", memory, rows, axis=-1)
    if seq in e.pads:
        e.pads[seq] = unpadded_first(b, e.pads[seq], put)
    if seq in e.key_pads:  # a step graph's keys: the cached memory's, then every token's
        tokens_seen = b.op("Unsqueeze", b.op("Add", e.offset(), e.lengths[seq]), b.ints(0))
        pads = b.op("Expand", e.key_pads[seq], b.op("Concat", b.op("Shape", e.key_pads[seq], end=1), tokens_seen,
                                                    axis=0))  # (B or 1, tokens): a mask of ones comes as (1, 1)
        e.key_pads[seq] = unpadded_first(b, pads, b.ints(m))
    tokens = b.op("Expand", b.op("Unsqueeze", tokens, b.ints(0)), b.op("Concat", b.batch, put, b.ints(d), axis=0))
    return b.op("Concat", tokens, x, axis=1)


@lowering("drop_tokens")
def drop_tokens(e, node: Node, x: str) -> str:
    """(B, m' + L, d) -> (B, L, d): the rows the memory op put in dropped, the tokens' padding and
    positions back."""
    seq = SEQ[node.stack]
    put, *kept = e.cached(("memory_tokens", seq), None)
    for table, value in zip((e.rows, e.pads, e.key_pads, e.bias), kept):
        table.pop(seq, None)
        if value is not None:
            table[seq] = value
    return e.b.op("Slice", x, put, e.b.ints(2**62), e.b.ints(1))


def unpadded_first(b, pads: str, columns: str) -> str:
    """bool (R, L) padding -> (R, columns + L), the new columns (the memory) unpadded."""
    shape = b.op("Concat", b.op("Shape", pads, end=1), columns, axis=0)
    return b.op("Concat", b.op("ConstantOfShape", shape, value=FALSE), pads, axis=1)
