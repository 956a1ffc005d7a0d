"""The mixture-of-softmaxes output op (``tfspec.spec.softmax_mixture``): its FLOPs and what its
backward keeps."""

from __future__ import annotations

from . import Op, register, rows, width


@register
class SoftmaxMixture(Op):
    """Hidden states -> log sum_k pi_k softmax(act(h W_k^T) w^T): (B, L, vocab) log-probabilities."""
    name, position_wise = "softmax_mixture", True

    @staticmethod
    def flops(node, s, dense=False):
        """Yang et al. 2017, eq. 3 per position: the K maps W_k (K d x d) and the priors (K x d),
        K token projections (each d x V, the K vocabulary softmaxes' logits) and the priors'
        weighted sum of the K softmaxes (K V multiply-adds)."""
        k, d = node.attrs["components"], width(node, s)
        return {"mixture": 2 * s.n * d * k * d + 2 * s.n * d * k + 2 * s.n * k * s.V, "logits": 2 * s.n * k * d * s.V}

    @staticmethod
    def saved(graph, node, sizes, out):
        """Per row: the input (both maps read it), the K components h_k (the projection's input and,
        after a tanh, its gradient's), the priors' log-softmax (K), each component's log-softmax
        (K V, its gradient reads its output), their sum with the priors that logsumexp reads
        (K V) and its output (V); float32."""
        n, k, v = rows(node, sizes), node.attrs["components"], node.attrs["vocab"]
        d = node.attrs.get("features") or graph.spec.d_model
        return {node.inputs[0]: out(node.inputs[0]), f"{node.name}#components": 4 * n * k * d,
                f"{node.name}#prior": 4 * n * k, f"{node.name}#log_softmax": 4 * n * k * v,
                f"{node.name}#joint": 4 * n * k * v, node.name: out(node.name)}
