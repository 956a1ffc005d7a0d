"""Files written by the previous release keep working: tfspec 0.1.0 named a sliding-window
layer's parameters ``local_attn``; today every self-attention kind is ``self_attn``, so a stack
that interleaves full and sliding-window layers keeps one naming scheme. The fixtures in
tests/fixtures/release-0.1.0 were written by tfspec 0.1.0 (commit ae6f3ed): a checkpoint with
the logits it gave, and an ONNX export with the tokens it decoded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file

from tfspec import load_spec
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.checkpoint import load_weights, weights_of
from tfspec.search import SearchOptions, search

RELEASE = Path(__file__).parent / "fixtures" / "release-0.1.0"


def test_parameters_are_named_alike_whatever_the_mask_kind():
    names = set(weights_of(build_module(load_spec(RELEASE / "interleaved.yaml"))))
    for layer in (0, 1):  # layer 0 is full causal attention, layer 1 a sliding window
        assert f"decoder.layers.{layer}.self_attn.w_qkv" in names
        assert f"decoder.layers.{layer}.self_attn_norm.weight" in names
    assert not any("local_attn" in name for name in names)


def test_a_checkpoint_of_the_previous_release_loads_and_computes_the_same():
    written = load_file(str(RELEASE / "interleaved.safetensors"))
    assert "decoder.layers.1.local_attn.w_qkv" in written  # the old name is really in the file
    model = build_module(load_spec(RELEASE / "interleaved.yaml")).eval()
    load_weights(model, RELEASE / "interleaved.safetensors")
    reference = load_file(str(RELEASE / "interleaved-logits.safetensors"))
    with torch.no_grad():
        logits = model(torch.from_numpy(reference["tokens"])).numpy()
    assert np.abs(logits - reference["logits"]).max() < 1e-5


def test_an_export_of_the_previous_release_decodes_the_same_tokens():
    from tfspec.backends.onnx import OnnxModel

    recorded = json.loads((RELEASE / "interleaved-onnx-tokens.json").read_text())
    prompts = np.array(recorded["prompts"])
    onnx = OnnxModel(RELEASE / "interleaved-onnx").decoder()
    model = build_module(load_spec(RELEASE / "interleaved.yaml")).eval()
    load_weights(model, RELEASE / "interleaved.safetensors")
    for beam, tokens in recorded["outputs"].items():
        options = SearchOptions(beam=int(beam), max_length=10, max_extra=10)
        assert search(onnx, None, options, prefix=prompts) == tokens
        assert search(TorchDecoder(model), None, options, prefix=prompts) == tokens  # today's names, same model


def test_training_state_under_the_old_names_is_renamed_too():
    """AdamW's moments in a 0.1.0 training checkpoint are keyed ``PARAM.exp_avg``."""
    from tfspec.ir import build_graph
    from tfspec.ir.names import upgrade

    graph = build_graph(load_spec(RELEASE / "interleaved.yaml"))
    old = {"decoder.layers.1.local_attn.w_qkv.exp_avg": 1, "decoder.layers.1.local_attn_norm.weight.step": 2,
           "decoder.layers.0.self_attn.w_o.exp_avg_sq": 3, "rng.0": 4}
    assert upgrade(old, graph) == {"decoder.layers.1.self_attn.w_qkv.exp_avg": 1,
                                   "decoder.layers.1.self_attn_norm.weight.step": 2,
                                   "decoder.layers.0.self_attn.w_o.exp_avg_sq": 3, "rng.0": 4}
