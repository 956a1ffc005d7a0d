"""``generate.onnx``: source ids in, best output ids out; the encoder and the whole search in
one graph of standard ONNX operators, for runtimes without tfspec's Python search.

Interface (the names of onnxruntime's retired ``BeamSearch`` op, so users recognise it)::

    input_ids         int64 (batch, src_len)  sources right-padded with pad_id; for a decoder-only
                                              model prompts (of one length: pad ids are read as tokens)
    max_length        int64 ()                most tokens a hypothesis may have, end of sentence included
    num_beams         int64 ()                hypotheses kept per sentence; 1 is greedy search
    length_penalty    float ()                GNMT's alpha (``tfspec.search.length_penalty``)
    min_length        int64 (), optional      no end of sentence before this many tokens (default 0)
    max_extra         int64 (), optional      each row's limit is also its source length (non-pad
                                              ids) + max_extra, as ``translate --max-extra`` (default: none)
 -> sequences         int64 (batch, out_len)  the best hypothesis, its end of sentence, then pad_id
    sequences_scores  float (batch,)          its length-penalised log-probability
    sequences_lengths int64 (batch,)          its tokens before the end of sentence: what
                                              ``tfspec translate`` prints

It mirrors ``tfspec.search.search`` (``_limits``, ``_banned``, ``beam_step``, ``_beam``), so it
gives the Python search's tokens. Greedy search is ``beam_step`` with k = 1 (the likeliest
allowed token ends or extends the one hypothesis, as ``_greedy`` decides), so one ``Loop``
serves both and ``num_beams`` stays a runtime input. The graph is built from what ``emit``
writes: the ``encoder`` graph's nodes inlined, the ``decoder`` step graph as the ``Loop`` body
(its pasts loop-carried and growing, reordered by ``beam_rows`` in the body as for the Python
search), the initializers of both in the outer graph, each distinct tensor once (tied
embeddings, equal sinusoid tables). Sentences that finish stay in the batch, unchanged, until
all have: the host does no work between steps.

Inputs out of range give documented results, never a runtime error: ids outside the vocabulary
are read as unk_id, num_beams < 1 as 1, max_length < 1 as 1 (the Python search's floor), and
where positions are bounded, sources (prompts) are cut to the positions there are and limits
capped so that no position is past the table.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tfspec.errors import TfspecError
from tfspec.ir import Graph

from .builder import Builder
from .graphs import emit
from .search_graph import NEG_INF, among, beam_constants, beam_step

OPTIONAL = {"min_length": 0, "max_extra": 2**30}
"""Optional inputs (graph inputs with an initializer) and their defaults; 2**30: no bound (within int32,
which OpenVINO computes int64 values in)."""
ALPHA_DIGITS = 1e6
"""``length_penalty`` arrives as a float32 (0.6 is 0.60000002): the graph reads it to six
decimals as the float64 Python's search computes with, so both penalise alike to the bit."""


