"""``TorchModel``: the IR executed as an ``nn.Module``.

The module tree mirrors IR node names (``encoder.layers.0.self_attn``), so state-dict keys
are IR parameter names. Construction ties parameters as the IR says, then checks that the
module's parameters are exactly the IR's table, name for name and shape for shape, and
initialises each as the IR declares: the IR stays the one source of truth.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from tfspec.errors import TfspecError
from tfspec.ir import Graph, build_graph
from tfspec.ir.ops import definition
from tfspec.padding import implied_mask
from tfspec.registry import discover
from tfspec.spec import Spec
from tfspec.spec.audio import sinusoids

from .blocks import Carried, LayerBlock, group_plan, layer_prefixes, wire
from .frames import frame_padding
from .registry import LOWERINGS


@dataclass
class DecodeState:
    """What incremental decoding carries from one call to the next.

    ``cache`` maps an IR node name to its tensors, batch first: an attention layer's keys
    and values (B, h, L, d), a causal convolution's last inputs (B, W, d), a recurrent
    layer's hidden state (B, 1, H). ``offset`` counts the target positions already consumed.
    """

    cache: dict[str, tuple[torch.Tensor, ...]] = field(default_factory=dict)
    offset: int = 0
    memory: torch.Tensor | None = None
    """The encoder output (B, S, d_model) cross-attention reads at the first step."""
    src_padding: torch.Tensor | None = None
    """bool (B, S), True at source padding; None when nothing is padded."""
    cross: set[str] = field(default_factory=set)
    """Names of cache entries computed from the source only (cross-attention keys/values)."""
    key_padding: torch.Tensor | None = None
    """bool (B, offset), True at the target positions fed as padding (the left padding of
    prompts of different lengths); None when none was."""
    next_position: torch.Tensor | None = None
    """int64 (B,): the position of each row's next token, where rows started at different
    lengths; None: every row's is ``offset``."""

    def select(self, index: torch.Tensor, cross: bool = True) -> DecodeState:
        """The state of rows ``index`` (beam reordering, expansion, dropping finished rows).
        ``cross=False`` keeps cross-attention entries as they are: callers that only permute
        rows among copies of the same source may skip copying them."""
        cache = {name: value if (not cross and name in self.cross) else tuple(t.index_select(0, index) for t in value)
                 for name, value in self.cache.items()}
        rows = (None if t is None else t.index_select(0, index)
                for t in (self.memory, self.src_padding, self.key_padding, self.next_position))
        memory, pad, keys, position = rows
        return DecodeState(cache, self.offset, memory, pad, self.cross, keys, position)

    def feed(self, mask: torch.Tensor | None, length: int, device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Record ``length`` new target tokens (``mask``: bool (B, length), True at real ones,
        for a prompt batch; None: all real) and return (key padding over every cached position
        or None, (B, length) positions of the new tokens or None when they are offset..)."""
        if mask is not None and not bool(mask.all()):
            pad = torch.cat([self.key_padding, ~mask], 1) if self.key_padding is not None else ~mask
            base = self.next_position if self.next_position is not None else torch.full(
                (len(mask),), self.offset, device=device)
            positions = base[:, None] + (mask.long().cumsum(1) - 1).clamp(min=0)
            self.key_padding, self.next_position = pad, base + mask.long().sum(1)
            return pad, positions
        if self.key_padding is None:
            return None, None
        batch = len(self.key_padding)
        self.key_padding = torch.cat([self.key_padding, self.key_padding.new_zeros(batch, length)], 1)
        positions = self.next_position[:, None] + torch.arange(length, device=device)
        self.next_position = self.next_position + length
        return self.key_padding, positions


@dataclass
class RunContext:
    """Per-call state shared by the ops: train/eval, key padding per sequence, mask cache."""

    training: bool
    padding: dict[str, torch.Tensor | None]
    """Sequence symbol (S, T) -> bool (B, L), True at padding; None when nothing is padded."""
    state: DecodeState | None = None
    """Set when decoding incrementally: the new target tokens follow ``state.offset`` others."""
    aux_losses: list = field(default_factory=list)
    """Terms the training loss adds (summed over tokens, as the loss is): adaptive computation's
    ponder cost, a mixture of experts' load-balancing and router z-losses."""
    positions: dict[str, torch.Tensor] = field(default_factory=dict)
    """Sequence symbol -> int64 (B, L) positions of each row's vectors, where rows differ (a
    left-padded batch); absent: 0.. (or the state's offset..) for every row."""
    published: dict = field(default_factory=dict)
    """(node name, what) -> a tensor an op hands to later ops of the call beyond its output (the
    first self-attention's values for value residual learning, a layer's logits for residual
    attention: ``backends/torch/crosslayer.py``)."""
    _masks: dict = field(default_factory=dict)

    def start(self, seq: str) -> int:
        """The position of the first vector of ``seq`` when rows share it: a decoding state's
        offset for the target, else 0."""
        return self.state.offset if self.state is not None and seq == "T" else 0

    def cached(self, key, build):
        """Something built once per call (a mask, a rotation table) and shared by the layers
        that ask with the same key. Inside ``torch.compile`` it is built where asked: keys hold
        spec objects Dynamo cannot hash, and building it once per compiled layer costs little."""
        if torch.compiler.is_compiling():
            return build()
        if key not in self._masks:
            self._masks[key] = build()
        return self._masks[key]

    def attention_mask(self, layer, q_seq: str, kv_seq: str, lq: int, lk: int, device):
        """(mask, is_causal) for ``scaled_dot_product_attention``: the kind's visibility
        combined with key padding, built once per call and shared by all layers of a kind."""
        return self.cached((layer, q_seq, kv_seq), lambda: self._build_mask(layer, q_seq, kv_seq, lq, lk, device))

    def _build_mask(self, layer, q_seq, kv_seq, lq, lk, device):
        pad = self.padding.get(kv_seq)
        if pad is not None and pad.shape[1] > lk:  # a banded kind keeps only its newest keys
            pad = pad[:, pad.shape[1] - lk:]
        if pad is None and layer.plain_causal and lq == lk:
            return None, True  # lets SDPA use its fused causal kernel
        # Self-attention queries are the last lq of the lk positions (lq < lk with a KV cache).
        first = lk - lq if kv_seq == q_seq else 0
        visible = layer.visible(torch.arange(first, first + lq, device=device)[:, None],
                                torch.arange(lk, device=device)[None, :])
        if pad is None:
            return visible, False
        keep = ~pad[:, None, None, :]  # (B, 1, 1, Lk)
        return (keep if visible is None else keep & visible), False


@dataclass(frozen=True)
class _Step:
    name: str
    fn: Callable
    inputs: tuple[str, ...]


class TorchModel(nn.Module):
    """Runs an IR graph. ``model(src, tgt)`` (encoder-decoder) or ``model(tokens)`` -> logits."""

    def __init__(self, graph: Graph):
        super().__init__()
        self.graph = graph
        self.pad_id = graph.spec.vocab.pad_id
        self.starts_with_pad = graph.spec.vocab.starts_with_pad
        self._steps: dict[str, _Step] = {}
        self.blocks = {prefix: LayerBlock() for prefix in layer_prefixes(graph)}
        self._waiting = dict(self.blocks)  # blocks not yet attached (_attach_blocks)
        self.layerwise = False
        """Run each layer of the plan as one call of its ``LayerBlock`` (set for FSDP,
        activation checkpointing and ``torch.compile``; the same ops either way)."""
        discover(__package__)  # every module of the backend registers its lowerings: a new op is one file
        for node in graph.nodes():
            if definition(node.op).fed:
                continue
            if node.op not in LOWERINGS:
                raise TfspecError(f"the PyTorch backend cannot lower IR op {node.op!r} ({node.name})")
            fn = LOWERINGS[node.op](node, graph)
            if isinstance(fn, nn.Module):
                self._attach_blocks(node.name)
                self._attach(node.name, fn)
            self._steps[node.name] = _Step(node.name, fn, node.inputs)
        self._attach_blocks()
        self._block_of = wire(self.blocks, self._steps, graph)
        self._tie()
        self._check_against_ir()
        self._plans: dict = {}
        self.aux_loss = None
        """The last forward pass's auxiliary loss (``RunContext.aux_losses`` summed), if any."""

    def _attach_blocks(self, name: str | None = None) -> None:
        """Attach the layer blocks not yet attached: the one ``name`` sits in (just before its
        first module, so parameters keep the graph's order and a seed gives the weights it gave
        before blocks existed), or, with no name, all that are left."""
        for prefix in [p for p in self._waiting if name is None or name.startswith(p + ".")]:
            self._attach(prefix, self._waiting.pop(prefix))

    def _attach(self, name: str, module: nn.Module) -> None:
        parent = self
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(parent, part):
                parent.add_module(part, nn.Module())
            parent = getattr(parent, part)
        parent.add_module(leaf, module)

    def _tie(self) -> None:
        for node in self.graph.nodes():
            for role, name in node.params.items():
                if not node.owns(role):
                    self.get_submodule(node.name).register_parameter(role, self.get_parameter(name))

    def _check_against_ir(self) -> None:
        ours = {name: tuple(p.shape) for name, p in self.named_parameters()}
        theirs = {name: p.shape for name, p in self.graph.params.items()}
        if ours != theirs:
            diff = sorted(set(ours.items()) ^ set(theirs.items()))
            raise AssertionError(f"PyTorch parameters differ from the IR: {diff[:6]}")

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialise every parameter as the IR declares (``Param.init``)."""
        for name, p in self.named_parameters():
            kind, _, arg = self.graph.params[name].init.partition(":")
            if kind == "xavier_uniform":
                nn.init.xavier_uniform_(p)
            elif kind == "normal":
                nn.init.normal_(p, 0.0, float(arg))
            elif kind == "uniform":
                nn.init.uniform_(p, -float(arg), float(arg))
            elif kind == "constant":  # a learned scalar's start (ScaleNorm's sqrt(d), dynamic tanh's alpha)
                nn.init.constant_(p, float(arg))
            elif kind == "eye":  # hyper-connections' stream-to-stream matrix starts as the identity
                nn.init.eye_(p)
            elif kind == "onehot":  # ... and each sub-layer reads one stream at the start
                nn.init.zeros_(p)[int(arg)] = 1.0
            elif kind == "sinusoids":  # Whisper's encoder position table (tfspec.spec.audio)
                p.copy_(torch.from_numpy(sinusoids(*p.shape)))
            else:
                nn.init.constant_(p, {"zeros": 0.0, "ones": 1.0}[kind])

    def forward(self, *tokens: torch.Tensor, **masks: torch.Tensor) -> torch.Tensor:
        """Logits of ``tokens`` (src, tgt or both); ``src_mask``/``tgt_mask`` say where their
        padding is (``run``). Masks by keyword only: torch.onnx's tracer feeds every named
        parameter, so ``model(src, tgt)`` must have none."""
        names = [n for n in ("src", "tgt") if n in self.graph.ports]
        if len(tokens) != len(names):
            raise TypeError(f"{self.graph.name} takes {len(names)} token tensors ({', '.join(names)})")
        if set(masks) - {"src_mask", "tgt_mask"}:
            raise TypeError(f"unexpected keyword arguments {sorted(set(masks) - {'src_mask', 'tgt_mask'})}")
        return self.run(dict(zip(names, tokens)) | masks)["logits"]

    def run(self, feeds: dict[str, torch.Tensor], outputs=("logits",), state: DecodeState | None = None
            ) -> dict[str, torch.Tensor]:
        """Compute the named ``outputs`` (ports: logits, memory) from ``feeds`` (ports: src,
        tgt, memory), running only the ops in between.

        With a ``state``, ``tgt`` holds only new tokens: they follow the ``state.offset``
        positions whose keys, values and hidden states the state caches, and the state is
        updated in place. Decoding feeds no target padding (finished rows keep emitting).
        ``frames`` come with ``lengths`` (B,) int64: how many of each row's frames are real.
        ``input_values`` (a waveform) may come with ``attention_mask`` (B, samples), 1 at real samples.
        ``src_mask``/``tgt_mask`` (B, L), true or 1 at real tokens, say where padding is (every
        tfspec batcher passes them); a port fed without one gets ``tfspec.padding.implied_mask``.
        A row padded on the left (prompts of different lengths) counts its positions from its
        first real token.
        """
        ports = self.graph.ports
        padding, positions = {}, {}
        if "frames" in feeds:
            padding["S"] = frame_padding(feeds["lengths"], feeds["frames"].shape[1])
            feeds = {k: v for k, v in feeds.items() if k != "lengths"}
        if "input_values" in feeds and "attention_mask" in feeds:  # real samples (backends/torch/waveform.py)
            padding["samples"] = ~feeds["attention_mask"].bool()
        masks = {seq: feeds[f"{port}_mask"].bool() for port, seq in (("src", "S"), ("tgt", "T"))
                 if f"{port}_mask" in feeds}
        feeds = {k: v for k, v in feeds.items() if not k.endswith("_mask")}
        for port, seq in (("src", "S"), ("tgt", "T")):
            if port in feeds and not (state is not None and port == "tgt"):
                keep = masks[seq] if seq in masks else implied_mask(feeds[port], self.pad_id, port == "tgt",
                                                                    self.starts_with_pad)
                padding[seq] = ~keep if not bool(keep.all()) else None
                if padding[seq] is not None and not bool(keep[:, 0].all()):
                    positions[seq] = (keep.long().cumsum(1) - 1).clamp(min=0)
        if state is not None and "tgt" in feeds:
            padding["T"], row_positions = state.feed(masks.get("T"), feeds["tgt"].shape[1], feeds["tgt"].device)
            if row_positions is not None:
                positions["T"] = row_positions
        if state is not None and "S" not in padding:
            padding["S"] = state.src_padding
        if "segments" in ports and "src" in feeds and "segments" not in feeds:  # one segment: ids 0
            feeds = {**feeds, "segments": torch.zeros_like(feeds["src"])}
        ctx = RunContext(self.training, padding, state, positions=positions)
        if state is not None and state.memory is not None:
            feeds = {"memory": state.memory, **feeds}
        env = {ports[name]: value for name, value in feeds.items()}
        for step in self._plan(tuple(sorted(env)), tuple(ports[o] for o in outputs)):
            if isinstance(step, LayerBlock):
                env.update(zip(step.writes, step(Carried(ctx), *[env[i] for i in step.reads])))
            else:
                env[step.name] = step.fn(ctx, *[env[i] for i in step.inputs])
        self.aux_loss = sum(ctx.aux_losses) if ctx.aux_losses else None
        if state is not None and "tgt" in feeds:
            state.offset += feeds["tgt"].shape[1]
        return {o: env[ports[o]] for o in outputs}

    def _plan(self, fed: tuple[str, ...], targets: tuple[str, ...]) -> list:
        """The steps needed for ``targets`` given ``fed``, in IR order (cached); whole layers
        as their blocks when ``layerwise``."""
        key = (fed, targets, self.layerwise)
        if key not in self._plans:
            needed = self.graph.needed(fed, targets) - set(fed)
            unfed = sorted(n for n in needed if n not in self._steps)
            if unfed:
                raise TfspecError(f"cannot compute {unfed[0]!r}: feed its input")
            plan = [s for n, s in self._steps.items() if n in needed]
            self._plans[key] = group_plan(plan, self._block_of, self.blocks) if self.layerwise else plan
        return self._plans[key]


def available_memory() -> int | None:
    """Bytes of memory this process can still allocate (Linux), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            return None


def build_module(model: Spec | Graph, device: str | torch.device = "cpu", dtype=torch.float32) -> TorchModel:
    """Emit and initialise the PyTorch module of a spec or IR graph.

    Refuses before allocating when the weights would not fit in memory; ``device='meta'``
    builds shapes only (for inspection and parameter checks of any size).
    """
    graph = model if isinstance(model, Graph) else build_graph(model)
    device = torch.device(device)
    if device.type == "cpu":
        need, free = graph.num_params * torch.finfo(dtype).bits // 8, available_memory()
        if free is not None and need > free:
            raise TfspecError(f"{graph.name} has {graph.num_params:,} parameters ({need / 2**30:.1f} GiB in "
                              f"{dtype}), more than the {free / 2**30:.1f} GiB of memory available; use "
                              "--device meta to inspect it without allocating, or shrink the spec")
    with torch.device(device):
        module = TorchModel(graph)
    if device.type != "meta":
        module.reset_parameters()
    return module.to(dtype)
