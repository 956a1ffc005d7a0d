"""The two Loops of generate.onnx: decoding steps until a sentence stops, inside a loop that
then narrows the batch to the sentences still going.

``tfspec.search._beam`` drops a sentence's rows once it stops, so a batch whose sentences end
at different steps costs what their lengths cost. A single Loop would have to keep every row
to the end (a batch of 32 translated at beam 4 took 2.2x the Python search's time), and
narrowing inside it at every step would copy the cross-attention keys and values each step
(onnxruntime's ``If`` copies what a branch passes through). So the inner Loop (``_steps``)
runs decoding steps while every sentence goes on; when one stops it ends, and the outer Loop's
body writes the stopped sentences' results to the outputs and gathers the rest of the state,
the per-source values included, for the sentences left, as ``OnnxDecoder.select`` does. The
pasts themselves are not copied: the next step gathers its rows by ``beam_rows``.

The per-search state: ``tokens`` (m * k, L) to feed next, the step graph's pasts, ``beam_rows``
(the past row each row continues), ``offset`` (for step graphs that take one), ``key_mask``
(a ragged batch of prompts: each row's keys, 0 at its padding, the step's own tokens included;
reordered and narrowed as ``tokens`` are, one column of ones longer each step), each sentence's
``scores`` (m, k), ``finished`` count, ``best`` score, ``result`` (m, t) and its ``length``, and
``hyps`` (m * k, t), the hypotheses' tokens; the outer Loop adds the per-source ``shared``
values, ``orig`` (each sentence's row in the batch), ``limits`` and the outputs being filled.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..builder import Builder
from .search_graph import NEG_INF, among, beam_step

I64, F64, BOOL = TensorProto.INT64, TensorProto.DOUBLE, TensorProto.BOOL
SENTENCES = [("scores", F64, 2), ("finished", I64, 1), ("best", F64, 1), ("result", I64, 2), ("length", I64, 1)]
"""Per-sentence state carried by both Loops: (name, element type, rank)."""
OUTPUTS = [("sequences", I64, 2), ("lengths", I64, 1), ("final_scores", F64, 1)]


def search(b: Builder, s, step: onnx.GraphProto, shared: dict[str, tuple[int, int]], inline) -> list[str]:
    """Emit the search into ``b``'s graph after ``s`` (``generate._Setup``): the outer Loop over
    the inner one around the ``step`` graph (inlined with ``inline``). ``shared``: the per-source
    values (name -> element type, rank). Returns the names of the outputs: sequences,
    sequences_lengths and the final scores (float64)."""
    empty = {i.name: (i.type.tensor_type.elem_type, [d.dim_value if d.HasField("dim_value") else 0
                                                     for d in i.type.tensor_type.shape.dim][1:])
             for i in step.input if i.name.startswith("past.")}  # no past_len yet; fixed window and state sizes
    pasts = [(name, elem, len(dims) + 1) for name, (elem, dims) in empty.items()]
    offset = [("offset", I64, 0)] if any(i.name == "offset" for i in step.input) else []
    key_mask = [("key_mask", I64, 2)] if s.prompt_mask is not None else []
    rows = [("tokens", I64, 2), *pasts, ("beam_rows", I64, 1), *offset, *key_mask]
    state = [("t", I64, 0), *rows, *SENTENCES, ("hyps", I64, 2)]
    outer = state + [(n, e, r) for n, (e, r) in shared.items()] + [("orig", I64, 1), ("limits", I64, 1)] + OUTPUTS
    initial = _initial(b, s, empty, bool(offset), list(shared))
    main, b.nodes = b.nodes, []
    v = {name: f"search/{name}" for name, _, _ in outer}
    inner = _steps(b, s, step, v, state, pasts, bool(offset), inline)
    updated = _narrow(b, s, v, state, inner, list(shared))
    body = helper.make_graph(b.nodes, "search", [_info("search/i", I64, 0), _info("search/cond", BOOL, 0)]
                             + [_info(v[n], e, r) for n, e, r in outer],
                             [_info(updated["cond"], BOOL, 0)] + [_info(updated[n], e, r) for n, e, r in outer])
    b.nodes = main
    named = {"sequences": "sequences", "lengths": "sequences_lengths"}  # the graph's outputs
    outs = [named.get(name, f"generate/final.{name}") for name, _, _ in outer]
    m = b.shape_of(initial[outer.index(("limits", I64, 1))], 0)
    b.nodes.append(helper.make_node("Loop", [s.n, b.op("Greater", m, b.const(np.int64(0))), *initial], outs,
                                    name="generate/search", body=body))
    return outs[-3:]


def _steps(b: Builder, s, step, v: dict, state: list, pasts: list, offset: bool, inline) -> list[str]:
    """The inner Loop, in the outer body: steps while every sentence goes on. Returns its
    outputs, ``state``'s final values and then ``going`` (m,)."""
    outer_nodes, b.nodes = b.nodes, []
    i64 = lambda x: b.const(np.int64(x))  # noqa: E731
    m = b.shape_of(v["scores"], 0)
    lines = b.op("Mul", b.op("Range", i64(0), m, i64(1)), s.beam.k)  # (m,): each sentence's first row
    beam = replace(s.beam, n_by_minus_one=b.op("Concat", b.op("Unsqueeze", m, b.ints(0)), b.ints(-1), axis=0))
    pad_column = b.op("Expand", b.const(np.full((1, 1), s.vocab.pad_id, np.int64)),
                      b.op("Concat", b.op("Unsqueeze", m, b.ints(0)), b.ints(1), axis=0))
    prepared, b.nodes = b.nodes, []
    w = {name: f"steps/{name}" for name, _, _ in state}
    t = w["t"]
    row_t = lambda table: b.op("Gather", table, t, axis=0)  # noqa: E731
    width, early = row_t(s.widths), row_t(s.early)
    names = {"tgt": w["tokens"], "beam_rows": w["beam_rows"], "top_k": width} | {p: w[p] for p, _, _ in pasts}
    names |= {"offset": w["offset"]} if offset else {}
    names |= {i.name: v[i.name] for i in step.input if i.name.startswith("cross.") or i.name == "memory_bias"}
    if s.prompt_mask is not None:  # each row's padding: its zeros, all before its prompt
        names |= {"attention_mask": w["key_mask"], "position_offset": b.op(
            "Sub", b.shape_of(w["key_mask"], 1), b.op("ReduceSum", w["key_mask"], b.ints(1), keepdims=0))}
    elif any(i.name == "attention_mask" for i in step.input):  # prompts of one length: no padding
        names |= {"attention_mask": b.const(np.ones((1, 1), np.int64)),
                  "position_offset": b.const(np.zeros(1, np.int64))}
    weights: dict = {}  # the body's own: onnxruntime pre-packs a Gemm's weight only from its own graph
    b.nodes += inline(step, "step", names, weights)
    ids, banned = "step/top_ids", b.op("And", among(b, "step/top_ids", s.beam.stops), early)
    if s.pad_banned:
        banned = b.op("Or", banned, b.op("Equal", ids, i64(s.vocab.pad_id)))
    values = b.op("Where", banned, b.const(NEG_INF, np.float64), b.op("Cast", "step/top_values", to=F64))
    at_limit = b.op("GreaterOrEqual", b.op("Add", t, i64(1)), v["limits"])
    found = beam_step(b, beam, w["scores"], values, ids, width, w["finished"], at_limit, row_t(s.penalties))
    updated = _advance(b, w, found, lines, pad_column) | {p: "step/" + p.replace("past.", "present.", 1)
                                                           for p, _, _ in pasts}
    if offset:
        updated["offset"] = b.op("Add", w["offset"], b.shape_of(w["tokens"], 1))
    if s.prompt_mask is not None:  # the rows continued, and the token each adds
        kept = b.op("Gather", w["key_mask"], updated["beam_rows"], axis=0)
        ones = b.op("Expand", i64(1), b.op("Concat", b.op("Shape", kept, start=0, end=1), b.ints(1), axis=0))
        updated["key_mask"] = b.op("Concat", kept, ones, axis=1)
    every = b.op("Greater", b.op("ReduceMin", b.op("Cast", found.going, to=I64), keepdims=0), i64(0))
    body = helper.make_graph(b.nodes, "steps", [_info("steps/i", I64, 0), _info("steps/cond", BOOL, 0)]
                             + [_info(w[n], e, r) for n, e, r in state] + [_info("steps/going", BOOL, 1)],
                             [_info(every, BOOL, 0)] + [_info(updated[n], e, r) for n, e, r in state]
                             + [_info(found.going, BOOL, 1)], list(weights.values()))
    b.nodes = outer_nodes + prepared
    trips = b.op("Sub", b.op("ReduceMax", v["limits"], keepdims=0), v["t"])  # >= 1: going sentences are under it
    going = b.op("Greater", v["limits"], v["t"])  # every sentence, (m,): carried so that the last step's comes out
    outs = [f"steps/final.{name}" for name, _, _ in state] + ["steps/final.going"]
    b.nodes.append(helper.make_node("Loop", [trips, b.const(np.bool_(True)), *[v[n] for n, _, _ in state], going],
                                    outs, name="generate/steps", body=body))
    return outs


