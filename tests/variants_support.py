"""Shared pieces of the norm, feed-forward and residual variant tests (``tests/test_variants_*.py``,
issue 57 part B): tiny specs, randomised weights, autograd's saved bytes, and x-transformers
pairs built on the harness (``tests/xtransformers_reference.py``).

The harness's ``pair`` copies x-transformers' LayerNorm gains and reads its sublayers directly;
the variants here wrap those sublayers (``Scale`` for macaron, ``LayerScale``, ``ShiftTokens``)
or replace the norms (ScaleNorm, dynamic tanh), so ``pair`` here reads through the wrappers,
copies each norm with a given function and names sublayers after tfspec's plan (a block
[ffn, attention, ffn] names its second ffn ``ffn_1``)."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tests import xtransformers_reference as ref
from tfspec import build_graph
from tfspec.analysis.flops import analyze_flops
from tfspec.analysis.params import analyze_params
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import RunContext, build_module
from tfspec.backends.torch.model import DecodeState
from tfspec.spec import Spec

TINY = {"name": "m", "family": "decoder-only", "vocab": 60, "d_model": 16, "heads": 2, "d_ff": 32, "dropout": 0.0,
        "norm": "pre", "decoder": {"layers": 2, "block": ["causal_self_attention", "ffn"]}}


def tiny(**fields) -> Spec:
    return Spec.model_validate(TINY | fields)


def randomised(model):
    """``model`` with every parameter drawn from N(0, 0.3), so no gain or shift stays at its start."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def saved_bytes(model, module, *inputs, doubled=None) -> int:
    """Bytes of the activations PyTorch's autograd saves for ``module(ctx, *inputs)``: each storage
    a saved tensor keeps alive once (a view keeps its whole base), parameters left out, measured
    at the inputs' batch and at twice it: the growth is the activations (what an op's ``saved``
    declares), whatever is made from weights alone (their concatenation) cancels. ``doubled``:
    the inputs at twice the batch where repeating each is not how they would be made."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def measure(*xs) -> int:
        saved: dict[int, int] = {}

        def pack(t):
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(RunContext(training=False, padding={}), *xs)
        return sum(size for ptr, size in saved.items() if ptr not in params)

    return measure(*(doubled or [torch.cat([x, x]) for x in inputs])) - measure(*inputs)


def copy_layer_norm(xt_norm, copier, name):
    """The harness's baseline norm: x-transformers' bias-free LayerNorm, its gain as it multiplies."""
    copier.set(f"{name}.weight", ref.gain(xt_norm))


def inner(block):
    """The attention or feed-forward module inside x-transformers' wrappers of a sublayer
    (``Scale`` for macaron, ``LayerScale``, ``ShiftTokens``: each keeps it as ``fn``)."""
    while hasattr(block, "fn"):
        block = block.fn
    return block


def wrapper(block, kind: str):
    """The x-transformers wrapper of type ``kind`` around a sublayer (``LayerScale``, ``Scale``)."""
    while type(block).__name__ != kind:
        block = block.fn
    return block


def sublayers(xt, case: ref.Case) -> list[ref.XtLayer]:
    """x-transformers' sublayers in order, each named after its tfspec counterpart in the plan
    (a block of [ffn, attention, ffn] names its second ffn ``ffn_1``)."""
    names = [name for layer in ref.spec(case).plan("decoder") for name in layer.names]
    found = ref.xt_layers(xt)
    assert len(found) == len(names), (xt.attn_layers.layer_types, names)
    return [layer._replace(prefix=name) for layer, name in zip(found, names)]


def pair(case: ref.Case, copy_norm=copy_layer_norm, seed: int = 0):
    """``ref.pair`` for the variants here: the harness's baseline roles read through the wrappers
    a variant puts around x-transformers' sublayers, each norm by ``copy_norm`` (its parameters
    moved off their starts first, so a gain or shift left out shows), then ``case.hooks``."""
    torch.manual_seed(seed)
    xt, tf = ref.xt_model(case), build_module(ref.spec(case)).eval()
    norms = [xt.attn_layers.final_norm] + [layer.norm for layer in sublayers(xt, case)]
    with torch.no_grad():
        for p in (p for module in norms for p in module.parameters()):
            p.mul_(1.0 + 0.2 * torch.rand_like(p)).add_(0.1 * torch.rand_like(p))
    copier = ref.Copier(tf)
    for name, value in (("decoder.embed.weight", xt.token_emb.emb.weight), ("output.weight", xt.to_logits.weight)):
        copier.set(name, value)
    copy_norm(xt.attn_layers.final_norm, copier, "decoder.norm")
    for layer in sublayers(xt, case):
        copy_norm(layer.norm, copier, f"{layer.prefix}_norm")
        block = inner(layer.block)
        if layer.type == "a":
            copier.set(f"{layer.prefix}.w_qkv", torch.cat([block.to_q.weight, block.to_k.weight, block.to_v.weight]))
            copier.set(f"{layer.prefix}.w_o", block.to_out.weight)
        else:
            first, second = block.ff[0][0], [m for m in block.ff if isinstance(m, torch.nn.Linear)][-1]
            for role, value in (("w_1", first.weight), ("b_1", first.bias), ("w_2", second.weight),
                                ("b_2", second.bias)):
                copier.set(f"{layer.prefix}.{role}", value)
    for hook in case.hooks:
        hook(xt, copier)
    assert copier.unwritten() == []
    return xt, tf


def check(case: ref.Case, directory, copy_norm=copy_layer_norm, ids=None) -> None:
    """Logits of tfspec's PyTorch model, of its KV-cached decoding one token a step, and of the
    ONNX export (after the export's own parity checks) within 1e-4 of x-transformers'."""
    xt, tf = pair(case, copy_norm)
    ids = ref.tokens() if ids is None else ids
    want = ref.logits_xt(xt, ids)
    np.testing.assert_allclose(ref.logits_tf(tf, ids), want, atol=ref.TOLERANCE, rtol=0)
    state, rows = DecodeState(), []
    with torch.no_grad():
        for t in range(ids.shape[1]):
            rows.append(tf.run({"tgt": ids[:, t:t + 1]}, state=state)["logits"][:, -1].numpy())
    np.testing.assert_allclose(np.stack(rows, 1), want, atol=ref.TOLERANCE, rtol=0)
    result = export(tf, directory)
    assert result.ok, [str(c) for c in result.checks if not c.ok]
    got = OnnxModel(directory, device="cpu").logits(tgt=ids.numpy())
    np.testing.assert_allclose(got, want, atol=ref.TOLERANCE, rtol=0)


def differs(case: ref.Case, copy_norm=copy_layer_norm, by: float = 1e-3) -> None:
    """tfspec's logits with the variant are off those of the same spec without it (the weights
    both have copied over) by more than ``by``: the option is not silently ignored."""
    _, tf = pair(case, copy_norm)
    base = build_module(ref.spec(case.without_variant())).eval()
    base.load_state_dict({k: v for k, v in tf.state_dict().items() if k in base.state_dict()}, strict=False)
    ids = ref.tokens()
    assert np.abs(ref.logits_tf(tf, ids) - ref.logits_tf(base, ids)).max() > by



def counts_match(case: ref.Case, n: int = 9) -> None:
    """tfspec's parameter count equals x-transformers' model's, and its forward FLOPs what torch's
    counter sees x-transformers compute over one sequence of ``n`` (math attention kernel)."""
    torch.manual_seed(0)
    xt, graph = ref.xt_model(case), build_graph(ref.spec(case))
    assert analyze_params(graph).total == sum(p.numel() for p in xt.parameters())
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        xt(ref.tokens(1, n))
    counted = counter.get_total_flops()
    assert abs(analyze_flops(graph, n).forward - counted) <= 0.01 * counted
