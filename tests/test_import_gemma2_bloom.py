"""BLOOM, Gemma 2 and Gemma 3 text imported from tiny random checkpoints transformers writes:
logits equal transformers' within 1e-4 in PyTorch and onnxruntime on a batch with a
right-padded and a left-padded row (BLOOM's ALiBi numbers positions among the real tokens,
tfspec's by index: the distances agree), 20 greedy tokens equal ``generate``'s, the default
configuration counts what transformers counts on the meta device, import -> ``export --format
hf`` -> ``from_pretrained`` gives the original logits back, and unsupported or malformed
configurations are one ``error:`` line naming the field."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, perturb, right_padded)

transformers = pytest.importorskip("transformers")

VOCAB = 120
GEMMA = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64,
         "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "rms_norm_eps": 1e-3, "sliding_window": 4,
         "query_pre_attn_scalar": 12}
"""Three layers, sliding ones seeing 4 of 13 tokens; scores scaled by 12^-0.5, not head_dim's 16^-0.5."""
CASES = {
    # 6 heads: ALiBi's slopes for a head count that is not a power of two; eps off its default
    "bloom": ("BloomConfig", "BloomForCausalLM", 3, {
        "vocab_size": VOCAB, "hidden_size": 48, "n_layer": 2, "n_head": 6, "layer_norm_epsilon": 1e-3,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}),
    # sliding, global, sliding; caps low enough that tanh bends perturbed scores and logits
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", 0, GEMMA | {"attn_logit_softcapping": 1.5,
                                                             "final_logit_softcapping": 3.0}),
    # sliding, global, sliding (pattern 2), each kind rotating with its own base
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", 0, GEMMA | {"sliding_window_pattern": 2, "rope_theta": 5e4,
                                                                   "rope_local_base_freq": 1e3}),
    # gemma-3-4b and larger: the global layers' rotation stretched by linear scaling
    "gemma3-linear": ("Gemma3TextConfig", "Gemma3ForCausalLM", 0, GEMMA | {
        "sliding_window_pattern": 2, "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 5e4},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e3}}}),
}


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, _, fields = CASES[case]
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    model = perturb(getattr(transformers, model_class)(getattr(transformers, config_class)(**fields)).eval())
    model.save_pretrained(path)
    return model


def padded_both_ways(pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``right_padded``'s batch with its last row left-padded by 5 tokens."""
    tokens, keep = right_padded(VOCAB, pad)
    tokens[2, :5] = pad
    return tokens, tokens != pad


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    pad = CASES[case][2]
    tokens, keep = padded_both_ways(pad)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, pad)


DEFAULTS = {"bloom": ("BloomConfig", "BloomForCausalLM"), "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
            "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM")}
"""Each family's default configuration: BLOOM's 2-layer test shape, gemma-2-2b, gemma-2-2b's
shape with Gemma 3's vocabulary, rotary bases and 5:1 sliding/global pattern."""


@pytest.mark.parametrize("family", DEFAULTS)
def test_default_config_counts_as_transformers(family, cli, tmp_path):
    config_class, model_class = DEFAULTS[family]
    assert_config_imports_at_count(cli, tmp_path / "hf", getattr(transformers, config_class)(), model_class)


@pytest.mark.parametrize("case", CASES)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, CASES[case][2])
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), CASES[case][1], tokens, keep)


@pytest.mark.parametrize("case,change,needle", [
    ("bloom", {"apply_residual_connection_post_layernorm": True},
     "apply_residual_connection_post_layernorm: true is not supported"),
    ("bloom", {"num_attention_heads": 4}, "n_head (6) and num_attention_heads (4) name one setting and disagree"),
    ("bloom", {"n_embed": "48"}, "n_embed must be an integer"),
    ("bloom", {"tie_word_embeddings": False}, "tie_word_embeddings: false is not supported"),
    ("bloom", {"use_alibi": False}, "unknown field use_alibi"),
    ("gemma2", {"hidden_activation": "gelu_fast"}, "hidden_activation: \"gelu_fast\" is not supported"),
    ("gemma2", {"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]},
     "layer_types: [\"sliding_attention\", \"chunked_attention\", \"full_attention\"] is not supported"),
    ("gemma2", {"layer_types": ["full_attention"]}, "layer_types gives 1 layers; num_hidden_layers is 3"),
    ("gemma2", {"query_pre_attn_scalar": 0}, "query_pre_attn_scalar must be positive"),
    ("gemma2", {"attn_logit_softcapping": "50"}, "attn_logit_softcapping must be a number"),
    ("gemma2", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
     "rope type \"linear\" is not supported"),
    ("gemma2", {"use_bidirectional_attention": True}, "use_bidirectional_attention: true is not supported"),
    ("gemma3", {"rope_scaling": {"rope_type": "proportional", "factor": 8.0}},
     "rope type \"proportional\" is not supported"),
    ("gemma3", {"rope_parameters": {"global": {"rope_theta": 1e6}}},
     "rope_parameters must be an object of rotary settings per layer type"),
    ("gemma3", {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping: 50.0 is not supported"),
    ("gemma3", {"layer_types": None, "sliding_window_pattern": 0}, "sliding_window_pattern must be positive")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _, _, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)