def _advance(b: Builder, w: dict, found, lines: str, pad_column: str) -> dict[str, str]:
    """The state after one step (``tfspec.search._beam``'s loop body): each sentence's best
    result so far, the hypotheses extended, the next tokens and the past rows they continue."""
    t = w["t"]
    improved = b.op("Greater", found.best, w["best"])
    kept = b.op("Gather", w["hyps"], b.op("Add", lines, b.op("Squeeze", found.best_row, b.ints(1))), axis=0)
    candidate, padded = b.op("Concat", kept, found.best_token, axis=1), b.op("Concat", w["result"], pad_column, axis=1)
    rows = b.op("Reshape", b.op("Add", b.op("Unsqueeze", lines, b.ints(1)), found.rows), b.ints(-1))
    tokens = b.op("Reshape", found.tokens, b.ints(-1, 1))
    cut = b.op("Cast", b.op("Squeeze", found.cut, b.ints(1)), to=I64)  # the best keeps its word: one token more
    return {"t": b.op("Add", t, b.const(np.int64(1))), "tokens": tokens, "beam_rows": rows, "scores": found.scores,
            "finished": b.op("Add", w["finished"], found.ended), "best": b.op("Max", w["best"], found.best),
            "result": b.op("Where", b.op("Unsqueeze", improved, b.ints(1)), candidate, padded),
            "length": b.op("Where", improved, b.op("Add", t, cut), w["length"]),
            "hyps": b.op("Concat", b.op("Gather", w["hyps"], rows, axis=0), tokens, axis=1)}


