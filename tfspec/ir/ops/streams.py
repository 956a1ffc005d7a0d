"""Hyper-connections' ops (``residual_streams``, ``tfspec/spec/streams.py``; Zhu et al. 2024): the
residual stream as n streams, (B, L, n * d), stream k at features [k d, (k + 1) d). A sub-layer's
connections are computed once (``streams_weights``: A_m, A_r and B packed per position as
n + n^2 + n values) and read by the op before it (``streams_read``) and after it
(``streams_write``). All are position-wise and carry nothing between decoding steps."""

from __future__ import annotations

from . import Op, keeps_nothing, no_products, register, rows


def streams(node) -> int:
    return node.attrs["streams"]


def kept(graph, node, out) -> dict:
    """The inputs a read or write keeps: static connections are one copy for every position
    (the parameters themselves), dynamic ones a tensor per position."""
    weights = graph.node(node.inputs[-1])
    return {i: out(i) for i in node.inputs if i != weights.name or weights.attrs["dynamic"]}


@register
class StreamsExpand(Op):
    """The embeddings as n copies, (B, L, d) -> (B, L, n d) (§2.3)."""
    name, position_wise = "streams_expand", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)


@register
class StreamsMerge(Op):
    """The stack's output: the streams' sum, (B, L, n d) -> (B, L, d) (§2.3)."""
    name, position_wise = "streams_merge", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)


@register
class StreamsWeights(Op):
    """A_m, A_r, B of one sub-layer: the static ones, plus (dynamic, §2.2) s tanh(norm(H) W) with
    W = [W_m | W_r | W_beta], a (d, n + 2) product per stream."""
    name, position_wise = "streams_weights", True

    @staticmethod
    def flops(node, s, dense: bool = False) -> dict:
        n = streams(node)
        return {"dynamic": 2 * s.n * n * s.d * (n + 2)} if node.attrs["dynamic"] else {}

    @staticmethod
    def saved(graph, node, sizes, out):
        """Dynamic: the streams, their normalised copy and each stream's statistics (LayerNorm's
        two, RMSNorm's one and its copy before the gain) for the norm, and tanh's outputs."""
        if not node.attrs["dynamic"]:
            return {}
        n, r = streams(node), rows(node, sizes)
        kind = node.attrs["norm"]["kind"]
        copies = 2 if kind == "rms" and "norm_weight" in node.params else 1
        stats = 2 if kind == "layer" else 1
        return {node.inputs[0]: out(node.inputs[0]), f"{node.name}#normed": copies * out(node.inputs[0]),
                f"{node.name}#stats": r * n * stats * 4, f"{node.name}#tanh": r * n * (n + 2) * 4}


@register
class StreamsRead(Op):
    """h_0 = A_m^T H, a (1, n) by (n, d) product per position; its backward keeps both."""
    name, position_wise = "streams_read", True

    @staticmethod
    def flops(node, s, dense: bool = False) -> dict:
        return {"read": 2 * s.n * streams(node) * s.d}

    @staticmethod
    def saved(graph, node, sizes, out):
        return kept(graph, node, out)


@register
class StreamsWrite(Op):
    """H' = A_r^T H + B^T (scale y), an (n, n) by (n, d) product per position and an elementwise
    outer product; its backward keeps H, y and the connections."""
    name, position_wise = "streams_write", True

    @staticmethod
    def flops(node, s, dense: bool = False) -> dict:
        n = streams(node)
        return {"write": 2 * s.n * n * n * s.d}

    @staticmethod
    def saved(graph, node, sizes, out):
        return kept(graph, node, out)
