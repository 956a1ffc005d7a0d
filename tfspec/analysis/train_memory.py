"""Peak memory of one training step per rank, from the IR alone (``tfspec report --train``).

Estimators such as DeepSpeed's ZeRO estimator and accelerate's ``estimate-memory`` count the
model's states; the activations a step keeps for its backward pass are often the larger part.
Both come from the IR here:

- states from the parameter table: weights, gradients and the optimizer's moments (Adam: two
  per weight; plain SGD: none) in float32 (``bf16`` keeps float32 masters and gathers bfloat16
  copies). DDP adds its gradient buckets (a second copy of the gradients). FSDP divides them by
  the ranks and adds what is gathered whole: the root's weights and gradients (embeddings,
  final norm, output projection, which stay gathered through the step) and two layers' weights
  (the running layer and the one prefetched) plus the running layer's unsharded gradient;
- activations from the tensors each op's backward pass needs, read from the op and its IR
  shapes (``SAVED``): a linear layer keeps its input, a norm its input and statistics, fused
  attention its queries, keys, values, output and log-sum-exp, a feed-forward layer its hidden
  activations. Tensors are counted once however many ops read them. With activation
  checkpointing a layer keeps only its inputs, and the backward pass recomputes one layer at a time;
- a tied matrix's gradients: one per use and their sum, at once;
- the loss: the logits, their log-softmax, and the two gradients of that size the backward
  pass creates first.

The peak is weights + moments + the largest of: the activations and the loss at the start of
the backward pass, the activations and a recomputed layer (checkpointing), the gradients at
its end. Figures assume the PyTorch backend's ops (fused
SDPA attention, which keeps no L x L matrix unless the kind adds terms to the scores).
"""

from __future__ import annotations

from dataclasses import dataclass

from tfspec.ir import Graph
from tfspec.ir.ops import definition, numel
from tfspec.ir.ops.memory_tokens import sizes_at, widened

DEVICES = {"24 GB": 24e9, "40 GB": 40e9, "80 GB": 80e9}
"""The device sizes the table reports, besides this machine's memory."""


@dataclass(frozen=True)
class Setup:
    """One way to train: a batch of ``rows`` sequences of ``length`` tokens (source and target)."""

    rows: int
    length: int
    shard: str = "ddp"
    ranks: int = 1
    optimizer: str = "adam"
    precision: str = "fp32"
    checkpoint: bool = False


@dataclass(frozen=True)
class TrainMemory:
    """Bytes per rank at the step's peak, and its parts."""

    weights: int
    gradients: int
    optimizer: int
    gathered: int
    """FSDP: weights and gradients held whole while a unit runs; DDP: its gradient buckets."""
    activations: int
    loss: int
    recompute: int = 0
    tied: int = 0
    """A matrix several ops use (tied embeddings): each use's gradient and their sum live at once."""
    """With checkpointing: the largest layer's activations, rebuilt in the backward pass after
    the loss's gradients are freed."""

    @property
    def peak(self) -> int:
        held = self.weights + self.optimizer + self.gathered
        return held + max(self.activations + max(self.loss, self.recompute), self.gradients + self.tied)



def estimate(graph: Graph, setup: Setup) -> TrainMemory:
    """The peak of one training step of ``graph`` under ``setup``, per rank."""
    sizes = {"B": setup.rows, "S": setup.length, "T": setup.length}
    for tower in graph.towers.values():  # a dual encoder: as many images as texts, each its patches long
        sizes |= {"N": setup.rows, "V": tower.patches.prefix + tower.patches.grid ** 2}
    units = layer_units(graph)
    params = graph.num_params
    n = setup.ranks if setup.shard == "fsdp" else 1
    moments = {"adam": 8, "sgd": 0}[setup.optimizer] * params // n
    weights, grads = 4 * params // n, 4 * params // n
    if setup.shard == "fsdp" and setup.ranks > 1:
        in_units = {p for names in units.values() for p in _unit_params(graph, names)}
        root = sum(p.numel for name, p in graph.params.items() if name not in in_units)
        largest = max((sum(graph.params[p].numel for p in _unit_params(graph, names)) for names in units.values()),
                      default=0)
        half = 2 if setup.precision == "bf16" else 4
        gathered = half * root + 4 * root + (2 * half + 4) * largest
    else:
        gathered = 4 * params if setup.shard == "ddp" and setup.ranks > 1 else 0
    activations, recompute = _activations(graph, units, sizes, setup.checkpoint)
    logits = numel(graph.node(graph.ports[graph.outputs[0] if graph.outputs else "logits"]).shape, sizes) * 4
    uses: dict[str, int] = {}
    for node in graph.nodes():
        for p in node.params.values():
            uses[p] = uses.get(p, 0) + 1
    tied = max((4 * graph.params[p].numel * k for p, k in uses.items() if k > 1), default=0)
    return TrainMemory(weights, grads, moments, gathered, activations, 4 * logits, recompute, tied)


def layer_units(graph: Graph) -> dict[str, list[str]]:
    """``stack.layers.i`` -> its ops' names, for every layer of the spec's plan."""
    spec = graph.spec
    prefixes = [f"{stack}.layers.{layer.index}." for stack in ("encoder", "decoder")
                if getattr(spec, stack, None) is not None for layer in spec.plan(stack)]
    units: dict[str, list[str]] = {p: [] for p in prefixes}
    for node in graph.nodes():
        prefix = next((p for p in prefixes if node.name.startswith(p)), None)
        if prefix is not None:
            units[prefix].append(node.name)
    return units


def _unit_params(graph: Graph, names: list[str]) -> set[str]:
    return {p for name in names for p in graph.node(name).params.values()}


def _activations(graph: Graph, units: dict[str, list[str]], sizes: dict, checkpoint: bool) -> tuple[int, int]:
    """(bytes the forward pass leaves for the backward pass, bytes a recomputed layer adds):
    every op's saved tensors, each counted once; with ``checkpoint``, a layer's inputs instead
    of its own, and the largest layer's again while the backward pass recomputes it."""
    saved, span = {}, widened(graph)  # tensor name -> bytes; memory tokens widen their stack's sequence
    for node in graph.nodes():
        saved |= _saved(graph, node, sizes, span)
    if not checkpoint:
        return sum(saved.values()), 0
    unit_of = {name: prefix for prefix, names in units.items() for name in names}
    outside = {k: v for k, v in saved.items() if unit_of.get(k.split("#")[0]) is None}
    inputs = {i: numel(graph.node(i).shape, sizes_at(graph, span, i, sizes)) * 4 for names in units.values()
              for name in names for i in graph.node(name).inputs if unit_of.get(i) != unit_of[name]}
    one = max((sum(v for k, v in saved.items() if unit_of.get(k.split("#")[0]) == p) for p in units), default=0)
    return sum((outside | inputs).values()), one


def _saved(graph: Graph, node, sizes: dict, span: dict[str, int] | None = None) -> dict[str, int]:
    """The tensors ``node``'s backward pass keeps, by name, as its definition states them
    (``tfspec/ir/ops``): IR tensors by their op's name, tensors inside the op as ``op#what``;
    inside a stack's memory tokens (``span``, ``memory_tokens.widened``) its sequence is m longer."""
    sizes = sizes_at(graph, widened(graph) if span is None else span, node.name, sizes)

    def out(name):
        return numel(graph.node(name).shape, sizes) * 4

    return {k: v for k, v in definition(node.op).saved(graph, node, sizes, out).items() if v}