def _narrow(b: Builder, s, v: dict, state: list, inner: list[str], shared: list[str]) -> dict[str, str]:
    """The outer body after the inner Loop: the stopped sentences' results written to the outputs
    at their rows of the batch, every other value narrowed to the sentences going on."""
    final = dict(zip([n for n, _, _ in state], inner))
    unsq = lambda x, axis: b.op("Unsqueeze", x, b.ints(axis))  # noqa: E731
    keep = b.op("Squeeze", b.op("NonZero", inner[-1]), b.ints(0))
    stopped = b.op("Squeeze", b.op("NonZero", b.op("Not", inner[-1])), b.ints(0))
    keep_rows = b.op("Reshape", b.op("Add", unsq(b.op("Mul", keep, s.beam.k), 1), s.beam.columns), b.ints(-1))
    at = unsq(b.op("Gather", v["orig"], stopped, axis=0), 1)  # (stopped, 1): rows of the batch
    grow = b.op("Sub", final["t"], b.shape_of(v["sequences"], 1))  # output columns to add (the steps just run)
    padding = b.op("Expand", b.const(np.full((1, 1), s.vocab.pad_id, np.int64)),
                   b.op("Concat", unsq(s.n, 0), unsq(grow, 0), axis=0))
    sequences = b.op("Concat", v["sequences"], padding, axis=1)
    updated = {"t": final["t"], "cond": b.op("Greater", b.shape_of(keep, 0), b.const(np.int64(0)))}
    for output, value in (("sequences", "result"), ("lengths", "length"), ("final_scores", "best")):
        into = sequences if output == "sequences" else v[output]
        updated[output] = b.op("ScatterND", into, at, b.op("Gather", final[value], stopped, axis=0))
    for name, _, _ in state[1:]:
        if name.startswith("past.") or name == "offset":  # rows picked by beam_rows at the next step
            updated[name] = final[name]
        else:
            by = keep_rows if name in ("tokens", "beam_rows", "hyps", "key_mask") else keep
            updated[name] = b.op("Gather", final[name], by, axis=0)
    for name in [*shared, "orig", "limits"]:
        updated[name] = b.op("Gather", v[name], keep, axis=0)
    return updated


