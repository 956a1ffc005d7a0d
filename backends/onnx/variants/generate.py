"""``generate.onnx``: source ids in, best output ids out; the encoder and the whole search in
one graph of standard ONNX operators, for runtimes without tfspec's Python search.

Interface (the names of onnxruntime's retired ``BeamSearch`` op, so users recognise it)::

    input_ids         int64 (batch, src_len)  sources, right-padded; for a decoder-only model
                                              prompts, left-padded (without attention_mask: of
                                              one length, every id read as a token)
    attention_mask    int64 (batch, src_len)  1 at a source's (a prompt's) real tokens, 0 at its
                                              padding (a pad-equal id where the mask is 1 is a
                                              word); decoder-only models whose step graph takes
                                              masks (not those carrying convolution or recurrent
                                              state) and encoder-decoder models
    max_length        int64 ()                most tokens a hypothesis may have, end of sentence included
    num_beams         int64 ()                hypotheses kept per sentence; 1 is greedy search
    length_penalty    float ()                GNMT's alpha (``tfspec.search.length_penalty``)
    min_length        int64 ()                no end of sentence before this many tokens (0: none)
    max_extra         int64 ()                each row's limit is also its source length (the
                                              mask's ones) + max_extra, as ``translate --max-extra``
                                              (2**30: none)
 -> sequences         int64 (batch, out_len)  the best hypothesis, its end of sentence, then pad_id
    sequences_scores  float (batch,)          its length-penalised log-probability
    sequences_lengths int64 (batch,)          its tokens before the end of sentence: what
                                              ``tfspec translate`` prints

It mirrors ``tfspec.search.search`` (``output_limits``, ``banned_tokens``, ``beam_step``, ``_beam``), so it
gives the Python search's tokens. Greedy search is ``beam_step`` with k = 1 (the likeliest
allowed token ends or extends the one hypothesis, as ``_greedy`` decides), so one search serves
both and ``num_beams`` stays a runtime input. The graph is built from what ``emit`` writes: the
``encoder`` graph's nodes inlined, the ``decoder`` step graph as the body of a ``Loop``
(``search_loops``: its pasts loop-carried and growing, reordered by ``beam_rows`` in the body as
for the Python search; the batch narrowed when sentences stop). The step's weights are the
inner body's own initializers: read from the outer graph, two scopes up, onnxruntime did not
pre-pack them (disabling pre-packing left that search's time unchanged) and the search took
40-60% more CPU time (``small``, 64 tokens at batch 1 and 16). A tied embedding is therefore
stored twice, once for the encoder's lookup and once in the body; equal tensors within a graph
are stored once. The host does no work between steps.

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

from ..builder import Builder
from ..graphs import emit
from . import Variant, register, search_loops
from .search_graph import beam_constants

ALPHA_DIGITS = 1e6
"""``length_penalty`` arrives as a float32 (0.6 is 0.60000002): the graph reads it to six
decimals as the float64 Python's search computes with, so both penalise alike to the bit."""


@register
class Generate(Variant):
    """Composed from the encoder and step graphs (``compose``), not emitted node by node;
    written with ``export --generate``, opened on first use (``OnnxModel.generate_session``)."""

    name, order, emitted, fusable = "generate", 6, False, False

    @classmethod
    def opened_at_load(cls, provider: str) -> bool:
        return False


