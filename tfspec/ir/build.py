"""Lowering a validated spec into the IR (``build_graph``).

The structure follows §3 of the paper: token embedding (x sqrt(d_model)) + positional
encoding, dropout, N layers of residual sub-layers, an optional final norm, and the
pre-softmax projection, tied to the embeddings as the spec says. Each layer kind lowers its
own op (``tfspec.layers``); this module only wires them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import count

from tfspec.ir.graph import Graph
from tfspec.norms import NORMS
from tfspec.spec import memory_tokens
from tfspec.spec.schema import Spec, Stack

SEQ = {"encoder": "S", "decoder": "T"}
INPUT = {"encoder": "src", "decoder": "tgt"}


@dataclass
class LayerBuilder:
    """What a layer kind needs to lower itself: the graph, the spec and where it sits."""

    graph: Graph
    spec: Spec
    stack: str
    seq: str
    memory: str | None = None
    memory_seq: str = "S"
    share: tuple[str, str] | None = None
    """(prefix, owner prefix): parameters declared under ``prefix`` tie to the owner's instead
    (a universal stack's layers all use layer 0's weights)."""
    per_stack: dict[str, str] = field(default_factory=dict)
    """Role -> the parameter the stack's layers share, named after the op that declared it."""

    def op(self, name: str, op: str, inputs: list[str], *, attrs=None, params=None, component=None,
           layer=None, shape=None) -> str:
        """Add an op; ``params`` maps role -> (shape, init) to declare, or -> a name to tie.
        What the op computes and keeps is its definition's (``tfspec/ir/ops``)."""
        roles = {}
        for role, declared in (params or {}).items():
            if isinstance(declared, str):
                roles[role] = declared
            elif self.share is not None and name.startswith(self.share[0]):
                roles[role] = f"{self.share[1]}{name[len(self.share[0]):]}.{role}"
            else:
                roles[role] = self.graph.add_param(f"{name}.{role}", *declared)
        component = component or (layer.component if layer is not None else "")
        return self.graph.add_op(name, op, inputs, shape or ("B", self.seq, self.spec.d_model), attrs=attrs,
                                 params=roles, component=component, stack=self.stack, layer=layer)

    def stack_param(self, name: str, role: str, shape: tuple[int, ...], init: str):
        """The ``params`` entry of op ``name`` for a parameter all layers of the stack share
        (T5's relative attention bias): a declaration for the first op that asks, then a tie."""
        owner = self.per_stack.setdefault(role, f"{name}.{role}")
        return (shape, init) if owner == f"{name}.{role}" else owner

    def norm(self, name: str, x: str, width: int | None = None, rows: tuple = ("B", None)) -> str:
        """The spec's norm kind (``norm_type``, ``tfspec/norms``: LayerNorm, RMSNorm, ...), its op and
        parameters as the kind declares them (``norm_bias`` and ``norm_gain`` drop a bias or a gain);
        over ``width`` features (d_model unless narrower embeddings are normed: ALBERT, ELECTRA) of
        ``rows`` ((B, seq) by default; (B,) for one pooled vector per sequence)."""
        s, d = self.spec, width or self.spec.d_model
        kind = NORMS[s.norm_type]
        rows = tuple(self.seq if r is None else r for r in rows)
        return self.op(name, kind.op, [x], attrs={"eps": s.norm_eps}, component="norm", params=kind.params(s, d),
                       shape=(*rows, d))