def _initial(b: Builder, s, pasts: dict, offset: bool, shared: list[str]) -> list[str]:
    """The outer Loop's initial values, in its order: sentences with a source (an empty one has
    limit 0 and gives an empty output), their per-source values, empty pasts (zero windows and
    states), each row continuing itself, only a sentence's first copy alive (scores 0, -inf, ...:
    ``tfspec.search._beam``), no results yet."""
    i64, unsq = (lambda x: b.const(np.int64(x))), (lambda x: b.op("Unsqueeze", x, b.ints(0)))
    keep = b.op("Squeeze", b.op("NonZero", b.op("Greater", s.limits, i64(0))), b.ints(0))
    m = b.shape_of(keep, 0)
    rows = b.op("Mul", m, s.beam.k)
    if s.encoder:
        first = b.op("Expand", b.const(np.full((1, 1), s.vocab.bos_id, np.int64)),
                     b.op("Concat", unsq(rows), b.ints(1), axis=0))
    else:  # bos then the prompt, as `tfspec translate` feeds a decoder-only model; each row k times
        first = _spread(b, s, s.prompt, keep)
    out = [i64(0), first]
    for elem, dims in pasts.values():
        out.append(b.op("ConstantOfShape", b.op("Concat", unsq(rows), b.ints(*dims), axis=0),
                        value=numpy_helper.from_array(np.zeros(1, helper.tensor_dtype_to_np_dtype(elem)))))
    out += [b.op("Range", i64(0), rows, i64(1))] + ([i64(0)] if offset else [])
    out += [] if s.prompt_mask is None else [_spread(b, s, s.prompt_mask, keep)]  # the first step's keys
    first_copy = b.op("Where", b.op("Equal", s.beam.columns, i64(0)), b.const(np.float64(0), np.float64),
                      b.const(NEG_INF, np.float64))  # (k,)
    empty = lambda r: b.op("ConstantOfShape", b.op("Concat", unsq(r), b.ints(0), axis=0),  # noqa: E731
                           value=numpy_helper.from_array(np.zeros(1, np.int64)))
    zeros = lambda r: b.op("Expand", i64(0), unsq(r))  # noqa: E731
    out += [b.op("Expand", first_copy, b.op("Concat", unsq(m), s.beam.k_1d, axis=0)), zeros(m),
            b.op("Expand", b.const(NEG_INF, np.float64), unsq(m)), empty(m), zeros(m), empty(rows)]
    out += [b.op("Gather", name, keep, axis=0) for name in shared]
    out += [keep, b.op("Gather", s.limits, keep, axis=0), empty(s.n), zeros(s.n),
            b.op("Expand", b.const(NEG_INF, np.float64), unsq(s.n))]
    return out


def _spread(b: Builder, s, x: str, keep: str) -> str:
    """The rows ``keep`` of ``x`` (batch, width), each k times in a row: (m * k, width)."""
    x = b.op("Gather", x, keep, axis=0)
    m = b.op("Unsqueeze", b.shape_of(keep, 0), b.ints(0))
    spread = b.op("Expand", b.op("Unsqueeze", x, b.ints(1)),
                  b.op("Concat", m, s.beam.k_1d, b.op("Shape", x, start=1, end=2), axis=0))
    return b.op("Reshape", spread, b.op("Concat", b.op("Mul", m, s.beam.k_1d), b.ints(-1), axis=0))


def _info(name: str, elem: int, rank: int) -> onnx.ValueInfoProto:
    """A loop body's input or output: its type and rank (sizes change from iteration to iteration)."""
    return helper.make_tensor_value_info(name, elem, [None] * rank)