def emit_generate(graph: Graph, weights: dict[str, np.ndarray], opset: int = 18, dtype: str = "float32",
                  metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """The ``generate`` graph (module docstring) of an encoder-decoder or decoder-only ``graph``."""
    ports, spec = graph.ports, graph.spec
    if "tgt" not in ports or "frames" in ports:
        raise TfspecError(f"--generate: {spec.name} has no decoder that generates tokens (family {spec.family})")
    encoder = emit(graph, "encoder", weights, opset, dtype).graph if "src" in ports else None
    return compose(spec, encoder, emit(graph, "decoder", weights, opset, dtype).graph, opset, metadata)


def compose(spec, encoder: onnx.GraphProto | None, step: onnx.GraphProto, opset: int,
            metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """The ``generate`` graph around ``spec``'s ``encoder`` and ``step`` graphs as ``emit``
    writes them, float or quantised (``export --int8`` composes it again from the quantised
    ones: onnxruntime's quantiser leaves a Loop body's matrix products in float)."""
    b = Builder(f"{spec.name}.generate", opset, "float32", {})
    b.scope = "generate"
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "src_len"])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT64, []) for n in ("max_length", "num_beams")]
    inputs += [helper.make_tensor_value_info("length_penalty", TensorProto.FLOAT, [])]
    for name, default in OPTIONAL.items():
        inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, []))
        b.initializers[name] = numpy_helper.from_array(np.array(default, np.int64), name)
    s = _Setup(b, spec, encoder is not None)
    if encoder is not None:
        names = {"src": s.ids} | {o.name: o.name for o in encoder.output if o.name != "memory"}
        if any(i.name == "segments" for i in encoder.input):  # one segment, as OnnxModel.run feeds it
            names["segments"] = b.op("Mul", s.ids, b.const(np.int64(0)))
        b.nodes += _inline(encoder, "encoder", names, b)
    body, carried, initial = _loop(b, s, step)
    nodes, true = b.nodes, b.const(np.bool_(True))
    initializers = _dedupe(list(b.initializers.values()), [nodes, body.node], keep=set(OPTIONAL))
    final = {"result": "sequences", "length": "sequences_lengths"}
    outs = [final.get(name, f"generate/final.{name}") for name, _ in carried]
    nodes.append(helper.make_node("Loop", [s.trips, true, *initial], outs, name="generate/Loop", body=body))
    nodes.append(helper.make_node("Cast", ["generate/final.best"], ["sequences_scores"], to=TensorProto.FLOAT,
                                  name="generate/scores"))
    outputs = [helper.make_tensor_value_info("sequences", TensorProto.INT64, ["batch", "out_len"]),
               helper.make_tensor_value_info("sequences_scores", TensorProto.FLOAT, ["batch"]),
               helper.make_tensor_value_info("sequences_lengths", TensorProto.INT64, ["batch"])]
    model = helper.make_model(helper.make_graph(nodes, b.name, inputs, outputs, initializers),
                              opset_imports=[helper.make_opsetid("", opset)], producer_name="tfspec", ir_version=10)
    helper.set_model_props(model, metadata or {})
    return model