def build_graph(spec: Spec) -> Graph:
    """Lower ``spec`` into a fresh IR graph."""
    graph = Graph(spec.name, spec)
    memory = embedding = None
    if spec.encoder is not None:
        b = LayerBuilder(graph, spec, "encoder", "S")
        x, embedding = _embed(b, spec.vocab.size, tie=None)
        memory = graph.ports["memory"] = _stack(b, spec.encoder, x)
        out, out_seq = memory, "S"
        if spec.pooler:  # BERT: the first position's vector through a tanh layer
            graph.ports["pooled"] = b.op("encoder.pooler", "pooler", [memory], component="pooler",
                                         params={"w_pool": ((spec.d_model, spec.d_model), "xavier_uniform"),
                                                 "b_pool": ((spec.d_model,), "zeros")},
                                         shape=("B", spec.d_model))
        if spec.image_pooler is not None:  # BEiT: the patches' mean through a LayerNorm
            graph.ports["pooled"] = spec.image_pooler.lower(b, memory)
        if spec.dual is not None:  # CLIP, SigLIP: the image tower and the scores (tfspec.spec.dual)
            tower = build_tower(graph, spec.dual.vision, "vision")
            graph.ports |= (outputs := spec.dual.lower(LayerBuilder(graph, spec, "", "S"), memory, tower))
            graph.outputs = list(outputs)
            return graph
    if spec.image_encoder is not None:  # TrOCR: an encoder spec of its own sizes (tfspec.spec.image_encoder)
        b, hidden = build_encoder(graph, spec.image_encoder.vision)  # the decoder's reading: d_model from d
        memory = spec.image_encoder.lower(b, hidden, LayerBuilder(graph, spec, "decoder", "S"))
    if spec.decoder is not None:
        b = LayerBuilder(graph, spec, "decoder", "T", memory=memory)
        tie = embedding if spec.tie_embeddings in ("all", "inputs") else None
        x, embedding = _embed(b, spec.vocab.tgt_size, tie=tie)
        out, out_seq = _stack(b, spec.decoder, x), "T"
    if spec.head is not None:  # in place of the token projection (tfspec.spec.heads)
        graph.ports["logits"] = spec.head.lower(LayerBuilder(graph, spec, "", out_seq), out, graph.ports.get("pooled"))
        return graph
    if spec.patches is not None or spec.waveform is not None:  # no head (ViTModel, Wav2Vec2Model): memory out
        return graph
    vocab = spec.vocab.tgt_size if spec.decoder is not None else spec.vocab.size
    _project(LayerBuilder(graph, spec, "", out_seq), out, vocab, embedding)
    return graph


def _embed(b: LayerBuilder, vocab: int, tie: str | None) -> tuple[str, str | None]:
    """Token ids -> embeddings (x sqrt(d_model)) + positions -> dropout (§3.4, §3.5, §5.4);
    an encoder reading frames projects them instead (no embedding matrix: None). ``embed_norm``
    follows the positions, or precedes them where the stack's ``embed_norm_on`` says. Narrower
    embeddings are projected to d_model before positions or after the dropout, as the spec's
    ``embed_projection`` says."""
    s, stack, projection = b.spec, b.stack, b.spec.embed_projection
    width, own = s.embed_width, getattr(b.spec, b.stack)  # own: the Stack, for its embedding options
    if s.frames is not None and stack == "encoder":
        x, embedding = s.frames.lower(b), None
    elif s.patches is not None and stack == "encoder":  # ViT: patches, class token, positions
        x, embedding = s.patches.lower(b), None
    elif s.spectrogram is not None and stack == "encoder":  # Whisper: conv stem, its own positions, dropout
        return s.spectrogram.lower(b), None
    elif s.waveform is not None and stack == "encoder":  # wav2vec 2.0: feature encoder, position convolution
        return s.waveform.lower(b), None
    else:
        tokens = b.op(INPUT[stack], "input", [], attrs={"dtype": "int64", "vocab": vocab}, shape=("B", b.seq))
        b.graph.ports[INPUT[stack]] = tokens
        weight = tie or ((vocab, width), f"normal:{width ** -0.5}")
        scaled = s.embed_scale if own.embed_scale is None else own.embed_scale
        scale = (math.sqrt(s.d_model) if scaled else 1.0) * s.embed_multiplier
        x = b.op(f"{stack}.embed", "embedding", [tokens], attrs={"vocab": vocab, "scale": scale},
                 params={"weight": weight}, component="embedding", shape=("B", b.seq, width))
        embedding = b.graph.node(x).params["weight"]
    if projection is not None and projection.projects == "tokens":  # OPT-350m: positions at d_model
        x, width = projection.lower_in(b, x), s.d_model
    norm_on = own.embed_norm_on if s.embed_norm else None
    if norm_on == "tokens":  # BlenderbotSmall's decoder: the positions join after the norm
        x = b.norm(f"{stack}.embed_norm", x, width)
    if s.positional.definition.embedded:
        params = s.positional.definition.embedding_params(s.positional, width)  # a learned table
        x = b.op(f"{stack}.pos", "positional", [x], attrs=s.positional.model_dump(), params=params,
                 component="positional", shape=("B", b.seq, width))
    if s.image is not None:  # the Image Transformer's row + column + channel embeddings
        i = s.image
        params = {axis: ((size, s.d_model), "normal:0.02")
                  for axis, size in (("rows", i.height), ("columns", i.width), ("channels", i.channels))}
        x = b.op(f"{stack}.pos", "image_positional", [x], params=params, component="positional",
                 attrs={"height": i.height, "width": i.width, "channels": i.channels})
    if s.segments and stack == "encoder":
        ids = b.op("segments", "input", [], attrs={"dtype": "int64", "vocab": s.segments, "optional": True},
                   shape=("B", b.seq))
        b.graph.ports["segments"] = ids
        x = b.op(f"{stack}.segment", "segment_embedding", [x, ids], component="embedding",
                 params={"weight": ((s.segments, width), "normal:0.02")}, shape=("B", b.seq, width))
    if norm_on == "sum":
        x = b.norm(f"{stack}.embed_norm", x, width)
    x = b.op(f"{stack}.embed_dropout", "dropout", [x], attrs={"p": s.dropout}, shape=("B", b.seq, width))
    if projection is not None and projection.projects == "inputs":  # ALBERT, ELECTRA: the normed sum
        x = projection.lower_in(b, x)
    return x, embedding


