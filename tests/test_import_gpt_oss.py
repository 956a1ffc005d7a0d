"""`tfspec import` of gpt-oss checkpoints against transformers: a small random GptOssForCausalLM
(attention sinks, alternating sliding and full layers, a biased router over 4 experts with biased
clamped SwiGLUs, YaRN positions; every weight perturbed, sinks included) written by
``save_pretrained``, imported through the CLI; logits of the PyTorch backend and of the exported
ONNX graph equal transformers' at the real tokens of a right-padded batch, 20 greedy tokens equal
``generate``'s, the default configuration counts what transformers counts, import -> ``export
--format hf`` -> ``from_pretrained`` gives the original logits back, and what tfspec does not
compute is refused by name."""

from __future__ import annotations

import json

import pytest

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, right_padded, save_random)

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 1
SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3, "head_dim": 8,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 40, "rms_norm_eps": 1e-3,
         "pad_token_id": PAD, "bos_token_id": 2, "eos_token_id": 3, "num_local_experts": 4, "num_experts_per_tok": 2,
         # a 6-token window (the batch is 13 long), a clamp the perturbed branches reach, YaRN over 10 positions
         "sliding_window": 6, "swiglu_limit": 1.5,
         "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "truncate": False, "original_max_position_embeddings": 10, "rope_theta": 1000.0}}


def save(path, **changes):
    return save_random("GptOssForCausalLM", transformers.GptOssConfig(**SHAPE | changes), path)


def test_logits_and_greedy_tokens_match_transformers(cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(tmp_path / "hf"), tokens, keep, PAD)


def test_layer_types_place_the_sliding_layers(cli, tmp_path):
    """layer_types [full, sliding, sliding]: not the default alternation, and still transformers' logits."""
    tokens, keep = right_padded(VOCAB, PAD)
    ref = save(tmp_path / "hf", layer_types=["full_attention", "sliding_attention", "sliding_attention"])
    assert_decoder_import_matches(cli, tmp_path / "hf", ref, tokens, keep, PAD)


def test_default_config_counts_as_transformers(cli, tmp_path):
    """GptOssConfig(): gpt-oss-120b's shape (36 layers of 128 experts), sinks and biases counted."""
    assert_config_imports_at_count(cli, tmp_path / "hf", transformers.GptOssConfig(), "GptOssForCausalLM")


def test_round_trip_gives_the_original_logits(cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(tmp_path / "original"), "GptOssForCausalLM", tokens, keep)


@pytest.mark.parametrize("change,needle", [
    ({"swiglu_alpha": 1.5}, "swiglu_alpha: 1.5 is not supported"),
    ({"swiglu_limit": 0.0}, "swiglu_limit must be positive"),
    ({"mlp_bias": True}, "unknown field mlp_bias"),
    ({"layer_types": ["full_attention"]}, "layer_types gives 1 layers; num_hidden_layers is 3"),
    ({"quantization_config": {"quant_method": "mxfp4"}}, "quantization_config"),
    ({"num_experts_per_tok": 5}, "num_experts_per_tok (5) must be between 1 and num_local_experts (4)")])
def test_unsupported_or_malformed_configs_are_refused_by_name(change, needle, cli, tmp_path):
    config = json.loads(transformers.GptOssConfig(**SHAPE).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)


def test_published_fields_transformers_ignores_import(cli, tmp_path):
    """gpt-oss-20b's config.json carries experts_per_token and initial_context_length from OpenAI's
    own format, which transformers never reads: imported, listed as ignored."""
    config = json.loads(transformers.GptOssConfig(**SHAPE).to_json_string()) | {
        "experts_per_token": 2, "initial_context_length": 10, "hidden_act": "silu"}
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    assert "experts_per_token" in (tmp_path / "ours" / "spec.yaml").read_text().split("name:")[0]
