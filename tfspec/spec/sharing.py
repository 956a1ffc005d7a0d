"""Cross-layer parameter sharing: several layers of a stack applying one layer's weights.

ALBERT (Lan et al. 2020, §3.1) shares all parameters across layers: albert-base's 12 layers
apply one layer's weights 12 times. Its ``num_hidden_groups`` G and ``inner_group_num`` K
generalise that: the L applications fall into G equal runs, each run repeating its own K
distinct layers L / G times. tfspec states exactly that shape: the unrolled stack is cut into
consecutive runs of ``cycle`` x ``repeats`` layers, and within a run layer j applies the weights
of the run's ``j mod cycle``-th layer. The Universal Transformer's ``shared`` stack (one layer,
a timestep signal before each application) is a separate option: ALBERT adds no signal.
"""

from __future__ import annotations

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import Layers


class LayerSharing(SpecModel):
    """Runs of ``cycle`` x ``repeats`` layers, each run ``cycle`` layers with weights of their own
    applied ``repeats`` times in turn (ALBERT: ``cycle: 1, repeats: 12`` for albert-base)."""

    cycle: Layers = 1
    """Layers with weights of their own in each run, applied in order (ALBERT's inner_group_num)."""
    repeats: Layers
    """How many times each run applies its cycle (ALBERT's num_hidden_layers / num_hidden_groups)."""

    @property
    def run(self) -> int:
        """Unrolled layers per run."""
        return self.cycle * self.repeats

    def owner(self, index: int) -> int:
        """The layer whose weights layer ``index`` applies: the first of its run's cycle position."""
        start = index - index % self.run
        return start + (index - start) % self.cycle

    def problem(self, num_layers: int) -> tuple[str, str] | None:
        """(field, message) when a stack of ``num_layers`` layers cannot be cut into runs."""
        if self.repeats == 1:
            return "share_layers.repeats", ("repeats 1 applies each layer once, sharing nothing: drop share_layers "
                                            "or repeat at least twice")
        if num_layers % self.run:
            return "share_layers", (f"the stack's {num_layers} layers do not split into runs of cycle x repeats = "
                                    f"{self.cycle} x {self.repeats} = {self.run}; pick sizes whose product divides "
                                    f"{num_layers}")
        return None
