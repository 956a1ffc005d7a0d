"""``tfspec.search.beam_step`` spelled in ONNX operators, for the search inside ``generate.onnx``.

The Python step is written in fixed-shape array operations so that this module can mirror it
line for line: ``np.argsort(..., kind="stable")[:, :m]`` is ``TopK(largest=1, sorted=1)``
(ONNX breaks ties by the lower index, as a stable sort does), fancy indexing by (line, column)
is ``GatherElements`` along axis 1, ``cumsum(x) - x`` is ``CumSum(exclusive=1)`` and
``argmax`` is ``ArgMax`` (the first of equal maxima). Scores are float64, as numpy's are when
it adds float32 log-probabilities to float64 sums, so both rank the same candidates the same
way. Names below are the Python step's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from ..builder import Builder

NEG_INF = np.float64(-np.inf)


@dataclass(frozen=True)
class Beam:
    """What every step of a search of n sentences with k hypotheses each reads, computed once
    before the loop (onnxruntime does not hoist loop invariants out of a Loop body)."""

    k: str
    """int64 scalar."""
    two_k: str
    k_1d: str
    """int64 (1,) k, as TopK takes it."""
    two_k_1d: str
    columns: str
    """int64 (k,) 0..k-1."""
    ranks: str
    """int64 (k, 1) 0..k-1."""
    positions: str
    """int64 (2k,) 0..2k-1."""
    n_by_minus_one: str
    """The int64 shape (n, -1)."""
    stops: tuple[int, ...]
    """The end-of-sequence ids (``tfspec.search.stop_ids``)."""


def beam_constants(b: Builder, n: str, k: str, stops: tuple[int, ...]) -> Beam:
    """``Beam`` for int64 scalars ``n`` (sentences) and ``k`` (hypotheses per sentence)."""
    zero, one, two_k = b.const(np.int64(0)), b.const(np.int64(1)), b.op("Mul", k, b.const(np.int64(2)))
    columns = b.op("Range", zero, k, one)
    return Beam(k=k, two_k=two_k, k_1d=b.op("Unsqueeze", k, b.ints(0)), two_k_1d=b.op("Unsqueeze", two_k, b.ints(0)),
                columns=columns, ranks=b.op("Unsqueeze", columns, b.ints(1)), positions=b.op("Range", zero, two_k, one),
                n_by_minus_one=b.op("Concat", b.op("Unsqueeze", n, b.ints(0)), b.ints(-1), axis=0), stops=stops)


@dataclass(frozen=True)
class GraphStep:
    """``tfspec.search.Step`` as graph values, (n, k) or (n, 1), plus ``cut``: whether the best
    finished hypothesis ends by the length limit, keeping its word (the Python step's
    ``best_token`` >= 0), rather than by an end of sequence (there -1; here ``best_token`` is
    that end-of-sequence id)."""

    rows: str
    tokens: str
    scores: str
    ended: str
    best: str
    best_row: str
    best_token: str
    cut: str
    going: str


def among(b: Builder, tokens: str, ids) -> str:
    """Whether each of ``tokens`` is one of the few constant ``ids`` (``tfspec.search.among``)."""
    hits = [b.op("Equal", tokens, b.const(np.int64(i))) for i in ids]
    out = hits[0]
    for hit in hits[1:]:
        out = b.op("Or", out, hit)
    return out


def beam_step(b: Builder, beam: Beam, scores: str, values: str, ids: str, width: str, finished: str,
              at_limit: str, penalty: str) -> GraphStep:
    """``tfspec.search.beam_step``: ``scores`` (n, k) float64 of the hypotheses, their
    candidates ``values``/``ids`` (n * k, w) float64/int64 (``width`` the int64 (1,) w),
    ``finished`` (n,) int64, ``at_limit`` (n,) bool and the new length's ``penalty``."""
    one, zero, neg_inf = b.const(np.int64(1)), b.const(np.int64(0)), b.const(NEG_INF, np.float64)
    k, two_k, n_by_minus_one = beam.k, beam.two_k, beam.n_by_minus_one
    candidates = b.op("Reshape", b.op("Add", b.op("Reshape", scores, b.ints(-1, 1)), values), n_by_minus_one)
    top, order = b.op("TopK", candidates, beam.two_k_1d, axis=1, outputs=2)  # (n, 2k), ties by lower index
    tokens = b.op("GatherElements", b.op("Reshape", ids, n_by_minus_one), order, axis=1)
    rows = b.op("Div", order, width)  # order >= 0: Div floors
    valid, ends = b.op("Greater", top, neg_inf), among(b, tokens, beam.stops)
    word = b.op("And", valid, b.op("Not", ends))
    before = b.op("CumSum", b.op("Cast", word, to=TensorProto.INT64), one, exclusive=1)  # words ranked above
    under = b.op("Less", before, k)
    closing, chosen = b.op("And", b.op("And", valid, ends), under), b.op("And", word, under)
    # Finished in the order the search meets them: ends of sequence, then words cut by the limit.
    done = b.op("Concat", closing, b.op("And", chosen, b.op("Unsqueeze", at_limit, b.ints(1))), axis=1)
    finals = b.op("Where", done, b.op("Div", b.op("Concat", top, top, axis=1), penalty), neg_inf)
    first = b.op("ArgMax", finals, axis=1, keepdims=1)  # (n, 1): the first of equal bests
    at = b.op("Mod", first, two_k)
    count = b.op("ReduceSum", b.op("Cast", chosen, to=TensorProto.INT64), b.ints(1), keepdims=1)  # (n, 1)
    # The chosen words in order: the r-th is the chosen one with r words above it, found by a one-hot
    # sum (TopK's tie order would do, but OpenVINO's TopK ignores ONNX's lower-index-first rule).
    rank = b.op("And", b.op("Unsqueeze", chosen, b.ints(1)),
                b.op("Equal", b.op("Unsqueeze", before, b.ints(1)), beam.ranks))  # (n, k, 2k)
    pick = b.op("ReduceSum", b.op("Mul", b.op("Cast", rank, to=TensorProto.INT64), beam.positions), b.ints(2),
                keepdims=0)  # (n, k); 0 where no word has that rank (a filler, replaced below)
    filler = b.op("GreaterOrEqual", beam.columns, count)  # (n, k)
    last = b.op("GatherElements", pick, b.op("Max", b.op("Sub", count, one), zero), axis=1)
    pick = b.op("Where", filler, last, pick)  # the last word, repeated
    at_row = lambda x, index: b.op("GatherElements", x, index, axis=1)  # noqa: E731 - x[line, index]
    ended = b.op("ReduceSum", b.op("Cast", done, to=TensorProto.INT64), b.ints(1), keepdims=0)  # (n,)
    going = b.op("And", b.op("And", b.op("Less", b.op("Add", finished, ended), k), b.op("Not", at_limit)),
                 b.op("Greater", b.op("Squeeze", count, b.ints(1)), zero))
    return GraphStep(rows=at_row(rows, pick), tokens=at_row(tokens, pick),
                     scores=b.op("Where", filler, neg_inf, at_row(top, pick)), ended=ended,
                     best=b.op("Squeeze", at_row(finals, first), b.ints(1)), best_row=at_row(rows, at),
                     best_token=at_row(tokens, at), cut=b.op("GreaterOrEqual", first, two_k), going=going)
