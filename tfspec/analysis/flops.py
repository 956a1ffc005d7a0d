"""Forward FLOPs of every IR op as exact formulas, and their totals at a sequence length.

What is counted ("FLOPs" everywhere in tfspec): the multiply-adds of matrix products, 2 FLOPs
each: linear layers, attention's Q K^T and weights x V, recurrent gates, convolutions, the
pre-softmax projection. This is what ``torch.utils.flop_counter`` counts and what nanoGPT's and
PaLM's 6N + 12LHQT rule assumes. Elementwise work (biases, softmax, norms, activations, residual
adds, dropout) is left out: O(n*d + h*n^2) against the products' O(n*d^2 + n^2*d). Embedding
lookups are gathers, not products: 0.

Attention is counted dense, every query-key score of the n x n (n x m) matrix, because the
emitted kernels compute masked scores and discard them; ``needed`` counts only visible pairs
(about half for causal attention, n*(2r+1) for restricted), what a kernel that skips masked
blocks would do. Source and target have one length n: cross-attention's memory has m = n keys.
A stack's memory tokens (``memory_tokens``) make its sequence n + m long between their
``memory_tokens`` and ``drop_tokens`` ops: the ops there are counted at n + m, the head at n.

Training costs 3 x forward (FORWARD_BACKWARD): the backward pass computes, for every product of
the forward pass, one of the same size for the input gradient and one for the weight gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from tfspec.errors import TfspecError
from tfspec.ir import Graph, Node
from tfspec.ir.ops import definition
from tfspec.ir.ops.memory_tokens import widened


@dataclass(frozen=True)
class Symbols:
    """The sizes FLOP formulas are written in (Table 1's n, d, k, r, §3.2's h, d_k, d_v, the
    key/value heads g of grouped-query attention and the Image Transformer's local blocks)."""

    n: sympy.Symbol  # sequence length (queries)
    m: sympy.Symbol  # memory length: keys of cross-attention
    d: sympy.Symbol  # d_model
    h: sympy.Symbol
    g: sympy.Symbol  # key/value heads (grouped-query attention; h without it)
    d_k: sympy.Symbol
    d_v: sympy.Symbol
    d_ff: sympy.Symbol
    k: sympy.Symbol  # convolution kernel width
    r: sympy.Symbol  # restricted attention radius
    V: sympy.Symbol  # vocabulary of the pre-softmax projection
    l_q: sympy.Symbol  # local attention: query block length (Image Transformer §3.2)
    l_m: sympy.Symbol  # local attention: memory length before each query block


SYMBOLS = Symbols(*sympy.symbols("n m d h g d_k d_v d_ff k r V l_q l_m", positive=True, integer=True))
FORWARD_BACKWARD = 3


def layer_values(spec, layer=None) -> dict:
    """Symbol -> value for ``spec``'s sizes, overridden by the layer's own (kernel, r, d_ff)."""
    s = SYMBOLS
    values = {s.d: spec.d_model, s.h: spec.heads, s.g: spec.num_kv_heads, s.d_k: spec.d_k, s.d_v: spec.d_v,
              s.d_ff: spec.d_ff}
    for symbol, field in getattr(layer, "symbols", {}).items():
        if getattr(layer, field) is not None:
            values[getattr(s, symbol)] = getattr(layer, field)
    return values


def op_flops(node: Node, dense: bool = True) -> dict[str, sympy.Expr]:
    """Forward FLOPs of one IR op over one sequence, by term (empty: no matrix products), as its
    definition states them (``tfspec/ir/ops``)."""
    return definition(node.op).flops(node, SYMBOLS, dense)


def at(expr: sympy.Expr, n: int, values: dict) -> int:
    """An exact count at sequence length ``n`` (memory length m = n)."""
    return int(sympy.sympify(expr).xreplace(values | {SYMBOLS.n: n, SYMBOLS.m: n}))


def describe(layer) -> str:
    """``conv(kernel=3, dilation=3)``: the kind and the options that differ from defaults."""
    options = layer.model_dump(exclude_defaults=True, exclude={"kind", *(layer._filled or ())})
    return layer.kind + (f"({', '.join(f'{k}={v}' for k, v in options.items())})" if options else "")


@dataclass(frozen=True)
class LayerFlops:
    """One kind of op in one stack, and how many times the model runs it."""

    stack: str
    label: str
    layer: object
    """The layer-kind object (None for the projection)."""
    names: tuple[str, ...]
    formula: sympy.Expr
    """Forward FLOPs of one instance over one sequence, in all symbols (dense attention)."""
    forward: int
    """``formula`` at the report's n, per instance."""
    needed: int
    """Like ``forward``, counting visible attention scores only."""

    @property
    def count(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class FlopReport:
    """Forward and training FLOPs of a model at one sequence length, per op kind and in total."""

    name: str
    n: int
    layers: tuple[LayerFlops, ...]
    formula: sympy.Expr
    """Total forward FLOPs per sequence as a polynomial in n, the model's sizes substituted."""

    @property
    def forward(self) -> int:
        return sum(row.count * row.forward for row in self.layers)

    @property
    def per_token(self) -> float:
        """Forward FLOPs per (target) token: per sequence / n."""
        return self.forward / self.n

    @property
    def training(self) -> int:
        return FORWARD_BACKWARD * self.forward

    def to_json(self) -> dict:
        return {"n": self.n, "convention": "matmul FLOPs (2 per multiply-add), attention dense, source length = "
                "target length = n; training = 3 x forward",
                "forward_per_sequence": self.forward, "forward_per_token": self.per_token,
                "training_per_sequence": self.training, "training_per_token": FORWARD_BACKWARD * self.per_token,
                "forward_formula": str(self.formula)}


def analyze_flops(graph: Graph, n: int) -> FlopReport:
    """Count the forward FLOPs of every op of ``graph`` for sequences of length ``n``."""
    if n < 1:
        raise TfspecError(f"sequence length n must be at least 1 (got {n})")
    groups: dict[tuple, list[Node]] = {}
    for node in graph.nodes():
        if node.layer is not None or op_flops(node):
            groups.setdefault((node.stack, node.layer if node.layer is not None else node.op), []).append(node)
    rows, total, span = [], sympy.Integer(0), widened(graph)
    for (stack, key), nodes in groups.items():
        node = nodes[0]
        values = layer_values(graph.spec_of(stack), node.layer) | {SYMBOLS.V: node.attrs.get("vocab", 0)}
        longer = {SYMBOLS.n: SYMBOLS.n + span[node.name]} if node.name in span else {}  # memory tokens' positions
        formula = sympy.sympify(sum(op_flops(node).values())).xreplace(longer)
        needed = sympy.sympify(sum(op_flops(node, dense=False).values())).xreplace(longer)
        rows.append(LayerFlops(stack or "output", describe(node.layer) if node.layer is not None else node.op,
                               node.layer, tuple(x.name for x in nodes), formula, at(formula, n, values),
                               at(needed, n, values)))
        total += len(nodes) * formula.xreplace(values | {SYMBOLS.m: SYMBOLS.n})
    return FlopReport(graph.name, n, tuple(rows), sympy.expand(total))