def emit_generate(graph: Graph, weights: dict[str, np.ndarray], opset: int = 18, dtype: str = "float32",
                  metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """The ``generate`` graph (module docstring) of an encoder-decoder or decoder-only ``graph``."""
    ports, spec = graph.ports, graph.spec
    if "tgt" not in ports or "frames" in ports:
        raise TfspecError(f"--generate: {spec.name} has no decoder that generates tokens (family {spec.family})")
    if "input_features" in ports:
        raise TfspecError(f"--generate: {spec.name}'s encoder reads a spectrogram, and generate.onnx takes source "
                          "token ids; decode with encoder.onnx and decoder.onnx (tfspec.transcription)")
    encoder = emit(graph, "encoder", weights, opset, dtype).graph if "src" in ports else None
    return compose(spec, encoder, emit(graph, "decoder", weights, opset, dtype).graph, opset, metadata)


def compose(spec, encoder: onnx.GraphProto | None, step: onnx.GraphProto, opset: int,
            metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """The ``generate`` graph around ``spec``'s ``encoder`` and ``step`` graphs as ``emit``
    writes them, float or quantised (``export --int8`` composes it again from the quantised
    ones, so that it computes what they compute)."""
    b = Builder(f"{spec.name}.generate", opset, "float32", {})
    b.scope = "generate"
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "src_len"])]
    ragged = encoder is None and any(i.name == "attention_mask" for i in step.input)
    if encoder is not None or ragged:
        inputs += [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "src_len"])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT64, []) for n in ("max_length", "num_beams")]
    inputs += [helper.make_tensor_value_info("length_penalty", TensorProto.FLOAT, [])]
    # Plain inputs, not inputs with a default: onnxruntime's JavaScript bindings and OpenVINO
    # cannot set those (they read them as constants), and onnxruntime warns about them at load.
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT64, []) for n in ("min_length", "max_extra")]
    s = _Setup(b, spec, encoder is not None, ragged)
    shared = {}
    if encoder is not None:
        shared = {o.name: (o.type.tensor_type.elem_type, len(o.type.tensor_type.shape.dim))
                  for o in encoder.output if o.name != "memory"}
        names = {"src": s.ids, "attention_mask": s.mask} | {name: name for name in shared}
        if any(i.name == "segments" for i in encoder.input):  # one segment, as OnnxModel.run feeds it
            names["segments"] = b.op("Mul", s.ids, b.const(np.int64(0)))
        b.nodes += _inline(encoder, "encoder", names, b.initializers)
    *_, best = search_loops.search(b, s, step, shared, _inline)
    b.nodes.append(helper.make_node("Cast", [best], ["sequences_scores"], to=TensorProto.FLOAT, name="generate/scores"))
    outputs = [helper.make_tensor_value_info("sequences", TensorProto.INT64, ["batch", "out_len"]),
               helper.make_tensor_value_info("sequences_scores", TensorProto.FLOAT, ["batch"]),
               helper.make_tensor_value_info("sequences_lengths", TensorProto.INT64, ["batch"])]
    graph = helper.make_graph(b.nodes, b.name, inputs, outputs, list(b.initializers.values()))
    _dedupe(graph)
    domains = sorted({n.domain for n in step.node if n.domain} | {n.domain for n in (encoder.node if encoder else [])
                                                                 if n.domain})  # int4's MatMulNBits
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                              + [helper.make_opsetid(d, 1) for d in domains], producer_name="tfspec", ir_version=10)
    helper.set_model_props(model, metadata or {})
    return model


