"""x-transformers as the reference of tfspec's variants (issue 57): the same tiny model built by both,
x-transformers' weights copied into tfspec's parameters by role, logits compared.

x-transformers (lucidrains, 2.31.10) names its options after papers; tfspec names them after what
they compute. ``Case`` pairs the two spellings of one model; ``pair(case)`` builds both in eval
mode from one seed and copies the weights; ``check_torch`` and ``check_onnx`` compare their logits
(within ``TOLERANCE``), ``check_cached`` compares tfspec's KV-cached decoding step by step.

The baseline both share (``BASE``): x-transformers' ``Decoder``/``Encoder`` defaults are pre-norm
LayerNorm with a gain and no bias (its ``LayerNorm``), no biases in Q, K, V and W^O, a GELU
(exact) feed-forward of 4 * dim with biases, a final norm, token embeddings unscaled and an
untied output projection without bias. Positions: none (``use_abs_pos_emb=False``), since
x-transformers scales its learned absolute table by dim^-0.5 and tfspec does not.

Stable API (other variant tests import it):

- ``Case(options, attention={}, family="decoder-only", spec={}, hooks=(), init=(), wrapper={})``:
  ``options`` go to x-transformers' ``Decoder``/``Encoder`` (``wrapper`` to its
  ``TransformerWrapper``), ``attention`` onto every tfspec attention layer,
  ``spec`` onto the tfspec spec, ``hooks`` copy what a variant adds (below), ``init`` moves
  x-transformers' weights before they are copied (``fn(xt)``, under no_grad).
- ``pair(case, seed=0) -> (xt, tf)``; ``tokens(batch, length)``; ``logits_xt(xt, ids)``,
  ``logits_tf(tf, ids)``; ``check_torch(case)``, ``check_onnx(case, tmp_path)`` (the export's own
  parity check, steps after pasts included, then onnxruntime against x-transformers),
  ``check_cached(case)``; ``differs(case)``: the variant moves the logits off the baseline's.
- A hook is ``fn(xt, copier)``; ``copier.set(tf_name, tensor)`` writes one tfspec parameter,
  ``xt_layers(xt)`` lists x-transformers' sublayers with the tfspec names they map to
  (``XtLayer.prefix``, e.g. ``decoder.layers.0.self_attn``); ``attention_hook(fn)`` turns
  ``fn(xt_attention, copier, prefix)`` into a hook run on every attention sublayer. Every tfspec
  parameter must be written by the baseline roles or a hook, or ``pair`` fails naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch

from tfspec.backends.torch import build_module
from tfspec.backends.torch.model import DecodeState
from tfspec.spec import Spec

VOCAB, MAX_LEN, DIM, DEPTH, HEADS, DIM_HEAD = 50, 16, 16, 2, 2, 8
TOLERANCE = 1e-4
BASE = {"name": "xt", "vocab": VOCAB, "d_model": DIM, "heads": HEADS, "d_k": DIM_HEAD, "d_v": DIM_HEAD,
        "d_ff": 4 * DIM, "activation": "gelu", "dropout": 0.0, "label_smoothing": 0.0, "norm": "pre",
        "norm_type": "layer", "norm_bias": False, "final_norm": True, "embed_scale": False,
        "tie_embeddings": "none", "positional": {"kind": "none", "max_len": MAX_LEN},
        "biases": {"q": False, "k": False, "v": False, "o": False, "ffn": True}}
"""tfspec's spelling of x-transformers' defaults (module docstring)."""
STACK = {"decoder-only": ("decoder", "causal_self_attention"), "encoder-only": ("encoder", "self_attention")}
"""Per family: the tfspec stack and its self-attention kind."""


@dataclass(frozen=True)
class Case:
    """One model in both spellings (module docstring)."""

    options: dict = field(default_factory=dict)
    attention: dict = field(default_factory=dict)
    family: str = "decoder-only"
    spec: dict = field(default_factory=dict)
    hooks: tuple[Callable, ...] = ()
    init: tuple[Callable, ...] = ()
    """``fn(xt)`` run on the x-transformers model before its weights are copied: a variant whose
    parameters start where they change nothing (talking heads' identity) is moved off that start."""
    wrapper: dict = field(default_factory=dict)
    """Options of x-transformers' ``TransformerWrapper`` itself (``num_memory_tokens``,
    ``use_abs_pos_emb``), beside ``options`` for its ``Decoder``/``Encoder``."""

    def without_variant(self) -> Case:
        """The same model with neither side's option: the baseline it must differ from."""
        return Case(family=self.family)


class XtLayer(NamedTuple):
    """One x-transformers sublayer: its type ('a' attention, 'f' feed-forward), pre-norm, block,
    and the tfspec name it maps to (``decoder.layers.0.self_attn``)."""

    type: str
    norm: torch.nn.Module
    block: torch.nn.Module
    prefix: str


class Copier:
    """Writes x-transformers tensors into a tfspec model's parameters, remembering which it wrote."""

    def __init__(self, tf):
        self.params = dict(tf.named_parameters())
        self.written: set[str] = set()

    def set(self, name: str, tensor: torch.Tensor) -> None:
        target = self.params[name]
        if tuple(target.shape) != tuple(tensor.shape):
            raise ValueError(f"{name}: tfspec holds {tuple(target.shape)}, x-transformers gives {tuple(tensor.shape)}")
        with torch.no_grad():
            target.copy_(tensor)
        self.written.add(name)

    def unwritten(self) -> list[str]:
        return sorted(set(self.params) - self.written)


def spec(case: Case) -> Spec:
    """The tfspec spec of ``case``: ``BASE``, one attention + FFN block per x-transformers layer."""
    stack, kind = STACK[case.family]
    block = [{"kind": kind, **case.attention}, "ffn"]
    return Spec.model_validate(BASE | {"family": case.family, stack: {"layers": DEPTH, "block": block}} | case.spec)


def xt_model(case: Case):
    """x-transformers' ``TransformerWrapper`` of ``case`` (parameters from torch's current seed)."""
    from x_transformers import Decoder, Encoder, TransformerWrapper

    layers = (Decoder if case.family == "decoder-only" else Encoder)
    return TransformerWrapper(num_tokens=VOCAB, max_seq_len=MAX_LEN, **{"use_abs_pos_emb": False} | case.wrapper,
                              attn_layers=layers(dim=DIM, depth=DEPTH, heads=HEADS, attn_dim_head=DIM_HEAD,
                                                 **case.options)).eval()


def xt_layers(xt, family: str = "decoder-only") -> list[XtLayer]:
    """x-transformers' sublayers in order, each with the tfspec name of its counterpart."""
    stack = STACK[family][0]
    found, index = [], {"a": 0, "f": 0}
    for kind, (norms, block, _) in zip(xt.attn_layers.layer_types, xt.attn_layers.layers):
        stem = {"a": "self_attn", "f": "ffn"}[kind]
        found.append(XtLayer(kind, norms[0], block, f"{stack}.layers.{index[kind]}.{stem}"))
        index[kind] += 1
    return found


def gain(norm) -> torch.Tensor:
    """The gain a x-transformers norm multiplies by: its gamma, plus 1 where it stores the gain's
    offset from 1 (``unit_offset``, on by default in 2.x: gamma starts at 0)."""
    return norm.gamma + float(getattr(norm, "unit_offset", False))


def copy_baseline(xt, copier: Copier, family: str) -> None:
    """The roles every model has: embeddings, pre-norm gains, Q/K/V/O, the FFN, final norm, output."""
    stack = STACK[family][0]
    copier.set(f"{stack}.embed.weight", xt.token_emb.emb.weight)
    copier.set(f"{stack}.norm.weight", gain(xt.attn_layers.final_norm))
    copier.set("output.weight", xt.to_logits.weight)
    for layer in xt_layers(xt, family):
        copier.set(f"{layer.prefix}_norm.weight", gain(layer.norm))
        if layer.type == "a":
            a = layer.block
            copier.set(f"{layer.prefix}.w_qkv", torch.cat([a.to_q.weight, a.to_k.weight, a.to_v.weight]))
            copier.set(f"{layer.prefix}.w_o", a.to_out.weight)
        else:
            first, second = layer.block.ff[0][0], layer.block.ff[2]
            copier.set(f"{layer.prefix}.w_1", first.weight)
            copier.set(f"{layer.prefix}.b_1", first.bias)
            copier.set(f"{layer.prefix}.w_2", second.weight)
            copier.set(f"{layer.prefix}.b_2", second.bias)


def attention_hook(fn: Callable) -> Callable:
    """A hook running ``fn(xt_attention, copier, prefix)`` on every attention sublayer."""
    def hook(xt, copier, family="decoder-only"):
        for layer in xt_layers(xt, family):
            if layer.type == "a":
                fn(layer.block, copier, layer.prefix)
    return hook


def pair(case: Case, seed: int = 0):
    """(x-transformers model, tfspec TorchModel), both in eval mode, with the same weights."""
    torch.manual_seed(seed)
    xt = xt_model(case)
    with torch.no_grad():
        for init in case.init:
            init(xt)
    tf = build_module(spec(case)).eval()
    copier = Copier(tf)
    copy_baseline(xt, copier, case.family)
    for hook in case.hooks:
        hook(xt, copier, case.family)
    if missing := copier.unwritten():
        raise AssertionError(f"tfspec parameters no role or hook wrote: {missing}")
    return xt, tf


def tokens(batch: int = 2, length: int = 9, seed: int = 1) -> torch.Tensor:
    """Token ids from 4 up (0..3 are tfspec's special ids: 0 would read as padding)."""
    return torch.randint(4, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def logits_xt(xt, ids: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return xt(ids).numpy()


def logits_tf(tf, ids: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return tf(ids).numpy()


def check_torch(case: Case, ids: torch.Tensor | None = None) -> np.ndarray:
    """tfspec's PyTorch logits equal x-transformers' within ``TOLERANCE``; returns them."""
    ids = tokens() if ids is None else ids
    xt, tf = pair(case)
    want = logits_xt(xt, ids)
    got = logits_tf(tf, ids)
    np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)
    return got


def check_cached(case: Case, ids: torch.Tensor | None = None) -> None:
    """tfspec's KV-cached decoding, one token per step, gives x-transformers' full-sequence logits."""
    ids = tokens() if ids is None else ids
    xt, tf = pair(case)
    want, state, rows = logits_xt(xt, ids), DecodeState(), []
    with torch.no_grad():
        for t in range(ids.shape[1]):
            rows.append(tf.run({"tgt": ids[:, t:t + 1]}, state=state)["logits"][:, -1].numpy())
    np.testing.assert_allclose(np.stack(rows, 1), want, atol=TOLERANCE, rtol=0)


def check_onnx(case: Case, directory: Path, ids: torch.Tensor | None = None) -> None:
    """The spec exported to ONNX passes the export's parity checks (full sequences, steps after
    pasts, greedy decoding, against tfspec's PyTorch), and onnxruntime's logits equal x-transformers'."""
    from tfspec.backends.onnx import OnnxModel, export

    ids = tokens() if ids is None else ids
    xt, tf = pair(case)
    result = export(tf, directory)
    assert result.ok, [str(c) for c in result.checks if not c.ok]
    port = "tgt" if case.family == "decoder-only" else "src"
    got = OnnxModel(directory, device="cpu").logits(**{port: ids.numpy()})
    np.testing.assert_allclose(got, logits_xt(xt, ids), atol=TOLERANCE, rtol=0)


def differs(case: Case, ids: torch.Tensor | None = None, by: float = 1e-3) -> None:
    """The variant is not a no-op: with the weights the two models share, x-transformers' logits
    with its option are off its logits without it by more than ``by``, and tfspec's with the field
    off tfspec's without it by as much."""
    ids = tokens() if ids is None else ids
    xt, tf = pair(case)
    base = case.without_variant()
    base_xt = xt_model(base)
    base_xt.load_state_dict(xt.state_dict(), strict=False)
    base_tf = build_module(spec(base)).eval()
    shared = {k: v for k, v in tf.state_dict().items() if k in base_tf.state_dict()}
    base_tf.load_state_dict(shared, strict=False)
    assert np.abs(logits_xt(xt, ids) - logits_xt(base_xt, ids)).max() > by
    assert np.abs(logits_tf(tf, ids) - logits_tf(base_tf, ids)).max() > by