def _stack(b: LayerBuilder, stack: Stack, x: str) -> str:
    """N layers as the spec's plan resolves them, then the final norm pre-norm stacks need; a
    stack's memory tokens before its sequence and dropped after (``tfspec.spec.memory_tokens``)."""
    halting, streams, sublayer_index = None, b.spec.residual_streams, count()
    if stack.memory_tokens:
        x = memory_tokens.lower_in(b, x, stack.memory_tokens)
    if streams is not None:  # hyper-connections: n copies of the embeddings (tfspec.spec.streams)
        x = b.op(f"{b.stack}.streams_expand", "streams_expand", [x], attrs={"streams": streams.count},
                 component="streams", shape=("B", b.seq, streams.count * b.spec.d_model))
    for layer in b.spec.plan(b.stack):
        prefix = f"{b.stack}.layers.{layer.index}."
        b.share = (prefix, f"{b.stack}.layers.{layer.owner}.") if layer.owner != layer.index else None
        layer_input = x
        if stack.shared:  # a new step of a universal stack
            step_input = x = b.op(f"{prefix}timestep", "timestep", [x], attrs={
                "step": layer.index, "positions": b.spec.positional.kind == "sinusoidal",
                **b.spec.positional.model_dump(include={"layout", "spacing", "offset"})})
        if streams is not None:
            for sublayer, name in zip(layer.sublayers, layer.names):
                x = _hyper(b, sublayer, name, x, next(sublayer_index))
        elif layer.residual == "sequential":
            for sublayer, name in zip(layer.sublayers, layer.names):
                x = _residual(b, sublayer, name, x)
        else:
            x = _parallel(b, layer, x)
        if stack.layer_drop:  # LayerDrop: in training, the layer's input in place of its output at rate p
            x = b.op(f"{prefix}drop", "layer_drop", [layer_input, x], attrs={"p": stack.layer_drop}, component="drop")
        if stack.act is not None:  # the step's last sub-layer: update the halting state
            inputs = [step_input, x] + ([halting] if halting is not None else [])
            halting = b.op(f"{prefix}act", "act", inputs, component="act",
                           attrs={"threshold": stack.act.threshold, "penalty": stack.act.penalty,
                                  "last": layer.index == stack.num_layers - 1},
                           params={"w_halt": ((1, b.spec.d_model), "xavier_uniform"), "b_halt": ((1,), "ones")},
                           shape=("B", b.seq, b.spec.d_model + 3))
    b.share = None
    if halting is not None:  # the positions' states where each halted
        x = b.op(f"{b.stack}.act_state", "act_state", [halting])
    if streams is not None:  # the streams' sum
        x = b.op(f"{b.stack}.streams_merge", "streams_merge", [x], attrs={"streams": streams.count},
                 component="streams")
    if b.spec.uses_final_norm:
        x = b.norm(f"{b.stack}.norm", x)
    return memory_tokens.lower_out(b, x, stack.memory_tokens) if stack.memory_tokens else x


def _residual(b: LayerBuilder, layer, name: str, x: str) -> str:
    """post: Norm(x + Dropout(f(x))) (§3.1); pre: x + Dropout(f(Norm(x))); sandwich:
    x + Dropout(Norm'(f(Norm(x)))); output: x + Dropout(Norm(f(x))). A sub-layer without
    ``input_norm`` reads x itself where pre and sandwich would normalise it."""
    norm = b.spec.norm
    h = b.norm(f"{name}_norm", x) if norm in ("pre", "sandwich") and layer.input_norm else x
    y = layer.lower(b, name, _shift(b, layer, name, h))
    if norm in ("sandwich", "output"):
        y = b.norm(f"{name}_{'out_' if norm == 'sandwich' else ''}norm", y)
    y = _gain(b, name, y)
    y = b.op(f"{name}_dropout", "dropout", [y], attrs={"p": b.spec.dropout})
    y = b.op(f"{name}_add", "add", [x, y], attrs={"scale": b.spec.residual_scale * layer.residual_step})
    return b.norm(f"{name}_norm", y) if norm == "post" else y


