"""Graph variants: what each ONNX file of an export is, one class per module, found by scanning
this package (a new variant is a new file here).

A variant says how one kind of graph works: which IR ports it reads and writes, how token
inputs and padding come in, how the state a decoder carries between steps comes in and goes
out (the cache policy attention's lowering asks: append, write at an offset, extend in place),
where positions start, what it outputs, when an export writes it and where onnxruntime opens
it. ``graphs.emit`` runs the lowerings with one; the lowerings ask it through ``graphs.Emit``
and read no variant names. The base class is the full-sequence graph's behaviour: no state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from onnx import TensorProto

from tfspec.errors import TfspecError
from tfspec.ir import Graph
from tfspec.registry import discover


@dataclass(frozen=True)
class Asked:
    """The export options that add graphs emitted from the IR (``export --static-cache``,
    ``--shortlist``, ``--fused``)."""

    static: bool = False
    shortlist: bool = False
    fused: bool = False


class Variant:
    """One kind of graph (see the module docstring); instances hold nothing, ``Emit`` holds the
    graph being emitted."""

    name: ClassVar[str]
    """The graph's kind: its file stem (``<name>.onnx``) and its key in ``tfspec.json``."""
    order: ClassVar[int]
    """Its place in an export's list of graphs."""
    step: ClassVar[bool] = False
    """One decoding step: the decoder's layers carry state, only the next token is projected,
    cross-attention reads what the encoder graph computed."""
    emitted: ClassVar[bool] = True
    """Emitted from the IR by ``graphs.emit`` (generate.onnx is composed from emitted graphs)."""
    listed: ClassVar[bool] = True
    """A graph of tfspec's own exports, listed in ``tfspec.json`` (genai's is its own format)."""
    fusable: ClassVar[bool] = True
    """``export --fused`` rewrites it with onnxruntime's fused CPU operators (``passes.fused``)."""
    one_stream: ClassVar[bool] = True
    """Every attention's queries come from one token stream (the encoder, the steps), so that
    ``passes.fused`` expands a mask once for all the layers that read it."""
    captured: ClassVar[bool] = False
    """Its shapes stay fixed from step to step: CUDA sessions capture it as a CUDA graph."""
    rows_per_source: ClassVar[bool] = False
    """Per-source inputs (cross keys/values) come gathered to one row per batch row (``cross_rows``)
    rather than one row per source that a group of rows shares."""
    every_position: ClassVar[bool] = False
    """A step graph that projects every new position, not only the last (optimum's decoders
    are also called on a whole target to score it)."""
    preallocated: ClassVar[bool] = False
    """Self-attention keys are a whole ``max_len`` cache, written at ``offset``: slots not yet
    written hold stale values (masked) and key positions are slot indices."""

    @classmethod
    def written(cls, graph: Graph, asked: Asked) -> bool:
        """Whether an export of ``graph`` with ``asked`` writes this graph."""
        return False

    @classmethod
    def opened_at_load(cls, provider: str) -> bool:
        """Whether ``OnnxModel`` opens it when loading an export on ``provider`` (otherwise on
        first use, or never where it cannot run)."""
        return True

    def ports(self, graph: Graph) -> tuple[set[str], list[str]]:
        """The IR nodes this graph is fed (inputs, or values read through other inputs) and those
        it computes for its outputs."""
        ports = graph.ports
        fed = {ports[p] for p in ("src", "tgt", "segments", "frames") if p in ports}
        outputs = ("logits", "pooled", "log_probs") if "logits" in ports else ("memory", "pooled")  # ViTModel
        return fed, [ports[p] for p in outputs if p in ports] + [ports[p] for p in graph.outputs]

    def declare(self, e) -> None:
        """Inputs declared before any node is lowered (the shortlist's candidates)."""

    def tokens(self, e, node) -> str:
        """Declare a token input and its padding mask (int64 (batch, len), 1 at real tokens)."""
        b, seq = e.b, node.shape[1]
        length = {"S": "src_len", "T": "tgt_len"}[seq]
        tokens = b.input(node.name, ["batch", length], TensorProto.INT64)
        if seq not in e.lengths:
            e.lengths[seq] = b.shape_of(tokens, 1)
        if not node.attrs.get("optional"):
            padding(e, seq, b.input(mask_name(e.graph, node.name), ["batch", length], TensorProto.INT64))
        return tokens

    def fed(self, e, node) -> None:
        """``node`` is fed, not computed: the encoder's output, read through ``cross.*`` inputs."""
        e.bias["S"] = self.per_source(e, "memory_bias", ["src_batch", 1, 1, "src_len"])

    def carries(self, node) -> bool:
        """Whether ``node`` carries state from one step to the next in this graph."""
        return False

    def state(self, e, node, role: str, shape) -> str:
        """The state ``node`` carries in as ``role`` (``shape`` batch first)."""
        raise TfspecError(f"{node.name}: a {self.name} graph carries no state")

    def per_source(self, e, name: str, shape) -> str:
        """Input ``name`` the encoder computed per source (cross keys/values, ``memory_bias``)."""
        return e.cached(("input", name), lambda: e.b.input(name, shape))

    def present(self, e, node, role: str, value: str, shape) -> str:
        """Expose ``value`` as the state ``node`` passes to the next step; use the returned name."""
        return e.b.output(f"present.{node.name}.{role}", value, shape)

    def positions(self, e, seq: str, x: str | None) -> str:
        """int64 positions of the vectors of ``x``: (B, L) per row where a mask gave them,
        else (L,) from 0."""
        if seq in e.rows:
            return e.rows[seq]
        b = e.b
        length = e.lengths.get(seq) or b.shape_of(x, 1)
        return b.op("Range", b.const(np.int64(0)), length, b.const(np.int64(1)))

    def offset(self, e) -> str:
        """Target positions already decoded (step graphs)."""
        raise TfspecError(f"a {self.name} graph decodes no steps")

    def memory_cached(self, e, count: int) -> str | None:
        """int64 (1,): how many of a stack's ``count`` memory tokens the cache holds already (their
        keys and values, computed at the first step); None: none (a graph without state)."""
        return None

    def attend(self, e, node, plain: bool, q: str, k: str, v: str) -> str | None:
        """Self-attention of ``node`` computed by the variant itself, or None (the lowering's)."""
        return None

    def cache(self, e, node, k: str, v: str) -> tuple[str, str]:
        """The keys and values (B, g, L, d) self-attention ``node`` attends over, given this
        call's: with state, the past ones joined and passed on."""
        return k, v

    def append(self, e, node, role: str, new: str, width: int) -> str:
        """A carried (B, L, width) sequence (latent attention's latent): the past one then ``new``."""
        return new

    def logits(self, e, x: str, weight: str, bias: str | None) -> str:
        """The output projection of ``x``."""
        return e.b.linear(x, weight, bias, table=True)

    def outputs(self, e, env: dict) -> None:
        """Declare the graph's outputs from the lowered values ``env``."""
        b, graph, ports = e.b, e.graph, e.graph.ports
        names = {"B": "batch", "S": "src_len", "T": "tgt_len"}
        for port in ("logits", "log_probs"):  # log_probs: a CTC head's frame log-probabilities
            if port in ports:
                shape = graph.node(ports[port]).shape
                value = b.sequence(env[ports[port]], shape[-1]) if len(shape) == 3 else env[ports[port]]
                b.output(port, value, [names.get(d, d) for d in shape])
        if "logits" not in ports:  # an image encoder without a head: its last hidden states
            b.output("memory", b.sequence(env[ports["memory"]], graph.spec.d_model), ["batch", "src_len",
                                                                                      graph.spec.d_model])
        for port in graph.outputs:  # a dual encoder's scores and embeddings: (texts or images, ...)
            shape = graph.node(ports[port]).shape
            b.output(port, env[ports[port]], [{"B": "batch", "N": "images"}.get(d, d) for d in shape])
        pooled(e, env)


