"""`tfspec import` of PhiMoE checkpoints against transformers: a small random PhimoeForCausalLM
(LayerNorms with shifts, biased attention and output projections, SparseMixer routing over 4
experts; every weight perturbed) written by ``save_pretrained``, imported through the CLI; logits of
the PyTorch backend and of the exported ONNX graph equal transformers' at the real tokens of a
right-padded batch, 20 greedy tokens equal ``generate``'s, the default configuration counts what
transformers counts, import -> ``export --format hf`` -> ``from_pretrained`` gives the original
logits back, and what tfspec does not compute is refused by name."""

from __future__ import annotations

import json

import pytest

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, right_padded, save_random)

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 0
SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 40, "rms_norm_eps": 1e-3,
         "pad_token_id": PAD, "bos_token_id": 2, "eos_token_id": 3, "num_local_experts": 4, "attention_bias": True,
         "lm_head_bias": True, "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0},
         # a closeness bound the perturbed router logits fall within: the second softmaxes hold several experts
         "router_jitter_noise": 0.3}


def save(path, **changes):
    return save_random("PhimoeForCausalLM", transformers.PhimoeConfig(**SHAPE | changes), path)


@pytest.mark.parametrize("changes", [{}, {"sliding_window": 6, "attention_bias": False, "lm_head_bias": False}])
def test_logits_and_greedy_tokens_match_transformers(changes, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(tmp_path / "hf", **changes), tokens, keep, PAD)


def test_default_config_counts_as_transformers(cli, tmp_path):
    """PhimoeConfig(): Phi-3.5-MoE's shape (32 layers of 16 experts)."""
    assert_config_imports_at_count(cli, tmp_path / "hf", transformers.PhimoeConfig(), "PhimoeForCausalLM")


def test_round_trip_gives_the_original_logits(cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(tmp_path / "original"), "PhimoeForCausalLM", tokens, keep)


@pytest.mark.parametrize("change,needle", [
    ({"num_experts_per_tok": 3}, "num_experts_per_tok: 3 is not supported"),
    ({"router_jitter_noise": -0.1}, "router_jitter_noise must be at least 0"),
    ({"lm_head_bias": "yes"}, "lm_head_bias must be true or false"),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 4,
                          "long_factor": [1.0] * 4, "short_mscale": 1.2, "long_mscale": 1.2,
                          "original_max_position_embeddings": 20}}, "rope type \"longrope\" is not supported"),
    ({"mlp_bias": True}, "unknown field mlp_bias")])
def test_unsupported_or_malformed_configs_are_refused_by_name(change, needle, cli, tmp_path):
    config = json.loads(transformers.PhimoeConfig(**SHAPE).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)