def _hyper(b: LayerBuilder, layer, name: str, x: str, k: int) -> str:
    """Hyper-connections around the stack's ``k``-th sub-layer (Zhu et al. 2024, §2): its
    connections from the streams ``x``, h_0 = A_m^T x, then
    A_r^T x + B^T Dropout(f(Norm(h_0))) (``tfspec.spec.streams``)."""
    s, streams = b.spec, b.spec.residual_streams
    n, width = streams.count, streams.count * b.spec.d_model
    attrs = {"streams": n, "dynamic": streams.dynamic, "norm": {"kind": s.norm_type, "eps": s.norm_eps}}
    weights = b.op(f"{name}_streams", "streams_weights", [x], attrs=attrs, component="streams",
                   params=streams.weight_params(s, k), shape=("B", b.seq, n * (n + 2)))
    h = b.op(f"{name}_read", "streams_read", [x, weights], attrs={"streams": n}, component="streams")
    h = b.norm(f"{name}_norm", h) if layer.input_norm else h
    y = _gain(b, name, layer.lower(b, name, _shift(b, layer, name, h)))
    y = b.op(f"{name}_dropout", "dropout", [y], attrs={"p": s.dropout})
    return b.op(f"{name}_write", "streams_write", [x, y, weights], component="streams", shape=("B", b.seq, width),
                attrs={"streams": n, "scale": s.residual_scale * layer.residual_step})


def _parallel(b: LayerBuilder, layer, x: str) -> str:
    """x + Dropout(f(Norm_f(x))) + Dropout(g(Norm_g(x))): both sub-layers read the layer's
    input (GPT-J, GPT-NeoX), through one shared norm (named after the first) or one each."""
    shared = b.norm(f"{layer.names[0]}_norm", x) if layer.residual == "parallel_shared_norm" else None
    out = x
    for sublayer, name in zip(layer.sublayers, layer.names):
        y = _gain(b, name, sublayer.lower(b, name, _shift(b, sublayer, name, shared or b.norm(f"{name}_norm", x))))
        y = b.op(f"{name}_dropout", "dropout", [y], attrs={"p": b.spec.dropout})
        out = b.op(f"{name}_add", "add", [out, y], attrs={"scale": b.spec.residual_scale * sublayer.residual_step})
    return out


def _shift(b: LayerBuilder, layer, name: str, h: str) -> str:
    """mu * h_t + (1 - mu) * h_{t-1}, a learned mu per feature (``token_shift``: RWKV's token
    shift), or ``h`` itself for a layer without one."""
    if not layer.token_shift:
        return h
    return b.op(f"{name}_shift", "token_shift", [h], component="shift",
                params={"mix": ((b.spec.d_model,), "constant:0.5")})


def _gain(b: LayerBuilder, name: str, y: str) -> str:
    """diag(gamma) y, a learned gain per feature on a sub-layer's output (``sublayer_gain``:
    LayerScale, CaiT §2, DINOv2), or alpha y, one learned scalar (``sublayer_gain_shape: scalar``:
    ReZero, Bachlechner et al. 2020, eq. 5), or ``y`` itself without one."""
    start = b.spec.sublayer_gain
    if start is None:
        return y
    init = "ones" if start == 1.0 else f"constant:{start}"
    width = b.spec.d_model if b.spec.sublayer_gain_shape == "feature" else 1  # broadcast over the features
    return b.op(f"{name}_gain", "channel_gain", [y], component="gain", params={"gain": ((width,), init)})


