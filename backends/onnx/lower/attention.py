"""The ONNX lowering of the IR ``attention`` op, for every attention kind, built from the same
stages as the PyTorch backend's: project (``projection``) -> positions (``positions``) -> the
cache policy of the graph's variant (``variants``: none, append, write at an offset, or its own
attention over buffers extended in place) -> scores (``scores``, ``modifiers``, the mask).

Opset 18 spells attention out (MatMul, Softmax, MatMul); opset 23 emits the fused
``Attention`` op. Either way the kind's mask comes from its own ``visible(q, k)`` (see
``graphs.Emit.mask``), and cross-attention in a step graph reads keys/values the encoder graph
computed once. Kinds with
a ``band`` (restricted attention) are computed block by block outside step graphs: blocks of w
queries against their neighbouring blocks' keys, O(n * w) work and memory instead of n x n.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tfspec.ir import Node
from tfspec.layers.attention import block_plan, kernel_for
from tfspec.registry import registrar

from ..builder import Index
from . import crosslayer, lowering
from .modifiers import modifiers_of
from .positions import PositionStage, stage_of
from .projection import normed, project, project_kv, project_queries, split_heads


BLOCKED_UP_TO = 512
"""Largest block width w the graphs compute banded kinds with. A graph serves every length, so
a short input still pays for w x 3w scores per block: cheap for a radius of 64, but Mistral's
4096-token window (w = 4095) would cost gigabytes on a ten-token input. Wider bands mask the
n x n scores instead: quadratic, but those windows serve sequences shorter than the window."""


TILED: dict[str, Callable] = {}
"""Kind -> ``fn(e, node, q, k, v)``, its own attention over whole sequences (local 2D attention
gathers memory blocks); step graphs use the kind's mask."""


tiled = registrar(TILED, "ONNX attentions for kind")
"""Decorator registering the ONNX attention of ``kind`` over whole sequences."""


def blocked(node: Node) -> bool:
    """Whether the graphs compute ``node``'s attention in blocks (``_banded``)."""
    band = node.layer.band()
    return band is not None and block_plan(band)[0] <= BLOCKED_UP_TO


