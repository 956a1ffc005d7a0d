"""The latent attention layer (``tfspec.layers.latent_attention``) on its own: parameter, FLOP
and cache counts by hand, a training step through it, and its spec errors (the comparison with
transformers' DeepSeek-V2 is tests/test_import_latent_attention.py)."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from tfspec import build_graph
from tfspec.analysis.flops import analyze_flops
from tfspec.analysis.kvcache import analyze_kv_cache
from tfspec.backends.torch import build_module
from tfspec.spec import Spec

D, H, NOPE, ROPE, V, KV, Q = 32, 4, 8, 4, 12, 16, 24


def mla_spec(**layer) -> Spec:
    attention = {"kind": "latent_attention", "kv_lora_rank": KV, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE,
                 "v_head_dim": V, **layer}
    return Spec.model_validate({
        "name": "m", "family": "decoder-only", "vocab": 100, "d_model": D, "heads": H, "d_ff": 48, "dropout": 0.0,
        "norm": "pre", "norm_type": "rms", "gated": True, "activation": "silu", "bias": False,
        "positional": {"kind": "rotary", "max_len": 64}, "decoder": {"layers": 2, "block": [attention, "ffn"]}})


@pytest.mark.parametrize("q_lora_rank", [None, Q])
def test_parameters_flops_and_cache_by_hand(q_lora_rank):
    graph = build_graph(mla_spec(q_lora_rank=q_lora_rank))
    node = graph.node("decoder.layers.0.self_attn")
    q = D * H * (NOPE + ROPE) if q_lora_rank is None else D * Q + Q + Q * H * (NOPE + ROPE)
    by_hand = q + D * (KV + ROPE) + KV + KV * H * (NOPE + V) + H * V * D
    assert sum(graph.params[name].numel for name in node.params.values()) == by_hand
    n = 10
    flops = analyze_flops(graph, n).to_json()
    assert flops  # the formula evaluates
    projections = 2 * n * by_hand - 2 * n * (Q if q_lora_rank else 0) - 2 * n * KV  # gains are no products
    pairs = n * (n + 1) // 2
    terms = node.layer.flops(type("S", (), {"n": n, "d": D, "h": H, "computed_pairs": None})(), False)
    assert sum(terms.values()) == projections + 2 * pairs * H * (NOPE + ROPE + V)
    cache = analyze_kv_cache(graph, n)
    assert cache.per_token == 2 * (KV + ROPE)


def test_trains():
    model = build_module(mla_spec(q_lora_rank=Q)).train()
    tokens = torch.randint(4, 100, (2, 9))
    loss = model.loss(tokens) if hasattr(model, "loss") else model(tokens).logsumexp(-1).mean()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("change,needle", [
    ({"d_k": 16}, "latent attention derives d_k"),
    ({"qk_norm": "head"}, "latent attention scores are plain dot products"),
    ({"kv_lora_rank": 0}, "kv_lora_rank")])
def test_spec_errors_name_the_field(change, needle):
    with pytest.raises(ValidationError, match=needle):
        mla_spec(**change)
