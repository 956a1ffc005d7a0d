"""The Universal Transformer's recurrence in depth (Dehghani et al. 2019): the timestep signal
added at each step, adaptive computation time's halting unit and the state it carries."""

from __future__ import annotations

from . import Op, keeps_inputs_and_output, no_products, register


@register
class Timestep(Op):
    name = "timestep"
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)


@register
class Act(Op):
    """The halting unit: one probability per position from a d -> 1 layer."""
    name = "act"
    saved = staticmethod(keeps_inputs_and_output)

    @staticmethod
    def flops(node, s, dense=False):
        return {"halting": 2 * s.n * s.d}


@register
class ActState(Op):
    name = "act_state"
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)