@lowering("attention", rows=True)
def attention(e, node: Node, x: str, memory: str | None = None) -> str:
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (§3.2.2); keys and values have g heads
    (carried between steps as g), each serving h/g query heads."""
    b, a = e.b, node.attrs
    h, g, d_k, d_v = a["heads"], a["kv_heads"], a["d_k"], a["d_v"]
    stage, modifiers = stage_of(node), modifiers_of(a, node)
    plain = _plain(node, stage)
    variant = e.variant
    if node.layer.needs_memory:
        q = project_queries(b, node, x)
        if variant.step:  # computed by the encoder graph
            k = e.per_source(f"cross.{node.name}.key", ["src_batch", g, "src_len", d_k])
            v = e.per_source(f"cross.{node.name}.value", ["src_batch", g, "src_len", d_v])
        else:
            k, v = project_kv(b, node, memory)
    else:
        q, k, v = project(b, node, x)
        v = crosslayer.values(e, node, x, v)  # value residual: mixed with the first layer's
        if a["qk_norm"] != "none":
            q, k = normed(b, node, q, "q"), normed(b, node, k, "k")
        if stage is not None and stage.turn is not None:  # rotary positions
            q, k = stage.turn(e, q, k)
        if (y := variant.attend(e, node, plain, q, k, v)) is not None:  # the variant's own (in place)
            return _output(b, node, x, b.rows(y, h * d_v))
        whole = TILED.get(node.layer.kind) or (_banded if blocked(node) else None)
        if whole is not None and not variant.step and plain:  # over (B, L, h*d) sequences
            q, k, v = (b.sequence(t, n * size) for t, n, size in ((q, h, d_k), (k, g, d_k), (v, g, d_v)))
            return _output(b, node, x, b.rows(whole(e, node, q, k, v), h * d_v))
        k, v = variant.cache(e, node, split_heads(b, k, g, d_k), split_heads(b, v, g, d_v))
    if node.layer.needs_memory and variant.step and not variant.rows_per_source:
        q = _grouped(e, q, k, h, d_k)  # (sources, h, group * Lq, d_k): rows share their source's
    else:
        q = split_heads(b, q, h, d_k)  # (B, h, Lq, d_k)
    mask = e.mask(node.layer, node.shape[1], a["kv_seq"], q, k)
    if "mem_k" in node.params:  # after the cache: learned keys are never carried
        k, v, mask = _with_learned(e, node, k, v, mask)
    if plain:
        y = attend(b, q, k, v, mask, node)  # (B, h, Lq, d_v)
    else:
        k, v = repeat_heads(b, k, h, g, d_k), repeat_heads(b, v, h, g, d_v)
        y = _explicit(e, node, stage, modifiers, q, k, v, mask, x)
    y = b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 1, 3]), b.ints(-1, h * d_v))  # (B * Lq, h*d_v)
    b.flat.add(y)
    return _output(b, node, x, y)


def _with_learned(e, node: Node, k: str, v: str, mask: str | None) -> tuple[str, str, str | None]:
    """The m learned keys and values (g, m, d) before the (N, g, Lk, d) ones (persistent memory,
    the PyTorch backend's ``_with_learned``); the additive mask gains m zero (visible) columns in
    front, once per mask."""
    b, a = e.b, node.attrs
    m = a["learned_kv"]

    def joined(t: str, role: str, size: int) -> str:
        rows = b.op("Concat", b.op("Shape", t, start=0, end=1), b.ints(a["kv_heads"], m, size), axis=0)
        memory = b.op("Expand", b.op("Unsqueeze", b.param(node.params[role]), b.ints(0)), rows)  # (N, g, m, d)
        return b.op("Concat", memory, t, axis=2)

    k, v = joined(k, "mem_k", a["d_k"]), joined(v, "mem_v", a["d_v"])
    if mask is not None:
        mask = e.cached(("learned_kv", mask, m), lambda: b.op("Pad", mask, b.ints(m, 0), None, b.ints(-1)))
    return k, v, mask


def _output(b, node: Node, x: str, y: str) -> str:
    """W^O over the concatenated heads y (B * L, h * d_v); with ``head_scale``, each head's
    output times its scalar first; with ``output_gate``, y times f(x W_gate), f sigmoid or SiLU
    (the PyTorch backend's ``_output``)."""
    p, a = node.params, node.attrs
    if "head_scale" in p:  # (h,) -> (h, d_v) -> (h * d_v,): each head's scalar over its features
        h, d_v = a["heads"], a["d_v"]
        scale = b.op("Expand", b.op("Reshape", b.param(p["head_scale"]), b.ints(h, 1)), b.ints(h, d_v))
        y = b.op("Mul", y, b.op("Reshape", scale, b.ints(h * d_v)))
        b.flat.add(y)
    if "w_gate" in p:
        gate = b.rows(b.linear(x, p["w_gate"]), b.shape(p["w_gate"])[0])
        weight = b.op("Sigmoid", gate)
        if a.get("gate_function") == "silu":  # SiLU(g) = g sigmoid(g)
            weight = b.op("Mul", gate, weight)
        y = b.op("Mul", y, weight)
        b.flat.add(y)
    return b.linear(y, p["w_o"], p.get("b_o"))


def _grouped(e, q: str, k: str, heads: int, size: int) -> str:
    """Step graphs' cross-attention queries (B, Lq, h*d_k), or their flat view, as (S, h,
    B / S * Lq, d_k) for keys and values of S sources: the B rows come in equal groups, a
    source's hypotheses together (beam search's rows), so its keys are read once for the whole
    group, in one matrix product of group x Lq queries instead of one per hypothesis. The
    shape is built once per graph: every layer's cross keys have the S (``src_batch``) rows."""
    b = e.b
    shape = e.cached(("grouped", heads, size),
                     lambda: b.op("Concat", b.op("Shape", k, start=0, end=1), b.ints(-1, heads, size), axis=0))
    return b.op("Transpose", b.op("Reshape", q, shape), perm=[0, 2, 1, 3])


def repeat_heads(b, t: str, heads: int, kv_heads: int, size: int) -> str:
    """(N, g, L, d) keys or values -> (N, h, L, d), each of the g heads repeated for the h / g
    query heads it serves: query head i reads key/value head i // (h / g), as the PyTorch
    backend's ``repeat_heads``."""
    if heads == kv_heads:
        return t
    expanded = b.op("Expand", b.op("Unsqueeze", t, b.ints(2)), b.ints(1, 1, heads // kv_heads, 1, 1))
    return b.op("Reshape", expanded, b.ints(0, heads, -1, size))


def attend(b, q: str, k: str, v: str, mask: str | None, node: Node) -> str:
    """softmax(Q K^T x scale + mask) V on (N, h, L, d) queries and (N, g, L, d) keys and
    values (scale 1 / sqrt(d_k) unless the layer sets it): fused at opset 23 (which repeats
    key/value heads itself)."""
    a = node.attrs
    d_k, h, g = a["d_k"], a["heads"], a["kv_heads"]
    if b.opset >= 23:
        if mask is not None:  # onnxruntime's CPU kernel wants the mask as (B, 1, Lq, Lk)
            full = b.op("Concat", b.op("Shape", q, start=0, end=1), b.ints(1), b.op("Shape", q, start=2, end=3),
                        b.op("Shape", k, start=2, end=3), axis=0)
            mask = b.op("Expand", mask, full)
        return b.op("Attention", q, k, v, mask, scale=float(a["scale"]))
    k, v = repeat_heads(b, k, h, g, d_k), repeat_heads(b, v, h, g, a["d_v"])
    scores = _dot_scores(b, q, k, a["scale"])
    if mask is not None:
        scores = b.op("Add", scores, mask)
    return b.op("MatMul", b.op("Softmax", scores, axis=-1), v)


def _dot_scores(b, q: str, k: str, scale: float) -> str:
    """Q K^T x scale on (N, h, L, d) queries and keys."""
    q = b.op("Mul", q, b.const(scale)) if scale != 1.0 else q
    return b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2]))


def _plain(node: Node, stage: PositionStage | None) -> bool:
    """Whether the fused and blocked paths apply: the core's one answer (``fused_kernel``), which
    the position kind's ONNX stage must agree with."""
    hooks = () if stage is None else (stage.logits, stage.output, stage.from_input, stage.masked)
    return kernel_for(node, any(hook is not None for hook in hooks), "ONNX")


def _explicit(e, node: Node, stage: PositionStage | None, modifiers: list, q: str, k: str, v: str,
              mask: str | None, x: str | None = None) -> str:
    """Additive scores, position terms or score modifiers, spelled out on (B, h, L, d);
    mirrors ``MultiHeadAttention._explicit`` of the PyTorch backend (``x``: the layer's input,
    which forgetting attention's gates read)."""
    b, a, p = e.b, node.attrs, node.params
    h, d_k = a["heads"], a["d_k"]
    if a["score"] == "additive":  # w_h · tanh(q_i + k_j): (B, h, Lq, Lk, d) x (1, h, 1, d, 1)
        summed = b.op("Tanh", b.op("Add", b.op("Unsqueeze", q, b.ints(3)), b.op("Unsqueeze", k, b.ints(2))))
        w = b.op("Reshape", b.param(p["w_score"]), b.ints(1, h, 1, d_k, 1))
        scores = b.op("Squeeze", b.op("MatMul", summed, w), b.ints(4))
    else:
        scores = _dot_scores(b, q, k, a["scale"])
    scores = crosslayer.add_scores(e, node, scores)  # residual attention: the previous layer's logits
    if stage is not None and stage.logits is not None:  # the position kind's logit term
        scores = b.op("Add", scores, stage.logits(e, q, k))
    if stage is not None and stage.from_input is not None:  # forgetting attention's summed log gates
        scores = b.op("Add", scores, stage.from_input(e, x))
    for modify in modifiers:  # Gemma 2's softcap
        scores = modify(b, scores)
    if mask is not None:
        scores = b.op("Add", scores, mask)
    if stage is not None and stage.masked is not None:  # CoPE: positions over the visible keys' gates
        scores = b.op("Add", scores, stage.masked(e, q, k, scores))
    crosslayer.publish_scores(e, node, scores)
    for modify in modifiers_of(a, node, "masked"):  # explicit sparse attention's top-k
        scores = modify(b, scores)
    weighting = modifiers_of(a, node, "weighting")  # sigmoid attention
    weights = weighting[0](b, scores) if weighting else _softmax_with_sinks(b, scores, p.get("sinks"), h)
    for modify in modifiers_of(a, node, "weights"):  # talking heads' mixing of the weights
        weights = modify(b, weights)
    y = b.op("MatMul", weights, v)
    return y if stage is None or stage.output is None else stage.output(e, weights, y)  # Shaw et al.'s a_V


def _softmax_with_sinks(b, scores: str, sinks: str | None, heads: int) -> str:
    """Softmax over the keys of (B, h, Lq, Lk) scores; with ``sinks``, each head's sink logit
    joins the denominator as one more key, whose weight is then dropped (the PyTorch backend's
    ``softmax_with_sinks``)."""
    if sinks is None:
        return b.op("Softmax", scores, axis=-1)
    column = b.op("Expand", b.op("Reshape", b.param(sinks), b.ints(1, heads, 1, 1)),
                  b.op("Concat", b.op("Shape", scores, start=0, end=3), b.ints(1), axis=0))
    weights = b.op("Softmax", b.op("Concat", scores, column, axis=-1), axis=-1)
    return b.op("Slice", weights, b.ints(0), b.ints(-1), b.ints(-1))


def _banded(e, node: Node, q: str, k: str, v: str) -> str:
    """Attention of a kind with a ``band`` on (B, L, h*d) queries and (B, L, g*d) keys and
    values -> (B, L, h*d_v): blocks of w queries against the W keys of their neighbouring blocks, as
    (B * blocks, h, w, W) scores. Mirrors ``banded_attention`` of the PyTorch backend."""
    b, a = e.b, node.attrs
    h, g, d_k, d_v = a["heads"], a["kv_heads"], a["d_k"], a["d_v"]
    w, before, after = block_plan(node.layer.band())
    width = (before + 1 + after) * w
    length = b.shape_of(q, 1)
    blocks = b.op("Div", b.op("Add", length, b.const(np.int64(w - 1))), b.const(np.int64(w)))
    extra = b.op("Unsqueeze", b.op("Sub", b.op("Mul", blocks, b.const(np.int64(w))), length), b.ints(0))

    def to_blocks(x, heads, size, fill=None):  # (B, L, heads*size) -> (B, blocks, w, heads, size)
        padded = b.op("Pad", x, b.op("Concat", b.ints(0), extra, axis=0), fill, b.ints(1))
        return b.op("Reshape", padded, b.ints(0, -1, w, heads, size))

    def windows(x, fill=None):  # (B, blocks, w, ...) -> (B, blocks, W, ...): each block and its neighbours
        padded = b.op("Pad", x, b.ints(before, after), fill, b.ints(1))
        last = before + after
        return b.op("Concat", *[b.op("Slice", padded, b.ints(i), b.ints(i - last if i < last else 2**62), b.ints(1))
                                for i in range(last + 1)], axis=2)

    def heads_first(x, heads, size, rows):  # (B, blocks, rows, heads, size) -> (B * blocks, heads, rows, size)
        return b.op("Reshape", b.op("Transpose", x, perm=[0, 1, 3, 2, 4]), b.ints(-1, heads, rows, size))

    q4 = heads_first(to_blocks(q, h, d_k), h, d_k, w)
    k4 = heads_first(windows(to_blocks(k, g, d_k)), g, d_k, width)
    v4 = heads_first(windows(to_blocks(v, g, d_v)), g, d_v, width)
    # The kind's visibility on each block's true positions; keys outside 0..L-1 or padded hidden.
    start = b.op("Unsqueeze", b.op("Mul", b.op("Range", b.const(np.int64(0)), blocks, b.const(np.int64(1))),
                                   b.const(np.int64(w))), b.ints(1, 2))  # (blocks, 1, 1)
    rows = Index(b, b.op("Add", start, b.const(np.arange(w, dtype=np.int64).reshape(1, w, 1))))
    cols = Index(b, b.op("Add", start, b.const(np.arange(-before * w, width - before * w,
                                                         dtype=np.int64).reshape(1, 1, width))))
    visible = node.layer.visible(rows, cols) & (cols >= 0) & (cols < Index(b, length))
    mask = b.op("Unsqueeze", b.op("Where", visible.name, b.const(0.0), b.neg()), b.ints(0))  # (1, blocks, w, W)
    pad = e.padding(node.shape[1])
    if pad is not None:
        bias = b.op("Where", b.op("Unsqueeze", pad, b.ints(2)), b.neg(), b.const(0.0))  # (B, L, 1)
        bias = windows(b.op("Reshape", b.op("Pad", bias, b.op("Concat", b.ints(0), extra, axis=0), b.neg(), b.ints(1)),
                            b.ints(0, -1, w)), b.neg())  # (B, blocks, W)
        mask = b.op("Add", mask, b.op("Unsqueeze", bias, b.ints(2)))
    mask = b.op("Reshape", b.op("Expand", mask, b.op("Concat", b.batch, b.ints(1, 1, 1), axis=0)),
                b.ints(-1, 1, w, width))  # (B * blocks, 1, w, W)
    y = attend(b, q4, k4, v4, mask, node)  # (B * blocks, h, w, d_v)
    y = b.op("Reshape", y, b.op("Concat", b.batch, b.ints(-1, h, w, d_v), axis=0))
    y = b.op("Reshape", b.op("Transpose", y, perm=[0, 1, 3, 2, 4]), b.op("Concat", b.batch, b.ints(-1, h * d_v), axis=0))
    return b.op("Slice", y, b.ints(0), b.op("Unsqueeze", length, b.ints(0)), b.ints(1))
