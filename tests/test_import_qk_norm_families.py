"""`tfspec import` of Qwen3, OLMo 2 and SmolLM3 checkpoints against transformers: small random
models (every weight perturbed, the query/key norm gains included) written by ``save_pretrained``,
imported through the CLI; logits of the PyTorch backend and of the exported ONNX graph equal
transformers' at the real tokens of a right-padded batch, 20 greedy tokens equal ``generate``'s,
the default configurations count what transformers counts, import -> ``export --format hf`` ->
``from_pretrained`` gives the original logits back, and bad configurations are refused by name."""

from __future__ import annotations

import json

import pytest

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, right_padded, save_random)
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 4  # no model below generates id 4 in its 20 greedy tokens
SHAPE = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 40, "rms_norm_eps": 1e-3,
         "pad_token_id": PAD, "bos_token_id": 2, "eos_token_id": 3}
"""rms_norm_eps off its defaults, so that an importer ignoring it (or the query/key norms') computes something else."""
CASES = {
    # heads 24 wide under a 64-wide model (Qwen3-0.6B's are wider than hidden / heads), untied output
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 24, "rope_parameters": {
        "rope_type": "default", "rope_theta": 1e6}}),
    "qwen3-biased-tied": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16, "attention_bias": True,
                                                              "tie_word_embeddings": True}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    # layer 0 rotary, layers 1 and 2 without positions (NoPE), tied output
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", {"num_hidden_layers": 3, "no_rope_layers": [1, 0, 0]}),
}
"""case -> (config class, model class, config fields beyond SHAPE)."""


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields = CASES[case]
    return save_random(model_class, getattr(transformers, config_class)(**SHAPE | fields), path)


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


def test_smollm3_layers_without_positions_are_groups(cli, tmp_path):
    """no_rope_layers [1, 0, 0]: a rotary layer, then two without positions; the interval (every
    4th layer) when the list is absent, as SmolLM3Config computes it."""
    save("smollm3", tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    spec = load_spec(tmp_path / "ours")
    assert [layer.attention.positions.kind for layer in spec.plan("decoder")] == ["rotary", "none", "none"]
    config = {"model_type": "smollm3", **SHAPE, "num_hidden_layers": 8}
    (tmp_path / "interval").mkdir()
    (tmp_path / "interval" / "config.json").write_text(json.dumps(config))
    assert cli("import", tmp_path / "interval", "-o", tmp_path / "ours-interval", "--quiet")[0] == 0
    theirs = transformers.SmolLM3Config.from_pretrained(tmp_path / "interval").no_rope_layers
    ours = [int(layer.attention.positions.kind == "rotary") for layer in load_spec(tmp_path / "ours-interval").plan(
        "decoder")]
    assert ours == theirs == [1, 1, 1, 0, 1, 1, 1, 0]


DEFAULTS = {"qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
            "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM")}
"""Each family's default configuration: Qwen3Config() (Qwen3-8B's layout), Olmo2Config() (OLMo 2 7B's),
SmolLM3Config() (SmolLM3-3B's)."""


@pytest.mark.parametrize("family", DEFAULTS)
def test_default_config_counts_as_transformers(family, cli, tmp_path):
    config_class, model_class = DEFAULTS[family]
    assert_config_imports_at_count(cli, tmp_path / "hf", getattr(transformers, config_class)(), model_class)


EXPORTED = {"qwen3": "Qwen3ForCausalLM", "qwen3-biased-tied": "Qwen3ForCausalLM", "olmo2": "Olmo2ForCausalLM",
            "smollm3": "SmolLM3ForCausalLM"}


@pytest.mark.parametrize("case", EXPORTED)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), EXPORTED[case], tokens, keep)


@pytest.mark.parametrize("case,change,needle", [
    ("qwen3", {"use_sliding_window": True, "sliding_window": 8}, "use_sliding_window: true is not supported"),
    ("qwen3", {"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 8},
     "layer_types: [\"full_attention\", \"sliding_attention\"] is not supported; tfspec imports Qwen3 with every"),
    ("qwen3", {"mlp_bias": True}, "unknown field mlp_bias"),
    ("qwen3", {"head_dim": "24"}, "head_dim must be an integer"),
    ("qwen3", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e6, "factor": 4.0}},
     "rope type \"proportional\" is not supported"),
    ("olmo2", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("olmo2", {"qk_layernorm": True}, "unknown field qk_layernorm"),
    ("olmo2", {"rms_norm_eps": "small"}, "rms_norm_eps must be a number"),
    ("smollm3", {"use_sliding_window": True, "sliding_window": 8}, "use_sliding_window: true is not supported"),
    ("smollm3", {"layer_types": ["full_attention", "sliding_attention", "full_attention"], "sliding_window": 8},
     "layer_types: [\"full_attention\", \"sliding_attention\", \"full_attention\"] is not supported"),
    ("smollm3", {"no_rope_layers": [1, 2, 0]}, "no_rope_layers: [1, 2, 0] is not supported"),
    ("smollm3", {"no_rope_layers": [1, 0]}, "for each of the 3 layers"),
    ("smollm3", {"no_rope_layers": None, "no_rope_layer_interval": 0}, "no_rope_layer_interval must be a positive"),
    ("smollm3", {"no_rope_layers": None, "no_rope_layer_interval": "4"}, "no_rope_layer_interval must be an integer")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**SHAPE | fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)