class _Setup:
    """What the graph computes once, before the loop: clean ids, k, each sentence's limit,
    per-step tables and the first tokens (names of graph values)."""

    def __init__(self, b: Builder, spec, encoder: bool):
        vocab = spec.vocab
        self.encoder, self.vocab = encoder, vocab
        self.pad_banned = vocab.bos_id == vocab.pad_id != vocab.eos_id  # as tfspec.search._banned
        i64, unsq = (lambda v: b.const(np.int64(v))), (lambda x: b.op("Unsqueeze", x, b.ints(0)))
        size = vocab.size if self.encoder else vocab.tgt_size
        outside = b.op("Or", b.op("Less", "input_ids", i64(0)), b.op("GreaterOrEqual", "input_ids", i64(size)))
        ids = b.op("Where", outside, i64(vocab.unk_id), "input_ids")
        positions = spec.positional.max_len if spec.positional.kind != "none" else None
        if positions is not None:  # the first step's tokens fit the positions: a prompt leaves one for bos
            ids = b.op("Slice", ids, b.ints(0), b.ints(positions - (0 if self.encoder else 1)), b.ints(1))
        self.ids, self.n = ids, b.shape_of(ids, 0)
        k = b.op("Max", "num_beams", i64(1))
        self.beam = beam_constants(b, self.n, k, vocab.stop_ids)
        self.rows = b.op("Mul", self.n, k)  # N = n * k decoder rows, a sentence's k hypotheses together
        self.lines = b.op("Mul", b.op("Range", i64(0), self.n, i64(1)), k)  # (n,): each sentence's first row
        self.pad_column = b.op("Expand", b.const(np.full((1, 1), vocab.pad_id, np.int64)),
                               b.op("Concat", unsq(self.n), b.ints(1), axis=0))
        self.limits = self._limits(b, positions)
        self.trips = b.op("ReduceMax", self.limits, keepdims=0)
        self._tables(b, k, vocab.tgt_size)
        bos = b.op("Expand", b.const(np.full((1, 1), vocab.bos_id, np.int64)),
                   b.op("Concat", unsq(self.rows if self.encoder else self.n), b.ints(1), axis=0))
        if self.encoder:
            self.first = bos
        else:  # bos then the prompt, as `tfspec translate` feeds a decoder-only model; each row k times
            prompt = b.op("Concat", bos, ids, axis=1)
            spread = b.op("Expand", b.op("Unsqueeze", prompt, b.ints(1)),
                          b.op("Concat", unsq(self.n), unsq(k), b.op("Shape", prompt, start=1, end=2), axis=0))
            self.first = b.op("Reshape", spread, b.op("Concat", unsq(self.rows), b.ints(-1), axis=0))

    def _limits(self, b: Builder, positions: int | None) -> str:
        """Each sentence's most output tokens (``tfspec.search._limits``), capped where positions
        are bounded so that the last token fed sits at position positions - 1 at most; 0 for an
        empty source (such a sentence is never alive)."""
        i64 = lambda v: b.const(np.int64(v))  # noqa: E731
        if self.encoder:
            length = b.op("ReduceSum", b.op("Cast", b.op("Not", b.op("Equal", self.ids, i64(self.vocab.pad_id))),
                                            to=TensorProto.INT64), b.ints(1), keepdims=0)
            limits = b.op("Min", b.op("Add", length, "max_extra"), "max_length")
        else:
            limits = b.op("Expand", b.op("Min", "max_extra", "max_length"), b.op("Unsqueeze", self.n, b.ints(0)))
        limits = b.op("Max", limits, b.op("Max", "min_length", i64(1)))
        if self.encoder:  # an empty source gives an empty output, as translate prints for an empty line
            limits = b.op("Where", b.op("Greater", length, i64(0)), limits, i64(0))
        if positions is None:
            return limits
        fed = i64(1) if self.encoder else b.op("Add", b.shape_of(self.ids, 1), i64(1))  # the first step's tokens
        return b.op("Min", limits, b.op("Sub", i64(positions + 1), fed))

    def _tables(self, b: Builder, k: str, vocab: int) -> None:
        """Per-step values, one row per step t (the loop gathers row t): whether end of sequence
        is still banned, the top-k width to ask the step for, each sentence's ``at_limit`` and the
        length penalty of length t + 1."""
        i64 = lambda v: b.const(np.int64(v))  # noqa: E731
        steps = b.op("Range", i64(0), self.trips, i64(1))
        self.early = b.op("Less", steps, "min_length")
        banned = b.op("Add", b.op("Mul", b.op("Cast", self.early, to=TensorProto.INT64), i64(len(self.beam.stops))),
                      i64(int(self.pad_banned)))
        # 2k candidates always leave k words; the decoders' clamp to the vocabulary
        self.widths = b.op("Unsqueeze", b.op("Min", b.op("Add", self.beam.two_k, banned), i64(vocab)), b.ints(1))
        later = b.op("Unsqueeze", b.op("Add", steps, i64(1)), b.ints(1))
        self.at_limits = b.op("GreaterOrEqual", later, b.op("Unsqueeze", self.limits, b.ints(0)))  # (steps, n)
        f64 = lambda v: b.const(np.float64(v), np.float64)  # noqa: E731
        alpha = b.op("Div", b.op("Round", b.op("Mul", b.op("Cast", "length_penalty", to=TensorProto.DOUBLE),
                                               f64(ALPHA_DIGITS))), f64(ALPHA_DIGITS))
        self.penalties = b.op("Pow", b.op("Div", b.op("Cast", b.op("Add", steps, i64(6)), to=TensorProto.DOUBLE),
                                          f64(6)), alpha)  # ((5 + t + 1) / 6) ** alpha


