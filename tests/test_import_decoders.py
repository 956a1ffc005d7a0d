"""`tfspec import` of OPT, StarCoder2 and StableLM checkpoints against transformers: small random
models (every weight perturbed) written by ``save_pretrained``, imported through the CLI; logits
of the PyTorch backend and of the exported ONNX graph equal transformers' at the real tokens of a
right-padded batch, 20 greedy tokens equal ``generate``'s, the default configuration counts
what transformers counts, and import -> ``export --format hf`` -> ``from_pretrained`` gives the
original logits back."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, right_padded, save_random)
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 1
SHAPE = {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "max_position_embeddings": 40}
CASES = {
    # relu, offset positions, biases; pad 1 and </s> 2 as in the published configs
    "opt": ("OPTConfig", "OPTForCausalLM", {"ffn_dim": 96, "pad_token_id": PAD, "bos_token_id": 2,
                                            "eos_token_id": 2}),
    # a 6-token window, grouped-query attention, biased LayerNorms and MLP; eps off its default
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", {
        "intermediate_size": 96, "num_key_value_heads": 2, "sliding_window": 6, "norm_epsilon": 1e-3,
        "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": PAD}),
    # rotary on 4 of 16 features per head (the default factor, 0.25), q/k/v biases, an untied output
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {
        "intermediate_size": 96, "num_key_value_heads": 2, "use_qkv_bias": True, "layer_norm_eps": 1e-3,
        "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}, "bos_token_id": 0, "eos_token_id": 3,
        "pad_token_id": PAD}),
}


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields = CASES[case]
    return save_random(model_class, getattr(transformers, config_class)(**SHAPE | fields), path)


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


def test_opt_checkpoint_with_base_model_names(cli, tmp_path):
    """The published OPT checkpoints (facebook/opt-125m ..) say OPTForCausalLM but hold OPTModel's
    tensors (``decoder.*``, no ``model.`` prefix, no lm_head): they import as the tied model."""
    ref = save("opt", tmp_path / "causal")
    ref.model.save_pretrained(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text()) | {"architectures": ["OPTForCausalLM"]}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    tokens, keep = right_padded(VOCAB, PAD)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[keep], ref(tokens).logits[keep], atol=1e-4, rtol=0)


DEFAULTS = {"opt": ("OPTConfig", "OPTForCausalLM", {}),
            # Starcoder2Config's ids (50256, GPT-2's) lie outside its 49152-token vocabulary; the published
            # starcoder2 configurations use 0
            "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", {"bos_token_id": 0, "eos_token_id": 0}),
            "stablelm": ("StableLmConfig", "StableLmForCausalLM", {})}
"""Each family's default configuration: the shapes of facebook/opt-125m, bigcode/starcoder2-3b, stablelm-3b-4e1t."""


@pytest.mark.parametrize("family", DEFAULTS)
def test_default_config_counts_as_transformers(family, cli, tmp_path):
    config_class, model_class, changes = DEFAULTS[family]
    config = getattr(transformers, config_class)(**changes)
    assert_config_imports_at_count(cli, tmp_path / "hf", config, model_class)


@pytest.mark.parametrize("case", CASES)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), CASES[case][1], tokens, keep)


@pytest.mark.parametrize("case,change,needle", [
    ("opt", {"enable_bias": "yes"}, "enable_bias must be true or false"),
    ("opt", {"moe_experts": 8}, "unknown field moe_experts"),
    ("stablelm", {"use_parallel_residual": "yes"}, "use_parallel_residual must be true or false"),
    ("stablelm", {"qk_layernorm": 1}, "qk_layernorm must be true or false"),
    ("stablelm", {"partial_rotary_factor": "quarter", "rope_parameters": None},
     "partial_rotary_factor must be a number"),
    ("stablelm", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.1}},
     "fraction) = int(16 x 0.1) = 1 must be even"),
    ("starcoder2", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    # transformers' StarCoder2 (as Llama's) never reads the factor: it rotates every feature
    ("starcoder2", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
     "partial_rotary_factor: 0.5 is not supported; transformers' StarCoder2 rotates every feature"),
    ("starcoder2", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4, "factor": 4.0}},
     "rope type \"proportional\" is not supported"),
    ("starcoder2", {"pad_token_id": 50256}, "pad_id (50256) must be smaller than the vocab")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**SHAPE | fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)


@pytest.mark.parametrize("rotary", [{}, {"partial_rotary_factor": 0.5},
                                    {"partial_rotary_factor": 0.5, "rope_parameters": {
                                        "rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.75}}])
def test_stablelm_rotates_the_share_transformers_reads(rotary, cli, tmp_path):
    """StableLM's rotated share as transformers 4 files write it (top level, 0.25 when absent)
    and as transformers 5 does (inside rope_parameters, which wins): the fraction transformers reads."""
    config = {"model_type": "stablelm", "architectures": ["StableLmForCausalLM"], **SHAPE, **rotary}
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    theirs = transformers.StableLmConfig.from_pretrained(tmp_path / "hf").rope_parameters["partial_rotary_factor"]
    assert load_spec(tmp_path / "ours").positional.fraction == theirs
