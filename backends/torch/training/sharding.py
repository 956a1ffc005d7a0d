"""How a model is spread over the ranks of a run: DDP replicas, or FSDP2 shards per layer.

``parallelize`` is the one call the trainer makes. Under DDP (the default) every rank holds
the whole model. Under FSDP (``--shard fsdp``) each layer of the spec's plan is one
``fully_shard`` unit, then the root (embeddings, final norm, output projection, tied matrices)
is one more, as torchtitan does: a rank keeps 1/N of every parameter, gradient and Adam moment
and gathers one layer's weights at a time. Layers that share weights (ALBERT, the Universal
Transformer, T5's per-stack relative bias) are one unit together; a layer sharing a weight with
the root stays in the root's unit. Activation checkpointing and ``torch.compile`` apply per
layer first, then sharding wraps the result (torchtitan's order). ``accumulating`` is the
context for a micro-batch that is not the step's last: no gradient reduction, and under FSDP no
resharding until the last one.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn

from tfspec.errors import TfspecError

SHARDINGS = ("ddp", "fsdp")


def parallelize(model, device: torch.device, world: int, shard: str = "ddp", checkpoint_activations: bool = False,
                compile: bool = False) -> nn.Module:
    """The module the training loop calls: ``model`` checkpointed, compiled and wrapped as
    asked. Under FSDP ``model`` itself becomes the root ``FSDPModule`` (its parameters
    DTensors), so the optimizer must be built from it afterwards."""
    if shard not in SHARDINGS:
        raise TfspecError(f"--shard {shard!r}: choose one of {', '.join(SHARDINGS)}")
    if checkpoint_activations or compile or shard == "fsdp":
        model.layerwise = True
    if compile:
        allow_recompiles(len(model.blocks))
    for block in model.blocks.values():
        block.checkpointed = checkpoint_activations
        if compile:
            block.compile()
    if world == 1:
        return model
    if shard == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) \
        if device.type == "cuda" else MixedPrecisionPolicy()  # CPU: fp32 throughout (gloo, exact losses)
    for unit in shard_units(model):
        fully_shard(unit if len(unit) > 1 else unit[0], mp_policy=policy)
    fully_shard(model, mp_policy=policy, reshard_after_forward=False)  # the root's are gathered again at once
    return model


def allow_recompiles(blocks: int) -> None:
    """Let Dynamo keep a compiled graph per block. Every block's ``forward`` is one code object,
    and Dynamo keeps one cache per code object, guarded on the block (its steps and reads differ)
    and on the pass (training, evaluation without gradients, FSDP's sharded parameters): past its
    default limit of 8 entries it ran the remaining blocks eagerly."""
    import torch._dynamo.config as dynamo

    entries = 4 * blocks
    dynamo.recompile_limit = max(dynamo.recompile_limit, entries)
    dynamo.accumulated_recompile_limit = max(dynamo.accumulated_recompile_limit, entries)


def shard_units(model) -> list[list[nn.Module]]:
    """The layer blocks grouped into FSDP units: blocks that share a parameter together, blocks
    sharing one with an op outside every layer left out (the root's unit holds them)."""
    prefixes = list(model.blocks)
    users: dict[int, set[str]] = {}
    for name, module in model.named_modules():
        owner = next((p for p in prefixes if name == p or name.startswith(p + ".")), "")
        for p in module._parameters.values():
            if p is not None:
                users.setdefault(id(p), set()).add(owner)
    group = {p: p for p in prefixes}

    def find(p: str) -> str:
        while group[p] != p:
            p = group[p]
        return p

    rooted = set()
    for owners in users.values():
        blocks = sorted(o for o in owners if o)
        if "" in owners:
            rooted.update(blocks)
        for other in blocks[1:]:
            group[find(other)] = find(blocks[0])
    rooted = {find(p) for p in rooted}
    units: dict[str, list[nn.Module]] = {}
    for p in prefixes:
        if find(p) not in rooted:
            units.setdefault(find(p), []).append(model.blocks[p])
    return [u for u in units.values() if any(True for _ in u[0].parameters())]


def accumulating(net: nn.Module, last: bool):
    """The context of one micro-batch's forward and backward: on every micro-batch but the
    step's last, gradients stay local (DDP's ``no_sync``; FSDP: no reduce-scatter and no
    resharding after backward, so the next micro-batch does not gather again)."""
    if hasattr(net, "set_requires_gradient_sync"):  # an FSDPModule
        net.set_requires_gradient_sync(last)
        net.set_reshard_after_backward(last)
        return contextlib.nullcontext()
    if isinstance(net, torch.nn.parallel.DistributedDataParallel) and not last:
        return net.no_sync()
    return contextlib.nullcontext()


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a parameter (a DTensor's shard under FSDP) or the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def full_state(model, optimizer) -> tuple[dict[str, torch.Tensor], dict[str, dict]]:
    """(weights, Adam state by parameter name), whole and on the CPU, on rank 0 (other ranks
    get empty dicts): every rank must call it. Unsharded models give their own tensors."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    if not (dist.is_initialized() and hasattr(model, "set_requires_gradient_sync")):
        return {n: p.detach() for n, p in model.named_parameters()}, moments(model, optimizer)
    weights, optim = get_state_dict(model, optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    names = dict(model.named_parameters())  # the state dict repeats tied matrices under each name
    return {k: v for k, v in weights.items() if k in names}, optim.get("state", {})


def moments(model, optimizer) -> dict[str, dict]:
    """The optimizer's state by parameter name (names outlive the parameters sharding replaces)."""
    return {n: optimizer.state[p] for n, p in model.named_parameters() if p in optimizer.state}


def restore_moments(model, optimizer, state: dict[str, dict]) -> None:
    """Load whole moments by parameter name (a resumed checkpoint's) into the optimizer of a
    sharded ``model``: each rank keeps its shard of each."""
    if not state:
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    groups = [{k: v for k, v in g.items() if k != "params"} | {"params": [n for n, _ in model.named_parameters()]}
              for g in optimizer.param_groups]
    set_optimizer_state_dict(model, optimizer, {"state": state, "param_groups": groups},
                             options=StateDictOptions(full_state_dict=True))
