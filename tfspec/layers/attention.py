"""Scaled dot-product multi-head attention (§3.2): full, causal (masked) and cross.

``Attention.visible`` states which keys each query may see as a boolean expression of
broadcast position indices, written with operators only, so the PyTorch backend (tensors),
the ONNX backend and the analysis passes (numpy) all evaluate the same definition.

With g key/value heads (grouped-query attention, Ainslie et al. 2023) each key/value head
serves h/g query heads: the key and value projections shrink to g heads, and so do the cached
keys and values of decoding; the attention itself still runs over h heads.

Cost (matmul FLOPs, 2 per multiply-add): the Q/K/V and output projections,
2*n*d*(h*d_k + g*(d_k + d_v)) + 2*n*h*d_v*d, are position-wise; the attention itself costs
2*h*(d_k + d_v) per visible query-key pair. Table 1 counts only the latter, O(n^2 * d) for
full attention, which is how §4 can compare it with a recurrent layer's n*d^2 and find
attention cheaper when n < d.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, PrivateAttr, create_model, model_validator

from tfspec.layers.base import Sublayer, linear, register
from tfspec import modifiers
from tfspec import positions as positions_kinds
from tfspec.layers import crosslayer, disentangled
from tfspec.spec.base import field_error
from tfspec.spec.bounds import Heads, Width
from tfspec.spec.positions import Positional

INHERITED = ("heads", "kv_heads", "d_k", "d_v", "positions")
"""Fields a layer may set for itself and otherwise takes from the spec (``resolved``)."""
SCORE_MODIFIERS: dict[str, frozenset[str]] = {m.field: frozenset(m.ops) for m in modifiers.ordered()}
"""Fields that transform a layer's logits after its position terms and before the mask, in
the order applied, each with the IR ops whose lowerings apply it: one module each in
``tfspec/modifiers``, whose fields ``Attention`` takes; each backend registers one module per
field (``backends/*/modifiers``)."""


class AttentionCore(Sublayer):
    """softmax(Q K^T / sqrt(d_k)) V over h heads, concatenated and projected by W^O (eq. 1);
    ``Attention`` is this with the score modifiers' fields."""

    component: ClassVar[str] = "attention"
    score: Literal["dot", "additive"] = "dot"
    """dot: q·k / sqrt(d_k) (§3.2.1); additive: w·tanh(q + k) per head, the additive
    attention (Bahdanau et al. 2015) §3.2.1 compares it with."""
    scale: Annotated[float, Field(gt=0, le=1e3)] | None = None
    """Factor of the dot-product scores; None: 1 / sqrt(d_k) (§3.2.1). T5 uses 1: its
    initialisation folds the 1 / sqrt(d_k) into W^Q."""
    heads: Heads | None = None
    """Query heads of this layer; defaults to the spec's heads."""
    kv_heads: Heads | None = None
    """Key/value heads of this layer; defaults to the spec's kv_heads."""
    d_k: Width | None = None
    """Query/key width per head; defaults to the spec's d_k."""
    d_v: Width | None = None
    """Value width per head; defaults to the spec's d_v."""
    positions: Positional | None = None
    """Positions inside this layer's attention, in place of the spec's ``positional``: a rotary
    base of its own (Gemma 3's local layers use 10,000, its global ones 1,000,000), or ``none``
    for a layer without positions (SmolLM3 and Llama 4 leave every fourth layer unrotated)."""
    qk_norm: Literal["none", "head", "per_head", "all", "l2"] = "none"
    """A norm (the spec's norm_type) on queries and keys before positions and scores, which
    keeps logits bounded: ``head`` normalises each head's d_k features with one gain shared by
    the heads (Qwen3, Gemma 3); ``per_head`` the same with a gain per head and feature, (h, d_k)
    and (g, d_k), and no shift (Command R+'s use_qk_norm, StableLM 2 12B's qk_layernorm);
    ``all`` normalises the whole query (h * d_k) and key (g * d_k) projection with gains per
    feature (OLMo 2); ``l2`` divides each head's d_k features by their root mean square
    (eps the spec's norm_eps), whatever the norm_type, with no gain (Llama 4's use_qk_norm, which
    transformers applies after rotary: the same, as rotation keeps each head's norm)."""
    clip: Annotated[float, Field(gt=0, le=1e6)] | None = None
    """Queries, keys and values clamped to [-c, c] as they leave their projections, before any
    qk_norm (OLMo-7B-0424's and DBRX's clip_qkv: 8), which bounds them in low precision; None:
    no clamp."""
    sinks: bool = False
    """A learned logit per head that joins every query's softmax as one more key with no value
    (gpt-oss's attention sinks): it takes a share of the attention weight, so the visible keys'
    weights sum to less than 1 and a head can attend to nothing. Off: weights sum to 1 (§3.2.1)."""
    output_gate: bool | Literal["sigmoid", "silu"] = False
    """Each head's output times f(x W_gate), elementwise, before W^O; W_gate is (h * d_v, d).
    True or ``sigmoid``: f = sigmoid (Qwen3-Next's gated attention, Qiu et al. 2025: a
    query-dependent gate that lets a head output nothing, without an attention sink;
    x-transformers' attn_gate_values); ``silu``: f = SiLU, the heads' output times SiLU(x W_gate)
    as in a SwiGLU (x-transformers' attn_swiglu_values). Off: heads concatenated as they are (§3.2.2)."""
    head_scale: bool = False
    """Each head's output times a learned scalar of its own, before W^O (NormFormer's head scale,
    Shleifer et al. 2021, §2; x-transformers' attn_head_scale), starting at 1. Off: unscaled (§3.2.2)."""
    learned_kv: Annotated[int, Field(ge=1, le=4096)] | None = None
    """m learned keys and values per key/value head, (g, m, d_k) and (g, m, d_v), placed before
    the sequence's keys and visible to every query whatever the kind's mask (persistent memory,
    Sukhbaatar et al. 2019, §4; x-transformers' attn_num_mem_kv): n x (n + m) scores. They are
    constants, so decoding caches nothing more; they carry no position, so rotary leaves them
    unturned and kinds adding position terms to the scores are refused. None: keys are the
    sequence's own (§3.2)."""
    z_loss: Annotated[float, Field(ge=0, le=1e3)] = 0.0
    """Weight of the attention z-loss training adds: per query position, the squared log-sum-exp
    over the keys of each head's masked pre-softmax logits, summed over the heads (ST-MoE's
    router z-loss, Zoph et al. 2022, on attention logits, as PaLM, Chowdhery et al. 2022, keeps
    the softmax's normaliser near 1; x-transformers' attn_z_loss_weight, 1e-4). Training only:
    it changes the loss and its gradients, not the logits, and an export is unchanged; the fused
    kernels keep the log-sum-exp but do not return it, so training spells this layer's attention
    out (``fused_kernel``). 0: none."""
    plain_causal: ClassVar[bool] = False
    """``visible`` is exactly k <= q, so fused causal kernels apply."""
    _links: dict | None = PrivateAttr(None)
    """What the IR node reads from earlier layers and publishes (``crosslayer.links``), set on
    the layer the node holds, for its FLOPs."""

    @property
    def gate_function(self) -> str | None:
        """The function of ``output_gate``'s logits: sigmoid, silu, or None where there is no gate."""
        return "sigmoid" if self.output_gate is True else (self.output_gate or None)
    op: ClassVar[str] = "attention"
    """The IR op this kind lowers to: what score modifiers ask (``SCORE_MODIFIERS``)."""
    @property
    def table1_terms(self) -> tuple[str, ...]:
        """The per-pair terms Table 1 counts: scores, values and those of the score modifiers set
        (talking heads' mixing of h logits per pair)."""
        return ("scores", "values") + tuple(m.field for m in modifiers.set_on(self) if m.per_pair)
    symbols: ClassVar[dict[str, str]] = {"h": "heads", "g": "kv_heads", "d_k": "d_k", "d_v": "d_v"}

    @model_validator(mode="after")
    def _scale_needs_dot(self):
        if self.scale is not None and self.score != "dot":
            raise field_error("scale", f"scale ({self.scale}) multiplies dot-product scores, but score is "
                              f"{self.score}: remove scale or use score: dot")
        self._modifiers_honoured()
        self._z_loss_honoured()
        if self.learned_kv is not None and self.needs_memory:
            raise field_error("learned_kv", f"learned_kv ({self.learned_kv}) adds keys to self-attention; "
                              f"{self.kind} attends to the encoder's keys: remove learned_kv")
        if self.positions is not None and self.positions.definition.embedded:
            raise field_error("positions", f"a layer's own positions enter its attention (rotary, relative, "
                              f"alibi) or are none; {self.positions.kind} positions are added to the embeddings: "
                              "set them in the spec's positional")
        if self.positions is not None and self.positions.definition.per_stack \
                and not self.positions.definition.layers_share:
            raise field_error("positions", f"{self.positions.kind} tables are one per stack: set it in the spec's "
                              "positional")
        return self

    def _modifiers_honoured(self) -> None:
        for field, ops in SCORE_MODIFIERS.items():
            value = getattr(self, field, None)
            if not modifiers.MODIFIERS.get(field, modifiers.ScoreModifier).is_set(value):
                continue
            if self.op not in ops:
                raise field_error(field, f"{self.kind} lowers to the IR op {self.op!r}, which does not apply "
                                  f"{field}: remove {field} or use an attention kind whose op does "
                                  f"({', '.join(sorted(ops))})")
            if field in modifiers.MODIFIERS and (problem := modifiers.MODIFIERS[field].problem(self, value)):
                raise field_error(field, problem)
        weighting = [m.field for m in modifiers.set_on(self) if m.stage == "weighting"]
        if len(weighting) > 1:  # each replaces the softmax: two cannot both
            raise field_error(weighting[1], f"{' and '.join(weighting)} each replace the softmax: set one")

    def _z_loss_honoured(self) -> None:
        """z_loss reads the softmax's log normaliser: an op whose lowering has none to read, or a
        weighting that replaces the softmax, would ignore it."""
        if not self.z_loss:
            return
        if self.op != "attention":
            raise field_error("z_loss", f"{self.kind} lowers to the IR op {self.op!r}, whose lowerings do not "
                              f"compute z_loss ({self.z_loss}): remove z_loss")
        if weighting := [m.field for m in modifiers.set_on(self) if m.stage == "weighting"]:
            raise field_error("z_loss", f"z_loss ({self.z_loss}) penalises the softmax's log normaliser, which "
                              f"{weighting[0]} replaces: remove one of them")

    def resolved(self, spec) -> Attention:
        """This layer with every size and its positions filled in from ``spec`` where it sets
        none: what the IR node holds and every consumer reads (``Spec.plan``)."""
        if self._filled is not None:
            return self
        own = self.positions if self.positions is not None else spec.positional
        positions = own if own.in_attention and not self.needs_memory else Positional(kind="none")
        filled = {"heads": self.heads or spec.heads,
                  "kv_heads": self.kv_heads or spec.kv_heads or self.heads or spec.heads,
                  "d_k": self.d_k or spec.d_k, "d_v": self.d_v or spec.d_v, "positions": positions}
        layer = self.model_copy(update=filled)
        layer._filled = frozenset(name for name in INHERITED if getattr(self, name) is None)
        return layer

    def check(self, spec) -> str | None:
        layer = self.resolved(spec)
        if layer.heads % layer.kv_heads:
            return (f"heads ({layer.heads}) must be a multiple of kv_heads ({layer.kv_heads}): each key/value head "
                    "serves an equal group of query heads")
        kind = layer.positions.definition
        if layer.learned_kv is not None and kind.in_attention and kind.adds_to_scores:
            return (f"learned_kv ({layer.learned_kv}): {layer.positions.kind} positions add terms to the scores of "
                    "key positions, which learned keys have none of: use rotary or embedded positions")
        return layer.positions.definition.layer_problem(layer)

    def score_scale(self, d_k: int) -> float | None:
        """The factor of q·k: ``scale``, else 1 / sqrt(d_k); None for additive scores."""
        if self.score != "dot":
            return None
        return self.scale if self.scale is not None else d_k ** -0.5

    @property
    def mixes_positions(self) -> bool:
        """Masks hide padded keys, but positions whose rotary frequencies follow the call's
        length (``Positional.depends_on_length``) read the padded batch's length."""
        return self.positions is not None and self.positions.depends_on_length

    def visible(self, q, k):
        """Boolean (Lq, Lk) mask from query positions ``q`` (Lq, 1) and key positions ``k``
        (1, Lk); ``None`` when every key is visible."""
        return None

    def band(self) -> tuple[int, int] | None:
        """(behind, ahead) when ``visible(q, k)`` implies q - behind <= k <= q + ahead; None when
        a query may see keys arbitrarily far away. Backends compute a bounded kind block by
        block (``block_plan``): O(n * band) work and memory instead of an n x n masked matrix."""
        return None

    @property
    def period(self) -> int:
        """p with visible(q + p, k + p) == visible(q, k): 1 for kinds that see by distance alone,
        a block's length for block-aligned ones. Decoding drops keys older than the band p at a
        time, so the kept keys' positions stay equal to the true ones modulo p."""
        return 1

    def kept(self, total: int) -> int:
        """How many of ``total`` cached keys decoding keeps (a banded kind: its band, rounded up
        so that the dropped ones are a multiple of ``period``)."""
        band = self.band()
        if band is None or total <= band[0]:
            return total
        return total - (total - band[0]) // self.period * self.period

    def reads(self, q, k):
        mask = self.visible(q, k)
        return (q >= 0) & (k >= 0) if mask is None else mask

    def pairs(self, s):
        """Query-key pairs whose scores are needed: n queries, n keys (m for cross-attention)."""
        return s.n * (s.m if self.needs_memory else s.n)

    def computed_pairs(self, s):
        """Scores the PyTorch kernels compute, masked ones included: n x keys, or with a band
        and more than three blocks, each block's w queries against its W keys."""
        from sympy import Piecewise, ceiling

        dense = s.n * (s.m if self.needs_memory else s.n)
        if self.band() is None:
            return dense
        w, before, after = block_plan(self.band())
        return Piecewise((dense, s.n <= 3 * w), (ceiling(s.n / w) * w * (before + 1 + after) * w, True))

    def flops(self, s, dense=False):
        """The position kind's own terms (relative embeddings) are added by ``op_flops``, which
        asks the kind (``PositionKind.attention_flops``)."""
        n, d, h, g, d_k, d_v = s.n, s.d, s.h, s.g, s.d_k, s.d_v
        pairs = self.computed_pairs(s) if dense else self.pairs(s)
        if self.learned_kv is not None:  # every query scores the m learned keys too
            pairs = pairs + s.n * self.learned_kv
        if self.needs_memory:
            terms = {"q": 2 * n * d * h * d_k, "kv": 2 * s.m * d * g * (d_k + d_v)}
        else:
            terms = {"qkv": 2 * n * d * (h * d_k + g * (d_k + d_v))}
        # Q K^T (pairs x d_k per head; additive scores w·tanh(q + k) cost the same products),
        # then the weighted sum of values (pairs x d_v per head).
        terms |= {"scores": 2 * pairs * h * d_k, "values": 2 * pairs * h * d_v, "out": 2 * n * h * d_v * d}
        if self.output_gate:
            terms["gate"] = 2 * n * d * h * d_v
        for m in modifiers.set_on(self):  # talking heads' mixing: a term named by the field
            if (extra := m.flops(s, self, getattr(self, m.field), pairs)) != 0:
                terms[m.field] = extra
        return terms | crosslayer.flops(s, self)  # value residual's learned mix

    def lower(self, b, name, x):
        s, layer = b.spec, self.resolved(b.spec)
        h, g, d_k, d_v, d = layer.heads, layer.kv_heads, layer.d_k, layer.d_v, s.d_model
        sizes = {"q": h * d_k, "k": g * d_k, "v": g * d_v}
        if self.needs_memory:
            # Queries from the decoder, keys and values from the encoder output (§3.2.3).
            params = linear("q", h * d_k, d, s.has_bias("q")) | fused("kv", sizes, d, s)
            inputs = [x, b.memory]
        else:
            # Q, K and V projections fused into one matrix: one GEMM instead of three.
            params = fused("qkv", sizes, d, s)
            inputs = [x]
        params |= linear("o", d, h * d_v, s.has_bias("o"))
        if self.score == "additive":
            params["w_score"] = ((h, d_k), "xavier_uniform")
        if layer.sinks:
            params["sinks"] = ((h,), "zeros")
        if layer.output_gate:
            params["w_gate"] = ((h * d_v, d), "xavier_uniform")
        if layer.head_scale:
            params["head_scale"] = ((h,), "ones")
        if layer.learned_kv is not None:  # x-transformers draws them from N(0, 1)
            params["mem_k"] = ((g, layer.learned_kv, d_k), "normal:1.0")
            params["mem_v"] = ((g, layer.learned_kv, d_v), "normal:1.0")
        positions = layer.positions if layer.positions.in_attention else None
        params |= qk_norm_params(layer, s)
        params |= layer.positions.definition.attention_params(b, name, layer)  # relative tables, T5's, DeBERTa's
        for m in modifiers.set_on(layer):  # talking heads' mixing matrices
            params |= m.params(layer, getattr(layer, m.field))
        attrs = {"kind": self.kind, "heads": h, "kv_heads": g, "d_k": d_k, "d_v": d_v, "dropout": s.attention_dropout,
                 "kv_seq": b.memory_seq if self.needs_memory else b.seq, "score": self.score,
                 "scale": self.score_scale(d_k), "qk_norm": layer.qk_norm, "clip": layer.clip,
                 "positions": None if positions is None else positions.model_dump()}
        attrs |= {field: getattr(layer, field) for field in SCORE_MODIFIERS}
        if layer.output_gate:  # the backends ask the gate's function
            attrs["gate_function"] = layer.gate_function
        if layer.learned_kv is not None:
            attrs["learned_kv"] = layer.learned_kv
        if layer.z_loss:  # training's loss reads it; inference and exports do not
            attrs["z_loss"] = layer.z_loss
        if layer.qk_norm != "none" or disentangled.NORM in params:
            attrs |= {"norm_type": s.norm_type, "norm_eps": s.norm_eps}
        if link := crosslayer.links(s.plan(b.stack), name) if not self.needs_memory else {}:
            params |= crosslayer.params(layer, link, d)  # value residual, residual attention
            attrs |= link
            layer = layer.model_copy()
            layer._links = link
        return b.op(name, "attention", inputs, attrs=attrs, params=params, layer=layer)



Attention = create_model("Attention", __base__=AttentionCore, __module__=__name__, __doc__=AttentionCore.__doc__,
                         **modifiers.fields(), **crosslayer.fields())
"""Attention with a field per registered score modifier (``tfspec/modifiers``), after the core's
fields: every attention kind subclasses this."""
def qk_norm_params(layer: AttentionCore, spec) -> dict:
    """The gains (and LayerNorm biases) of ``qk_norm``: one d_k vector shared by the heads
    (``head``), one per head (``per_head``), or one per feature of the whole projection (``all``)."""
    if layer.qk_norm in ("none", "l2"):
        return {}
    if layer.qk_norm == "per_head":  # a gain per head and feature, no shift
        return {"q_norm": ((layer.heads, layer.d_k), "ones"), "k_norm": ((layer.kv_heads, layer.d_k), "ones")}
    sizes = {"q": layer.d_k, "k": layer.d_k} if layer.qk_norm == "head" else \
        {"q": layer.heads * layer.d_k, "k": layer.kv_heads * layer.d_k}
    params = {f"{part}_norm": ((size,), "ones") for part, size in sizes.items()}
    if spec.uses_norm_bias:
        params |= {f"{part}_norm_bias": ((size,), "zeros") for part, size in sizes.items()}
    return params


def fused(role: str, sizes: dict[str, int], d: int, spec) -> dict:
    """IR parameters of the projections named by the letters of ``role`` (``qkv``, ``kv``)
    stacked into one matrix ``w_<role>`` of their ``sizes``' rows. Their biases are one
    ``b_<role>`` when every part has one, else ``b_<part>`` for each part that has one (Qwen2
    biases q, k and v; Whisper biases q and v, not k), so parameter counts stay exact."""
    rows = {part: sizes[part] for part in role}
    params = {f"w_{role}": ((sum(rows.values()), d), "xavier_uniform")}
    biased = [part for part in rows if spec.has_bias(part)]
    if len(biased) == len(rows):
        params[f"b_{role}"] = ((sum(rows.values()),), "zeros")
    else:
        params |= {f"b_{part}": ((rows[part],), "zeros") for part in biased}
    return params


def fused_kernel(node, training: bool = False) -> bool:
    """Whether the IR attention ``node`` runs as one fused kernel (PyTorch's
    scaled_dot_product_attention, onnxruntime's fused and blocked paths): dot-product scores that
    nothing adds to or changes, that is no position kind adding terms (``adds_to_scores``; rotary
    only turns queries and keys), no score modifier set and no sinks. Both backends and
    ``report --train`` read this one answer: an attention spelled out keeps its L x L weights for
    the backward pass, a fused one keeps only the log-sum-exp. Learned keys (``learned_kv``) are
    spelled out too: the kind's mask gains their columns. In ``training``, a layer with ``z_loss``
    is spelled out as well: the loss reads the log-sum-exp the kernels keep to themselves."""
    a = node.attrs
    positions = a.get("positions")
    adds = positions is not None and positions_kinds.KINDS[positions["kind"]].adds_to_scores
    return (a.get("score", "dot") == "dot" and not adds and "sinks" not in node.params
            and "mem_k" not in node.params and not modifiers.set_on(a) and not crosslayer.unfused(a)
            and not (training and a.get("z_loss")))


def kernel_for(node, stage_adds: bool, backend: str, training: bool = False) -> bool:
    """``fused_kernel(node, training)`` for a backend whose position stage for ``node`` adds a logit
    or output term (``stage_adds``): a kind declaring ``adds_to_scores`` False while its stage adds
    one is refused, since the fused kernel would skip the term."""
    fused = fused_kernel(node, training)
    if fused and stage_adds:
        raise TypeError(f"{node.attrs['positions']['kind']} positions declare adds_to_scores False, but their "
                        f"{backend} stage adds a logit or output term that the fused kernel would skip")
    return fused


def fused_bias(params, role: str, attrs) -> list[tuple[str | None, int]] | None:
    """How the bias of ``fused`` projection ``role`` of an attention node is stored: None when
    no part has one, else (role, rows) pieces in row order, role None for an unbiased part
    (zeros). Backends concatenate the pieces into the bias of the fused GEMM."""
    h, g, d_k, d_v = attrs["heads"], attrs["kv_heads"], attrs["d_k"], attrs["d_v"]
    rows = {"q": h * d_k, "k": g * d_k, "v": g * d_v}
    if f"b_{role}" in params:
        return [(f"b_{role}", sum(rows[part] for part in role))]
    pieces = [(f"b_{part}" if f"b_{part}" in params else None, rows[part]) for part in role]
    return pieces if any(name for name, _ in pieces) else None


def block_plan(band: tuple[int, int]) -> tuple[int, int, int]:
    """(w, before, after) for banded attention: queries go in blocks of w, and block b reads
    the keys of blocks b - before .. b + after. With w at least the band's reach each way, one
    neighbouring block per side holds every visible key; w >= 32 keeps the matmuls efficient."""
    behind, ahead = band
    return max(behind, ahead, 32), int(behind > 0), int(ahead > 0)


def use_blocks(band: tuple[int, int] | None, n: int) -> bool:
    """Whether the PyTorch backend computes n queries block by block: from three blocks on,
    blocks compute fewer scores than one dense n x n matrix."""
    return band is not None and n > 3 * block_plan(band)[0]


@register
class SelfAttention(Attention):
    """Every position attends to every position of the same sequence (encoder, §3.2.3)."""

    kind: Literal["self_attention"] = "self_attention"
    stem: ClassVar[str] = "self_attn"

    @property
    def looks_ahead(self) -> bool:
        return True


@register
class CausalSelfAttention(Attention):
    """Position i attends to positions <= i: the decoder's masked self-attention (§3.2.3)."""

    kind: Literal["causal_self_attention"] = "causal_self_attention"
    stem: ClassVar[str] = "self_attn"
    plain_causal: ClassVar[bool] = True

    def visible(self, q, k):
        return k <= q

    def pairs(self, s):
        return s.n * (s.n + 1) / 2


@register
class CrossAttention(Attention):
    """Decoder queries attend to all encoder positions (encoder-decoder attention, §3.2.3)."""

    kind: Literal["cross_attention"] = "cross_attention"
    stem: ClassVar[str] = "cross_attn"
    needs_memory: ClassVar[bool] = True