class _Setup:
    """What the graph computes once, before the search: clean ids, k, each sentence's limit,
    per-step tables, a decoder-only model's prompts (names of graph values). ``ragged``: a
    decoder-only model's step graph takes masks, so prompts of different lengths share a batch."""

    def __init__(self, b: Builder, spec, encoder: bool, ragged: bool = False):
        vocab = spec.vocab
        self.encoder, self.vocab, self.ragged = encoder, vocab, ragged
        self.pad_banned = vocab.bos_id == vocab.pad_id != vocab.eos_id  # as tfspec.search.banned_tokens
        i64, unsq = (lambda v: b.const(np.int64(v))), (lambda x: b.op("Unsqueeze", x, b.ints(0)))
        size = vocab.size if self.encoder else vocab.tgt_size
        outside = b.op("Or", b.op("Less", "input_ids", i64(0)), b.op("GreaterOrEqual", "input_ids", i64(size)))
        ids = b.op("Where", outside, i64(vocab.unk_id), "input_ids")
        positions = spec.positional.limit
        mask = None  # a source's (a prompt's) real tokens: int64 (batch, src_len), 1 or 0
        if encoder or ragged:
            mask = b.op("Cast", b.op("Not", b.op("Equal", "attention_mask", i64(0))), to=TensorProto.INT64)
        if positions is not None and not ragged:  # a prompt leaves one position for bos, one for a new token
            cut = (b.ints(0), b.ints(positions - (0 if self.encoder else 2)), b.ints(1))
            ids, mask = b.op("Slice", ids, *cut), mask and b.op("Slice", mask, *cut)
        self.ids, self.mask, self.n = ids, mask, b.shape_of(ids, 0)
        self.beam = beam_constants(b, self.n, b.op("Max", "num_beams", i64(1)), vocab.stop_ids)
        self.prompt_mask = None  # int64 (batch, width): 1 at bos and a ragged batch's real prompt tokens
        if ragged:
            self.prompt, self.prompt_mask = self._packed(b, positions)
        elif not self.encoder:  # bos then the prompt, as `tfspec translate` feeds a decoder-only model
            bos = b.op("Expand", b.const(np.full((1, 1), vocab.bos_id, np.int64)),
                       b.op("Concat", unsq(self.n), b.ints(1), axis=0))
            self.prompt = b.op("Concat", bos, ids, axis=1)
        self.limits = self._limits(b, positions)
        self._tables(b, vocab.tgt_size)

    def _packed(self, b: Builder, positions: int | None) -> tuple[str, str]:
        """Each row's bos and real tokens (the mask's ones; the first positions - 2 of them
        where positions are bounded) moved in order to the row's end, and their mask: left
        padding, the convention of transformers and onnxruntime-genai, whatever padding the
        caller used. A TopK sorts the columns by a key: padding first, then bos, then the real
        tokens by column (the keys differ, so no tie order is relied on)."""
        i64 = lambda v: b.const(np.int64(v))  # noqa: E731
        real = self.mask
        if positions is not None:  # a prompt leaves one position for bos, one for a new token
            kept = b.op("LessOrEqual", b.op("CumSum", real, i64(1)), i64(positions - 2))
            real = b.op("Mul", real, b.op("Cast", kept, to=TensorProto.INT64))
        width = b.shape_of(self.ids, 1)
        columns, twice = b.op("Range", i64(0), width, i64(1)), b.op("Mul", width, i64(2))  # (L,), 2L
        keys = b.op("Where", b.op("Cast", real, to=TensorProto.BOOL),
                    b.op("Add", b.op("Mul", columns, i64(2)), b.op("Add", twice, i64(2))), columns)
        column = lambda x: b.op("Expand", x, b.op("Concat", b.op("Unsqueeze", self.n, b.ints(0)),  # noqa: E731
                                                    b.ints(1), axis=0))  # (batch, 1)
        bos_key = b.op("Reshape", b.op("Add", twice, i64(1)), b.ints(1, 1))
        keys = b.op("Concat", keys, column(bos_key), axis=1)
        order = b.op("TopK", keys, b.op("Unsqueeze", b.op("Add", width, i64(1)), b.ints(0)), axis=1, largest=0,
                     outputs=2)[1]
        tokens = b.op("Concat", self.ids, column(b.const(np.full((1, 1), self.vocab.bos_id, np.int64))), axis=1)
        mask = b.op("Concat", real, column(b.const(np.ones((1, 1), np.int64))), axis=1)
        tokens, mask = (b.op("GatherElements", x, order, axis=1) for x in (tokens, mask))
        if positions is not None:  # no row has more: the columns before are padding everywhere
            last = (b.ints(-positions), b.ints(2**62), b.ints(1))
            tokens, mask = b.op("Slice", tokens, *last), b.op("Slice", mask, *last)
        return tokens, mask

    def _limits(self, b: Builder, positions: int | None) -> str:
        """Each sentence's most output tokens (``tfspec.search.output_limits``), capped where positions
        are bounded so that the sequence, its last token included, fits them
        (``Positional.room``); 0 for an empty source (such a sentence is never decoded)."""
        i64 = lambda v: b.const(np.int64(v))  # noqa: E731
        if self.encoder:
            length = b.op("ReduceSum", self.mask, b.ints(1), keepdims=0)
            limits = b.op("Min", b.op("Add", length, "max_extra"), "max_length")
        else:
            limits = b.op("Expand", b.op("Min", "max_extra", "max_length"), b.op("Unsqueeze", self.n, b.ints(0)))
        limits = b.op("Max", limits, b.op("Max", "min_length", i64(1)))
        if self.encoder:  # an empty source gives an empty output, as translate prints for an empty line
            limits = b.op("Where", b.op("Greater", length, i64(0)), limits, i64(0))
        if positions is None:
            return limits
        if self.ragged:  # each row's own first step: bos and its prompt
            fed = b.op("ReduceSum", self.prompt_mask, b.ints(1), keepdims=0)
        else:  # the first step's tokens
            fed = i64(1) if self.encoder else b.op("Add", b.shape_of(self.ids, 1), i64(1))
        return b.op("Min", limits, b.op("Sub", i64(positions), fed))

    def _tables(self, b: Builder, vocab: int) -> None:
        """Per-step values, one row per step t (the loop gathers row t): whether end of sequence
        is still banned, the top-k width to ask the step for, the length penalty of length t + 1."""
        i64 = lambda v: b.const(np.int64(v))  # noqa: E731
        steps = b.op("Range", i64(0), b.op("ReduceMax", self.limits, keepdims=0), i64(1))
        self.early = b.op("Less", steps, "min_length")
        banned = b.op("Add", b.op("Mul", b.op("Cast", self.early, to=TensorProto.INT64), i64(len(self.beam.stops))),
                      i64(int(self.pad_banned)))
        # 2k candidates always leave k words; the decoders' clamp to the vocabulary
        self.widths = b.op("Unsqueeze", b.op("Min", b.op("Add", self.beam.two_k, banned), i64(vocab)), b.ints(1))
        f64 = lambda v: b.const(np.float64(v), np.float64)  # noqa: E731
        alpha = b.op("Div", b.op("Round", b.op("Mul", b.op("Cast", "length_penalty", to=TensorProto.DOUBLE),
                                               f64(ALPHA_DIGITS))), f64(ALPHA_DIGITS))
        self.penalties = b.op("Pow", b.op("Div", b.op("Cast", b.op("Add", steps, i64(6)), to=TensorProto.DOUBLE),
                                          f64(6)), alpha)  # ((5 + t + 1) / 6) ** alpha


