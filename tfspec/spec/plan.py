"""The resolved plan of a stack: one frozen record per layer that every consumer reads.

A spec states most things once for the whole model (``heads``, ``positional``, ``norm``) and
lets a layer override some (an attention layer's own heads or rotary base, a feed-forward
layer's own width). ``Spec.plan`` resolves both into one ``LayerPlan`` per layer: its
sub-layers with every size filled in, their node names, how they join the residual stream and
where the norms sit. The IR builder, the analyses and the checkpoint families read the plan,
never ``block[0]`` or a model-wide attention field, so stacks whose layers differ (sliding and
global attention interleaved, rotary bases per layer, layers without positions) need no case
of their own anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfspec.layers.base import Sublayer


@dataclass(frozen=True)
class LayerPlan:
    """One layer of a stack, resolved."""

    stack: str
    """encoder or decoder."""
    index: int
    """0 at the bottom."""
    sublayers: tuple[Sublayer, ...]
    """The block's sub-layers in order, each ``resolved`` against the spec."""
    names: tuple[str, ...]
    """Their IR node names (``decoder.layers.3.self_attn``)."""
    residual: str
    """sequential: each sub-layer adds to the stream in turn (§3.1); parallel: every sub-layer
    reads the same input and their outputs are added together (GPT-J, GPT-NeoX); with
    parallel_shared_norm they also read one norm of it (GPT-J, Phi-2, Falcon)."""
    norm: str
    """Where each sub-layer's norm sits: post, pre, sandwich or output (``Spec.norm``)."""
    owner: int
    """The layer whose weights this one applies: its own index, or an earlier layer's where the
    stack shares weights across depth (the Universal Transformer's ``shared``, ALBERT's
    ``share_layers``)."""

    @property
    def attention(self) -> Sublayer | None:
        """The layer's first self-attention sub-layer (what decoder-only families describe)."""
        return next((s for s in self.sublayers if s.component == "attention" and not s.needs_memory), None)

    @property
    def ffn(self) -> Sublayer | None:
        return next((s for s in self.sublayers if s.kind == "ffn"), None)


def plan_stack(spec, name: str) -> tuple[LayerPlan, ...]:
    """Every layer of stack ``name`` of ``spec``, bottom to top."""
    from tfspec.ir.names import sublayer_names  # the IR's package imports the schema

    stack = getattr(spec, name)
    layers: dict[int, list] = {}
    for (index, layer), node in zip(stack.sublayers(), sublayer_names(stack, {})):
        layers.setdefault(index, []).append((layer.resolved(spec), f"{name}.{node}"))
    return tuple(LayerPlan(name, index, tuple(s for s, _ in entries), tuple(n for _, n in entries), spec.residual,
                           spec.norm, stack.owner(index)) for index, entries in layers.items())