def _project(b: LayerBuilder, x: str, vocab: int, embedding: str | None) -> None:
    """The pre-softmax linear layer, sharing the embedding matrix when tied (§3.4); it reads
    rows of the embeddings' width, which narrower embeddings reach through the masked-LM head's
    dense layer (ALBERT) or the embed projection's way out (OPT-350m)."""
    s, width = b.spec, b.spec.embed_width
    if s.head_transform:  # BERT's masked-LM head: act(x W + b), normalised, then the projection
        narrower = {"features": width} if width != s.d_model else {}
        x = b.op("head.dense", "dense", [x], attrs={"activation": s.activation, **narrower}, component="head",
                 params={"weight": ((width, s.d_model), "xavier_uniform")} | (
                     {"bias": ((width,), "zeros")} if s.has_bias("head") else {}),
                 shape=("B", b.seq, width))
        x = b.norm("head.norm", x, width)
    elif s.embed_projection is not None:
        x = s.embed_projection.lower_out(b, x, "decoder" if s.decoder is not None else "encoder")
    params = {"weight": embedding if s.ties_output else ((vocab, width), "xavier_uniform")}
    if s.output_bias:
        params["bias"] = ((vocab,), "zeros")
    attrs = {"vocab": vocab, "scale": s.output_scale, "softcap": s.output_softcap}
    if width != s.d_model:  # the FLOP count reads it
        attrs["features"] = width
    if s.softmax_mixture is not None:  # log-probabilities of K mixed softmaxes (tfspec.spec.softmax_mixture)
        b.graph.ports["logits"] = s.softmax_mixture.lower(b, x, vocab, params, attrs)
        return
    b.graph.ports["logits"] = b.op("output", "projection", [x], attrs=attrs, params=params,
                                   component="projection", shape=("B", b.seq, vocab))


# A second tower in one graph: a whole spec (the image tower of a dual encoder, ``tfspec.spec.dual``)
# lowered beside the spec the graph was built from, its ops and parameters named under ``<tower>.``
# and its nodes' ``stack`` the tower's name, so that analyses read its sizes (``Graph.spec_of``) and
# the backends lower it as they lower any encoder.

TOWER_SEQ = "V"
"""The tower's sequence symbol: its own length, and no token padding (which is ``S``'s)."""


@dataclass
class TowerBuilder(LayerBuilder):
    """A ``LayerBuilder`` whose ops and parameters are named under ``<tower>.``, whose nodes belong
    to stack ``tower`` with a batch ``N`` of their own; the layer kinds lower through it unchanged
    (they see ``encoder``, the stack of the tower's own spec)."""

    tower: str = "vision"
    ports: dict[str, str] = field(default_factory=dict)
    """The tower's own endpoints (``memory``), apart from the graph's."""

    def op(self, name: str, op: str, inputs: list[str], **kwargs) -> str:
        prefix, share, stack = f"{self.tower}.", self.share, self.stack
        shape = kwargs.pop("shape", None) or ("B", self.seq, self.spec.d_model)
        kwargs["shape"] = ("N", *shape[1:]) if shape[0] == "B" else shape  # N images, apart from the B texts
        if share is not None:  # a shared layer's parameters tie to the owner's, under the prefix too
            self.share = (prefix + share[0], prefix + share[1])
        self.stack = self.tower
        try:
            return super().op(name if op == "input" else prefix + name, op, inputs, **kwargs)  # pixel_values
        finally:
            self.share, self.stack = share, stack

    def stack_param(self, name: str, role: str, shape: tuple[int, ...], init: str):
        owner = self.per_stack.setdefault(role, f"{self.tower}.{name}.{role}")
        return (shape, init) if owner == f"{self.tower}.{name}.{role}" else owner


def build_tower(graph: Graph, spec, tower: str) -> TowerBuilder:
    """Lower encoder-only ``spec`` into ``graph`` as tower ``tower``: embeddings (patches), its
    stack and final norm; ``ports["memory"]`` is its last hidden states (B, V, d)."""
    b = TowerBuilder(graph, spec, "encoder", TOWER_SEQ, tower=tower)
    graph.towers[tower] = spec
    x, _ = _embed(b, spec.vocab.size, tie=None)
    b.ports["memory"] = _stack(b, spec.encoder, x)
    return b


def build_encoder(graph: Graph, spec) -> tuple[LayerBuilder, str]:
    """Lower encoder-only ``spec`` into ``graph`` as its encoder stack (the image encoder under a
    text decoder, ``tfspec.spec.image_encoder``): nodes named and stacked ``encoder`` as any
    encoder's, their sizes ``spec``'s (``Graph.spec_of``); its builder and last hidden states (B, S, d)."""
    b = LayerBuilder(graph, spec, "encoder", "S")
    graph.towers["encoder"] = spec
    x, _ = _embed(b, spec.vocab.size, tie=None)
    return b, _stack(b, spec.encoder, x)
