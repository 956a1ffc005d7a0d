"""Layers that carry state along the sequence: the RNN baseline, convolutions (Table 1's rows),
Mamba-2's selective state space and the gated DeltaNet. Their backward pass is counted as their
inputs and output: what a recurrence keeps inside (states per step) is not yet modelled."""

from __future__ import annotations

from . import LayerOp, keeps_inputs_and_output, register


@register
class Recurrent(LayerOp):
    name, carries = "recurrent", True
    saved = staticmethod(keeps_inputs_and_output)


@register
class Conv(LayerOp):
    name, carries = "conv", True
    saved = staticmethod(keeps_inputs_and_output)


@register
class Mamba2(LayerOp):
    name, carries = "mamba2", True
    saved = staticmethod(keeps_inputs_and_output)


@register
class GatedDeltaNet(LayerOp):
    name, carries = "gated_deltanet", True
    saved = staticmethod(keeps_inputs_and_output)
