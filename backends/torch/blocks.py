"""A layer of the spec's plan as one callable module, for what works module by module.

``TorchModel`` runs the IR op by op, and a layer's container (``decoder.layers.3``) is a plain
holder of its ops' modules, never called. FSDP2 gathers a module's parameters in a forward
hook, activation checkpointing recomputes a function, and ``torch.compile`` compiles a module's
call: all three need each layer of the plan (``Spec.plan``) to be one call. A ``LayerBlock``
is that container made callable: it runs its layer's ops in IR order, taking the tensors they
read from outside the layer and returning those read after it. The model calls blocks instead
of their ops once ``TorchModel.layerwise`` is set (training does, when sharding, checkpointing
or compiling); the ops, their order and the state-dict keys stay what they are.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Carried:
    """The call's ``RunContext`` as a block's argument. Wrappers copy the dataclasses, lists and
    dicts they find in a module's arguments (FSDP moving inputs to the device); the ops must
    see the call's own context, whose ``aux_losses`` the model sums after the pass."""

    __slots__ = ("ctx", "ran")

    def __init__(self, ctx):
        self.ctx, self.ran = ctx, False

    def context(self):
        """The context for a pass over the block: the call's own the first time; for a
        checkpointed block's recomputation, one whose auxiliary losses go nowhere (the first
        pass's are in the loss already, and keeping these would keep the recomputed tensors)."""
        first, self.ran = not self.ran, True
        return self.ctx if first else replace(self.ctx, aux_losses=[])


class LayerBlock(nn.Module):
    """One layer of a stack (``encoder.layers.0``): its op modules as children, its steps in
    IR order, the names it reads from outside (``reads``) and the names read after it
    (``writes``)."""

    def __init__(self):
        super().__init__()
        self.steps: list = []
        self.reads: tuple[str, ...] = ()
        self.writes: tuple[str, ...] = ()
        self.checkpointed = False
        """Recompute this layer's activations in the backward pass instead of keeping them."""

    def forward(self, carried: Carried, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.checkpointed and torch.is_grad_enabled():
            # Non-reentrant: the saved tensors of the ops inside are recomputed on demand, which
            # also covers what leaves through ctx (a mixture of experts' load-balancing loss).
            return checkpoint(self.run_steps, carried, *inputs, use_reentrant=False)
        return self.run_steps(carried, *inputs)

    def run_steps(self, carried: Carried, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx, env = carried.context(), dict(zip(self.reads, inputs))
        for step in self.steps:
            env[step.name] = step.fn(ctx, *[env[i] for i in step.inputs])
        return tuple(env[w] for w in self.writes)


def layer_prefixes(graph) -> list[str]:
    """``stack.layers.i`` of every layer the spec's plan lists, bottom to top, encoder first."""
    spec = graph.spec
    return [f"{stack}.layers.{layer.index}" for stack in ("encoder", "decoder")
            if getattr(spec, stack, None) is not None for layer in spec.plan(stack)]


def wire(blocks: dict[str, LayerBlock], steps: dict, graph) -> dict[str, str]:
    """Give each block its steps, reads and writes from the graph; return op name -> block."""
    owner = {name: prefix for name in steps for prefix in blocks if name.startswith(prefix + ".")}
    ports = set(graph.ports.values())
    for prefix, block in blocks.items():
        mine = [s for name, s in steps.items() if owner.get(name) == prefix]
        inside = {s.name for s in mine}
        block.steps = mine
        block.reads = tuple(dict.fromkeys(i for s in mine for i in s.inputs if i not in inside))
        block.writes = tuple(s.name for s in mine if s.name in ports or any(
            owner.get(after) != prefix for after in graph.nx.successors(s.name)))
    return owner


def group_plan(plan: list, owner: dict[str, str], blocks: dict[str, LayerBlock]) -> list:
    """``plan`` (steps in IR order) with each layer whose steps are all there replaced by its
    block, at the place of its first step; a layer only partly needed keeps its steps."""
    present = {s.name for s in plan}
    whole = {p for p, b in blocks.items() if b.steps and all(s.name in present for s in b.steps)}
    out, seen = [], set()
    for step in plan:
        prefix = owner.get(step.name)
        if prefix not in whole:
            out.append(step)
        elif prefix not in seen:
            seen.add(prefix)
            out.append(blocks[prefix])
    return out
