"""Which attention kernel runs, one answer for the backends and ``report --train``
(``tfspec.layers.attention.fused_kernel``): the estimate keeps an L x L weights tensor for an
attention exactly where the PyTorch backend's backward pass really keeps one, measured with
autograd's saved-tensor hooks."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from tfspec import build_graph, load_spec
from tfspec.analysis import train_memory
from tfspec.backends.torch import build_module
from tfspec.positions import ordered
from tfspec.spec import Spec

ROWS, LENGTH, HEADS, LAYERS = 2, 48, 4, 2


def decoder(positional: dict, causal: bool = True, **attention) -> Spec:
    """A two-layer decoder (not ``causal``: an encoder) whose attention has ``positional``
    positions and the fields ``attention``."""
    block = [{"kind": "causal_self_attention" if causal else "self_attention", **attention}, "ffn"]
    return Spec.model_validate({
        "name": "kernel-choice", "family": "decoder-only" if causal else "encoder-only", "vocab": 64, "d_model": 32,
        "heads": HEADS, "d_ff": 64, "dropout": 0.0, "norm": "pre", "positional": {"max_len": 64, **positional},
        "decoder" if causal else "encoder": {"layers": LAYERS, "block": block}})


def _position_cases() -> dict[str, Spec]:
    cases = {}
    for kind in ordered():
        if kind.name == "contextual":  # CoPE keeps (B, h, L, L) tensors of its own (gates, counts): measured
            continue  # with its softmax weights against autograd in tests/test_variants_gated_positions.py
        positional = {"kind": kind.name}
        if "buckets" in kind.fields or "buckets" in kind.reads:  # log-spaced buckets up to max_distance
            positional["max_distance"] = 128
        if kind.over_patches:  # BEiT's bias reads an image's patch grid, which this text spec has not
            continue
        try:
            cases[kind.name] = decoder(positional)
        except ValidationError:  # a kind causal attention refuses (WavLM's gated bias): the encoder's
            cases[kind.name] = decoder(positional, causal=False)
    rotary = {"kind": "rotary"}
    return cases | {"rotary+softcap": decoder(rotary, softcap=30.0), "rotary+sinks": decoder(rotary, sinks=True),
                    "additive": decoder(rotary, score="additive")}


CASES = _position_cases()


def measured_weights(spec: Spec) -> int:
    """How many (B, h, L, L) float tensors the backward pass of one forward call keeps (distinct storages)."""
    module = build_module(build_graph(spec))
    kept = set()

    def pack(t):
        if t.dtype.is_floating_point and tuple(t.shape[-2:]) == (LENGTH, LENGTH) and t.numel() == ROWS * HEADS * LENGTH ** 2:
            kept.add(t.untyped_storage().data_ptr())
        return t

    tokens = torch.randint(spec.vocab.pad_id + 1, spec.vocab.size, (ROWS, LENGTH))  # no padding: no mask
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(tokens)
    return len(kept)


def estimated_weights(graph, rows: int = ROWS, length: int = LENGTH) -> float:
    """How many (B, h, L, L) float32 tensors the estimate's saved attention weights come to."""
    sizes = {"B": rows, "S": length, "T": length}
    held = sum(v for node in graph.nodes() for k, v in train_memory._saved(graph, node, sizes).items()
               if k.endswith("#weights"))
    return held / (rows * HEADS * length ** 2 * 4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_estimate_keeps_attention_weights_exactly_where_the_backend_does(case):
    spec = CASES[case]
    assert estimated_weights(build_graph(spec)) == measured_weights(spec)


def test_rotary_llama_at_4k_keeps_no_attention_weights():
    """Llama-2-7B's rotary attention runs the fused kernel (measured above for rotary), so its
    4,096-token estimate holds no 4096^2 x 32 heads x 32 layers term (~64 GiB)."""
    graph = build_graph(load_spec("zoo/llama-2-7b"))
    assert estimated_weights(graph, rows=1, length=4096) == 0
    activations = train_memory.estimate(graph, train_memory.Setup(rows=1, length=4096)).activations
    assert activations < 64 * 2 ** 30
