"""ALiBi (Press et al. 2022) in ONNX graphs, as the PyTorch backend's ``Alibi``: each head's
logits minus its slope times the distance |i - j|; positions from ``Emit.grid`` (in step graphs
the queries are the last new_len of the past_len + new_len positions)."""

from __future__ import annotations

from tfspec.ir import Node
from tfspec.ir.positions import alibi_slopes

from . import score_term


@score_term("alibi")
def alibi(e, node: Node, q: str, k: str) -> str:
    """(1, h, Lq, Lk) logit bias for (B, h, Lq, d) queries and (B, h, Lk, d) keys."""
    def build():
        b = e.b
        rows, cols = e.grid(node.shape[1], node.attrs["kv_seq"], q, k)
        distance = b.op("Cast", b.op("Abs", b.op("Sub", cols, rows)), to=b.elem_type)  # (Lq, Lk)
        return b.op("Mul", b.const(-alibi_slopes(node.attrs["heads"]).reshape(1, -1, 1, 1)), distance)
    return e.cached(("alibi", node.layer), build)  # layers of one kind see keys of one length