def _inline(graph: onnx.GraphProto, prefix: str, names: dict[str, str], into: dict) -> list:
    """``graph``'s nodes and initializers (added to ``into``) with every value renamed: ``names``
    maps inputs to the values they become, every other name gets ``prefix/`` (``_dedupe`` then
    keeps one copy of the tensors the graphs share)."""
    def rename(x: str) -> str:
        return x if not x else names.get(x) or f"{prefix}/{x}"
    for tensor in graph.initializer:
        tensor.name = rename(tensor.name)
        into[tensor.name] = tensor
    for node in graph.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise TfspecError(f"--generate: the {prefix} graph's {node.op_type} node holds a subgraph; not inlined")
        node.input[:] = [rename(x) for x in node.input]
        node.output[:] = [rename(x) for x in node.output]
        node.name = f"{prefix}/{node.name}"
    return list(graph.node)


def _dedupe(graph: onnx.GraphProto, outer: dict[str, str] | None = None) -> None:
    """One initializer per distinct tensor in ``graph`` and in each Loop body (equal constants of
    the encoder and the step, such as a sinusoid table), its readers pointed at it, those in the
    bodies too (``outer``: the enclosing graphs' renamings)."""
    seen: dict[tuple, str] = {}
    alias = dict(outer or {})
    kept = []
    for tensor in graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:  # a streamed export's: equal where it points
            key = (tensor.data_type, tuple(tensor.dims), tuple((e.key, e.value) for e in tensor.external_data))
        else:
            key = (tensor.data_type, tuple(tensor.dims), tensor.raw_data or numpy_helper.to_array(tensor).tobytes())
        if key in seen:
            alias[tensor.name] = seen[key]
            continue
        seen[key] = tensor.name
        kept.append(tensor)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for node in graph.node:
        node.input[:] = [alias.get(x, x) for x in node.input]
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _dedupe(attribute.g, alias)
