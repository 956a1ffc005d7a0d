"""LayerDrop (Fan et al. 2019, §3): a whole layer skipped in training at rate p (``layer_drop`` on a
stack): the op reads the layer's input and output and gives one of them."""

from __future__ import annotations

from . import Op, keeps_nothing, no_products, register


@register
class LayerDrop(Op):
    """One draw per step for the whole batch: the layer's input (probability p) or its output;
    evaluation, decoding and exported graphs give the output. Position-wise, no products, and
    its gradient is routed, not computed, so its backward keeps nothing (the layer it skips is
    still computed: the saving Fan et al. report is not taken)."""
    name, position_wise = "layer_drop", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)
