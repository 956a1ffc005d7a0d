"""Token shift (``token_shift`` on a sub-layer; RWKV, Peng et al. 2023, eqs. 11-15): the sub-layer's
input mixed with the previous position's, mu * x_t + (1 - mu) * x_{t-1}, x_{-1} = 0, a learned
``mix`` (mu) per feature."""

from __future__ import annotations

from . import Op, no_products, register


@register
class TokenShift(Op):
    """A convolution of length 2 with one weight pair (mu, 1 - mu) per feature: it reads the
    previous position (not position-wise: ragged batches are decoded one length at a time), and
    a decoder carries that one position's input from step to step (``carries``; a fixed d_model
    values per row, which the per-position KV cache report leaves out, as a convolution's
    window). Elementwise: no matrix products. Computed as x_{t-1} + mu * (x_t - x_{t-1}), its
    backward pass keeps the difference alone (mu's gradient is it times the output's; the
    inputs' are mu and 1 - mu times it)."""
    name, carries = "token_shift", True
    flops = staticmethod(no_products)

    @staticmethod
    def saved(graph, node, sizes, out):
        return {f"{node.name}#difference": out(node.inputs[0])}