def _loop(b: Builder, s: _Setup, step: onnx.GraphProto):
    """The Loop body: one decoding step, then ``beam_step`` and ``_beam``'s bookkeeping. Returns
    the body, the loop-carried (name, element type) pairs and their initial values."""
    pasts = [i for i in step.input if i.name.startswith("past.")]
    offset = [("offset", TensorProto.INT64)] if any(i.name == "offset" for i in step.input) else []
    carried = [("tokens", TensorProto.INT64), *[(p.name, p.type.tensor_type.elem_type) for p in pasts],
               ("beam_rows", TensorProto.INT64), *offset, ("scores", TensorProto.DOUBLE),
               ("finished", TensorProto.INT64), ("best", TensorProto.DOUBLE), ("result", TensorProto.INT64),
               ("length", TensorProto.INT64), ("hyps", TensorProto.INT64), ("alive", TensorProto.BOOL)]
    initial = _initial(b, s, pasts, bool(offset))
    outer, b.nodes = b.nodes, []
    v, t = {name: f"loop/{name}" for name, _ in carried}, "loop/t"
    i64 = lambda x: b.const(np.int64(x))  # noqa: E731
    row_t = lambda table: b.op("Gather", table, t, axis=0)  # noqa: E731
    width, early = row_t(s.widths), row_t(s.early)
    names = {"tgt": v["tokens"], "beam_rows": v["beam_rows"], "top_k": width}
    names |= {"offset": v["offset"]} if offset else {}
    names |= {p.name: v[p.name] for p in pasts}
    names |= {i.name: i.name for i in step.input if i.name.startswith("cross.") or i.name == "memory_bias"}
    b.nodes += _inline(step, "step", names, b)
    ids, banned = "step/top_ids", b.op("And", among(b, "step/top_ids", s.beam.stops), early)
    if s.pad_banned:
        banned = b.op("Or", banned, b.op("Equal", ids, i64(s.vocab.pad_id)))
    values = b.op("Where", banned, b.const(NEG_INF, np.float64), b.op("Cast", "step/top_values", to=TensorProto.DOUBLE))
    step_ = beam_step(b, s.beam, v["scores"], values, ids, width, v["finished"], row_t(s.at_limits), row_t(s.penalties))
    alive = v["alive"]
    improved = b.op("And", alive, b.op("Greater", step_.best, v["best"]))
    kept = b.op("Gather", v["hyps"], b.op("Add", s.lines, b.op("Squeeze", step_.best_row, b.ints(1))), axis=0)
    rows = b.op("Reshape", b.op("Add", b.op("Unsqueeze", s.lines, b.ints(1)), step_.rows), b.ints(-1))
    tokens = b.op("Reshape", step_.tokens, b.ints(-1, 1))
    updated = {
        "tokens": tokens, "beam_rows": rows, "scores": step_.scores,
        "finished": b.op("Add", v["finished"], step_.ended),
        "best": b.op("Where", alive, b.op("Max", v["best"], step_.best), v["best"]),
        "result": b.op("Where", b.op("Unsqueeze", improved, b.ints(1)), b.op("Concat", kept, step_.best_token, axis=1),
                       b.op("Concat", v["result"], s.pad_column, axis=1)),
        "length": b.op("Where", improved, b.op("Add", t, b.op("Cast", b.op("Squeeze", step_.cut, b.ints(1)),
                                                               to=TensorProto.INT64)), v["length"]),
        "hyps": b.op("Concat", b.op("Gather", v["hyps"], rows, axis=0), tokens, axis=1),
        "alive": b.op("And", alive, step_.going),
    } | {p.name: "step/" + p.name.replace("past.", "present.", 1) for p in pasts}
    if offset:
        updated["offset"] = b.op("Add", v["offset"], b.shape_of(v["tokens"], 1))
    going = b.op("Greater", b.op("ReduceMax", b.op("Cast", updated["alive"], to=TensorProto.INT64), keepdims=0), i64(0))
    ranks = {"tokens": 2, "scores": 2, "result": 2, "hyps": 2, "offset": 0}
    ranks |= {p.name: len(p.type.tensor_type.shape.dim) for p in pasts}
    info = lambda name, elem, rank=1: helper.make_tensor_value_info(name, elem, [None] * rank)  # noqa: E731
    body = helper.make_graph(b.nodes, "step", [info(t, TensorProto.INT64, 0), info("loop/cond", TensorProto.BOOL, 0)]
                             + [info(v[n], e, ranks.get(n, 1)) for n, e in carried],
                             [info(going, TensorProto.BOOL, 0)] + [info(updated[n], e, ranks.get(n, 1))
                                                                   for n, e in carried])
    b.nodes = outer
    return body, carried, initial


