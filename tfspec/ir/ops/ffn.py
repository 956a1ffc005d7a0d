"""Position-wise feed-forward networks (§3.3) and mixtures of experts (Shazeer et al. 2017)."""

from __future__ import annotations

from . import LayerOp, register, rows


def _ffn(graph, node, sizes, out, tokens=None):
    """The input, the hidden pre-activation and activation (gated: the gate's and the product
    too); ``tokens`` rows where a mixture of experts runs top_k experts per position."""
    a = node.attrs
    hidden = (tokens if tokens is not None else rows(node, sizes)) * a.get("d_ff", node.shape[-1]) * 4
    count = 4 if a.get("gated") else (1 if a.get("activation") == "relu" else 2)
    saved = {node.inputs[0]: out(node.inputs[0]), f"{node.name}#hidden": count * hidden}
    if norm := a.get("inner_norm"):  # W2 reads the normalised hidden (RMSNorm's gain: its copy before the gain too)
        copies = 2 if norm["kind"] == "rms" and "inner_norm" in node.params else 1
        stats = 2 if norm["kind"] == "layer" else 1
        saved[f"{node.name}#inner_norm"] = copies * hidden + stats * (hidden // a.get("d_ff", node.shape[-1]))
    return saved


@register
class Ffn(LayerOp):
    name = "ffn"
    saved = staticmethod(_ffn)


@register
class Moe(LayerOp):
    name = "moe"

    @staticmethod
    def saved(graph, node, sizes, out):
        """The experts' tensors for top_k rows per position: each expert's gathered input, its
        output and that output weighted, the row ids (int64) and routing weights; the router's
        logits and probabilities, its top_k ids (int64) and weights and their normaliser; a
        shared expert's hidden states (measured with autograd's saved tensors)."""
        a, n, k = node.attrs, rows(node, sizes), node.attrs["top_k"]
        routed = n * k
        saved = _ffn(graph, node, sizes, out, tokens=routed)
        saved[f"{node.name}#routed"] = routed * (3 * node.shape[-1] * 4 + 8 + 4)
        saved[f"{node.name}#router"] = n * (2 * a["experts"] * 4 + k * (8 + 4) + 8)
        if "w_shared_1" in node.params:
            saved[f"{node.name}#shared"] = 2 * n * graph.params[node.params["w_shared_1"]].shape[0] * 4
        return saved
