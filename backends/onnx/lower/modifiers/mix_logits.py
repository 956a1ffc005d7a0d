"""Talking heads (Shazeer et al. 2020) in ONNX graphs, as the PyTorch backend's: a learned h x h matrix
mixing the heads of each query-key pair, of the logits (``mix_logits``) or of the weights
(``mix_weights``)."""

from __future__ import annotations

from . import score_modifier


def mix(role: str):
    def make(_):
        def modify(b, scores: str, node) -> str:  # (B, h, Lq, Lk) -> the same
            heads = node.attrs["heads"]
            pairs = b.op("Reshape", scores, b.ints(0, heads, -1))  # (B, h, Lq * Lk)
            mixed = b.op("MatMul", b.param(node.params[role]), pairs)  # (h, h) @ (B, h, Lq * Lk)
            return b.op("Reshape", mixed, b.op("Shape", scores))
        return modify
    return make


score_modifier("mix_logits")(mix("mix_logits"))