def _initial(b: Builder, s: _Setup, pasts, offset: bool) -> list[str]:
    """The loop-carried values before the first step, in ``_loop``'s order: empty pasts (zero
    windows and states), each row continuing itself, only a sentence's first copy alive
    (``tfspec.search._beam``: scores 0, -inf, ...), no hypothesis finished yet."""
    i64, unsq = (lambda x: b.const(np.int64(x))), (lambda x: b.op("Unsqueeze", x, b.ints(0)))
    out = [s.first]
    for p in pasts:
        dims = [d.dim_param or d.dim_value for d in p.type.tensor_type.shape.dim][1:]
        shape = b.op("Concat", unsq(s.rows), b.ints(*[0 if isinstance(d, str) else d for d in dims]), axis=0)
        zero = np.zeros(1, helper.tensor_dtype_to_np_dtype(p.type.tensor_type.elem_type))
        out.append(b.op("ConstantOfShape", shape, value=numpy_helper.from_array(zero)))
    out += [b.op("Range", i64(0), s.rows, i64(1))] + ([i64(0)] if offset else [])
    first_copy = b.op("Where", b.op("Equal", s.beam.columns, i64(0)), b.const(np.float64(0), np.float64),
                      b.const(NEG_INF, np.float64))  # (k,)
    n_1 = unsq(s.n)
    empty = lambda rows: b.op("ConstantOfShape", b.op("Concat", unsq(rows), b.ints(0), axis=0),  # noqa: E731
                              value=numpy_helper.from_array(np.zeros(1, np.int64)))
    out += [b.op("Expand", first_copy, b.op("Concat", n_1, s.beam.k_1d, axis=0)), b.op("Expand", i64(0), n_1),
            b.op("Expand", b.const(NEG_INF, np.float64), n_1), empty(s.n), b.op("Expand", i64(0), n_1),
            empty(s.rows), b.op("Greater", s.limits, i64(0))]
    return out


def _inline(graph: onnx.GraphProto, prefix: str, names: dict[str, str], b: Builder) -> list:
    """``graph``'s nodes and initializers (added to ``b``'s) with every value renamed: ``names``
    maps inputs to the values they become, every other name gets ``prefix/`` (``_dedupe`` then
    keeps one copy of the tensors the graphs share)."""
    def rename(x: str) -> str:
        return x if not x else names.get(x) or f"{prefix}/{x}"
    for tensor in graph.initializer:
        tensor.name = rename(tensor.name)
        b.initializers[tensor.name] = tensor
    for node in graph.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise TfspecError(f"--generate: the {prefix} graph's {node.op_type} node holds a subgraph; not inlined")
        node.input[:] = [rename(x) for x in node.input]
        node.output[:] = [rename(x) for x in node.output]
        node.name = f"{prefix}/{node.name}"
    return list(graph.node)


def _dedupe(initializers: list, node_lists: list, keep: set[str]) -> list:
    """One initializer per distinct tensor (weights the encoder and the step share, such as a tied
    embedding, and equal constants such as a sinusoid table), its readers pointed at it; ``keep``
    (inputs' defaults) stay as they are."""
    first: dict[tuple, str] = {}
    alias: dict[str, str] = {}
    out = []
    for tensor in initializers:
        key = (tensor.data_type, tuple(tensor.dims), tensor.raw_data or numpy_helper.to_array(tensor).tobytes())
        if tensor.name not in keep and key in first:
            alias[tensor.name] = first[key]
            continue
        if tensor.name not in keep:
            first[key] = tensor.name
        out.append(tensor)
    for nodes in node_lists:
        for node in nodes:
            node.input[:] = [alias.get(x, x) for x in node.input]
    return out