def pooled(e, env: dict) -> None:
    """The ``pooled`` output (batch, d_model) where the model has one."""
    if "pooled" in e.graph.ports:
        e.b.output("pooled", env[e.graph.ports["pooled"]], ["batch", e.graph.spec.d_model])


def mask_name(graph: Graph, port: str) -> str:
    """The mask input of token input ``port`` in full-sequence and encoder graphs, named as
    transformers and optimum name them: ``attention_mask`` for the source (or a decoder-only
    model's tokens), ``decoder_attention_mask`` for an encoder-decoder's target."""
    return "decoder_attention_mask" if port == "tgt" and "src" in graph.ports else "attention_mask"


def padding(e, seq: str, mask: str) -> None:
    """Padding and positions of ``seq`` from its ``mask`` (B, L), 1 at real tokens, as
    ``TorchModel.run`` reads ``src_mask``/``tgt_mask``: where some row starts with padding
    (prompts of different lengths, left-padded), each row counts positions among its real
    tokens; otherwise positions are the index."""
    b, zero = e.b, e.b.const(np.int64(0))
    e.pads[seq] = b.op("Equal", mask, zero)
    real = b.op("Cast", b.op("Not", e.pads[seq]), to=TensorProto.INT64)
    counted = b.op("Max", b.op("Sub", b.op("CumSum", real, b.const(np.int64(1))), b.const(np.int64(1))), zero)
    index = b.op("Unsqueeze", b.op("Range", zero, e.lengths[seq], b.const(np.int64(1))), b.ints(0))  # (1, L)
    first = b.op("Slice", real, b.ints(0), b.ints(1), b.ints(1))  # (B, 1): whether each row starts real
    e.rows[seq] = b.op("Where", b.op("Equal", b.op("ReduceMin", first, keepdims=0), zero), counted, index)


VARIANTS: dict[str, type[Variant]] = {}
"""Each variant by its name."""


def register(variant: type[Variant]) -> type[Variant]:
    """Class decorator: record ``variant`` under its name (a second of the same name is refused)."""
    if variant.name in VARIANTS:
        raise ValueError(f"two ONNX graph variants {variant.name!r}")
    VARIANTS[variant.name] = variant
    return variant


def variants() -> list[type[Variant]]:
    """Every variant in export order, its modules imported first."""
    discover(__name__)
    return sorted(VARIANTS.values(), key=lambda v: v.order)


def variant(name: str) -> type[Variant]:
    """The variant ``name``; an unknown one is an error naming those there are."""
    found = {v.name: v for v in variants()}
    if name not in found:
        raise TfspecError(f"no ONNX graph variant {name!r} (there are {', '.join(found)})")
    return found[name]


def listed() -> list[str]:
    """The graph kinds a ``tfspec.json`` may list."""
    return [v.name for v in variants() if v.listed]


def written(graph: Graph, asked: Asked) -> list[str]:
    """The graphs emitted from the IR that an export of ``graph`` with ``asked`` writes, in order."""
    return [v.name for v in variants() if v.emitted and v.written(graph, asked)]
