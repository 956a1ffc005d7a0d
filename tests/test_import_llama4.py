"""`tfspec import` of Llama 4 text checkpoints (``llama4_text``) against transformers: small random
models (4 experts, every weight perturbed, routers included) written by ``save_pretrained``,
imported through the CLI. Their 13-token batch spans four chunks of chunked attention and four
steps of the NoPE layers' query temperature, so a wrong chunk, temperature, qk norm or pair
layout of the rotary features moves the logits. Logits of the PyTorch backend and of the
exported ONNX graph equal transformers' at the real tokens of a right-padded batch, 20 greedy
tokens equal ``generate``'s through both backends' caches (24 positions: six chunks), the
default configuration counts what transformers counts, import -> ``export --format hf`` ->
``from_pretrained`` gives the original logits back, and bad configurations are refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, assert_pytorch_import_matches, right_padded, save_random)
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 1
SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 24, "intermediate_size_mlp": 40,
         "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "max_position_embeddings": 40, "rms_norm_eps": 1e-3, "pad_token_id": PAD, "bos_token_id": 2,
         "eos_token_id": 3, "num_local_experts": 4, "attention_chunk_size": 4, "floor_scale": 3, "attn_scale": 0.5}
"""Chunks of 4 and a temperature step every 3 positions; rms_norm_eps off its default."""
CASES = {
    # Scout's layout: every layer a mixture (top 1), layer 3 NoPE with temperature, the rotary ones chunked, qk norm
    "scout": {"rope_parameters": {"rope_type": "default", "rope_theta": 1000.0}},
    # Maverick's: dense and sparse layers alternating; top 2, every other layer NoPE, biased attention, llama3
    # rope scaling, no qk norm, tied output
    "interleaved": {"interleave_moe_layer_step": 2, "num_experts_per_tok": 2, "no_rope_layer_interval": 2,
                    "use_qk_norm": False, "attention_bias": True, "tie_word_embeddings": True,
                    "rope_parameters": {"rope_type": "llama3", "rope_theta": 1000.0, "factor": 4.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 8}},
}


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    return save_random("Llama4ForCausalLM", transformers.Llama4TextConfig(**SHAPE | CASES[case]), path)


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


def test_layers_are_what_transformers_builds(cli, tmp_path):
    """moe_layers, no_rope_layers and layer_types given explicitly land on the same layers."""
    config = transformers.Llama4TextConfig(**SHAPE | {"num_hidden_layers": 5, "moe_layers": [0, 3],
                                                      "no_rope_layers": [1, 0, 1, 1, 0],
                                                      "layer_types": ["full_attention", "full_attention",
                                                                      "chunked_attention", "full_attention",
                                                                      "full_attention"]})
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    with torch.device("meta"):
        layers = transformers.Llama4ForCausalLM(config).model.layers
    theirs = [(layer.is_moe_layer, bool(layer.self_attn.use_rope), config.layer_types[layer.layer_idx])
              for layer in layers]
    ours = [(layer.sublayers[1].kind == "moe", layer.attention.positions.kind == "rotary",
             "chunked_attention" if layer.attention.kind == "local_1d_self_attention" else "full_attention")
            for layer in load_spec(tmp_path / "ours").plan("decoder")]
    assert ours == theirs


def test_a_field_transformers_ignores_changes_nothing(cli, tmp_path):
    """router_jitter_noise, which transformers' Llama 4 never reads, set in a checkpoint's config:
    the import (which lists it as ignored) still computes transformers' logits."""
    save("scout", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text()) | {"router_jitter_noise": 0.5}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    ref = transformers.Llama4ForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert_pytorch_import_matches(cli, tmp_path / "hf", ref, *right_padded(VOCAB, PAD))


def test_default_config_counts_as_transformers(cli, tmp_path):
    """Llama4TextConfig(): Scout's text model, 107.8B parameters (17.2B active)."""
    assert_config_imports_at_count(cli, tmp_path / "hf", transformers.Llama4TextConfig(), "Llama4ForCausalLM")


@pytest.mark.parametrize("case", CASES)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), "Llama4ForCausalLM",
                         tokens, keep)


@pytest.mark.parametrize("change,needle", [
    ({"layer_types": ["sliding_attention"] * 4}, "layer_types: [\"sliding_attention\""),
    ({"attention_chunk_size": None, "layer_types": ["chunked_attention"] * 4}, "attention_chunk_size is null"),
    ({"interleave_moe_layer_step": 0, "moe_layers": None}, "interleave_moe_layer_step must be a positive integer"),
    ({"use_qk_norm": "yes"}, "use_qk_norm must be true or false"),
    ({"mlp_bias": True}, "unknown field mlp_bias")])
def test_unsupported_or_malformed_configs_are_refused_by_name(change, needle, cli, tmp_path):
    config = json.loads(transformers.Llama4TextConfig(**SHAPE).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)
