"""The decoding cache from the spec alone (tfspec.analysis.kvcache) against published figures,
hand counts, and the values the PyTorch backend really caches while it decodes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tfspec import build_graph, load_spec
from tfspec.analysis.kvcache import analyze_kv_cache
from tfspec.backends.torch import TorchDecoder, build_module


def test_published_decoders():
    """Llama 2 7B caches 2 x 32 layers x 4096 values per token: 0.5 MiB in float16, the figure
    usually quoted; Mistral 7B's 8 key/value heads cache a quarter of that, and its 4096-token
    window keeps the 4095 positions before the next query (which brings its own)."""
    llama = analyze_kv_cache(build_graph(load_spec("zoo/llama-2-7b")), 4096)
    assert llama.per_token * 2 == 512 * 2**10 and llama.at_n == 2 * 32 * 4096 * 4096
    mistral = analyze_kv_cache(build_graph(load_spec("zoo/mistral-7b")), 4096)
    assert mistral.per_token == 2 * 32 * 8 * 128 and mistral.at_n == mistral.per_token * 4095
    assert all(layer.limit == 4095 for layer in mistral.layers)
    assert analyze_kv_cache(build_graph(load_spec("zoo/mistral-7b")), 1000).at_n == mistral.per_token * 1000


def test_the_paper_base_model_caches_cross_attention_per_source_position():
    report = analyze_kv_cache(build_graph(load_spec("base")), 20, m=30)
    per_layer = 8 * (64 + 64)  # h x (d_k + d_v)
    assert report.per_token == 6 * per_layer  # six decoder self-attention layers
    assert report.at_n == 6 * per_layer * 20 + 6 * per_layer * 30  # plus six cross-attention layers over m


def test_report_prints_it_and_an_encoder_has_none(cli, write_spec):
    mqa = write_spec("extends: zoo/llama-2-7b\nname: mqa\nkv_heads: 1\n")
    code, out, _ = cli("report", mqa, "--format", "json", "--n", "64")
    cache = json.loads(out)["kv_cache"]
    assert code == 0 and cache["values_per_token"] == 32 * 1 * (128 + 128)  # multi-query: one head per layer
    assert cache["bytes_at_n"]["float16"] == 2 * 64 * cache["values_per_token"]
    code, out, _ = cli("report", mqa, "--n", "64")
    assert "decoding cache (attention keys and values): 8,192 values per generated token (16.0 KiB in float16)" in out
    code, out, _ = cli("report", "zoo/bert-base", "--format", "json")
    assert code == 0 and json.loads(out)["kv_cache"] is None


@pytest.mark.parametrize("name", ["tiny", "window"])
def test_it_counts_what_the_pytorch_decoder_caches(name, write_spec):
    """Decode n tokens one at a time and count the keys and values the backend holds."""
    spec = load_spec("tiny") if name == "tiny" else load_spec(write_spec("""
        name: window
        family: decoder-only
        vocab: 64
        d_model: 32
        heads: 4
        kv_heads: 2
        d_ff: 48
        norm: pre
        decoder:
          groups:
            - {layers: 1, block: [causal_self_attention, ffn]}
            - {layers: 1, block: [{kind: restricted_self_attention, r: 3, causal: true}, ffn]}
    """))
    torch.manual_seed(0)
    decoder, n, m = TorchDecoder(build_module(spec)), 9, 5
    src = np.full((1, m), 5) if spec.encoder is not None else None
    state = decoder.start(src)
    for _ in range(n):
        _, _, state = decoder.step(state, np.array([[6]]), 1)
    held = sum(t.numel() for name_, tensors in state.cache.items() for t in tensors[:2] if "attn" in name_)
    assert held == analyze_kv_cache(build_graph(spec), n, m).at_n
