"""Value residual learning and residual attention in ONNX graphs, as the PyTorch backend's
``backends/torch/crosslayer.py`` (``tfspec.layers.crosslayer``): the source's tensor is kept in
the emitted graph's cache (``Emit.cached``) under its node name for the layers that read it."""

from __future__ import annotations

import numpy as np

from tfspec.ir import Node


def _published(e, source: str, what: str) -> str:
    def missing():  # the IR orders a source before its readers
        raise AssertionError(f"{source} has not published its {what} yet")
    return e.cached(("published", source, what), missing)


def values(e, node: Node, x: str, v: str) -> str:
    """(B * L, g*d_v) values (or their (B, L, .) view) mixed with the first self-attention's:
    v_1 + lam (v - v_1), lam = sigmoid(x W_mix + b_mix) (rows, g) spread over each head's d_v
    features by a (g, g*d_v) 0/1 matrix, or the layer's fixed lam."""
    b, a = e.b, node.attrs
    if a.get("publishes_values"):
        e.cached(("published", node.name, "values"), lambda: v)
    if "values_from" not in a:
        return v
    first = _published(e, a["values_from"], "values")
    if node.layer.value_residual == "learned":
        g, d_v = a["kv_heads"], a["d_v"]
        lam = b.op("Sigmoid", b.linear(x, node.params["w_mix"], node.params["b_mix"]))  # (rows, g)
        spread = b.const(np.repeat(np.eye(g), d_v, axis=1).astype(b.np_dtype))  # (g, g*d_v)
        lam = b.op("MatMul", lam, spread)
    else:
        lam = b.const(np.asarray(node.layer.value_residual, dtype=b.np_dtype))
    mixed = b.op("Add", first, b.op("Mul", lam, b.op("Sub", v, first)))
    if v in b.flat:
        b.flat.add(mixed)
    return mixed


def add_scores(e, node: Node, scores: str) -> str:
    """(B, h, Lq, Lk) scaled q·k plus the previous self-attention's logits (RealFormer, eq. 3)."""
    source = node.attrs.get("scores_from")
    return scores if source is None else e.b.op("Add", scores, _published(e, source, "scores"))


def publish_scores(e, node: Node, scores: str) -> None:
    """Keep the masked logits for the next self-attention, clamped at the mask value: masks add
    up layer after layer, and a row masked twice must stay finite (NaN-free, ``Builder.neg``)."""
    if node.attrs.get("publishes_scores"):
        e.cached(("published", node.name, "scores"), lambda: e.b.op("Max", scores, e.b.neg()))
