"""Layers that carry state along the sequence: the RNN baseline, convolutions (Table 1's rows),
Mamba-2's selective state space and the gated DeltaNet. Their backward pass is counted as their
inputs and output: what a recurrence keeps inside (states per step) is not yet modelled."""

from __future__ import annotations

from . import LayerOp, keeps_inputs_and_output, register


@register
class Recurrent(LayerOp):
    name = "recurrent"
    saved = staticmethod(keeps_inputs_and_output)


@register
class Conv(LayerOp):
    name = "conv"
    saved = staticmethod(keeps_inputs_and_output)


@register
class Mamba2(LayerOp):
    name = "mamba2"
    saved = staticmethod(keeps_inputs_and_output)


@register
class GatedDeltaNet(LayerOp):
    name = "gated_deltanet"
    saved = staticmethod(keeps_inputs_and_output)
