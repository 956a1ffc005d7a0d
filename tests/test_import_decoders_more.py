"""More decoder-only families (GPTBigCode, GPT-Neo, BioGPT) imported from tiny random checkpoints
transformers writes: logits equal transformers' within 1e-4 in PyTorch and onnxruntime on a
right-padded batch, 20 greedy tokens equal ``generate``'s, the default configuration counts
what transformers counts, import -> ``export --format hf`` -> ``from_pretrained`` gives the
original logits back where tfspec writes the family, and unsupported configurations are one
``error:`` line naming the field."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, perturb, right_padded)

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 1
CASES = {
    # multi-query attention (one key/value head), Linear layers; eps off its default
    "gpt_bigcode": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM", {
        "vocab_size": VOCAB, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 40, "n_inner": 96,
        "layer_norm_epsilon": 1e-3, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": PAD}),
    # global, then two local layers seeing the last 4 tokens (of 13): unscaled scores, q/k/v without bias
    "gpt_neo": ("GPTNeoConfig", "GPTNeoForCausalLM", {
        "vocab_size": VOCAB, "hidden_size": 64, "num_layers": 3, "num_heads": 4, "max_position_embeddings": 40,
        "attention_types": [[["global", "local", "local"], 1]], "window_size": 4, "intermediate_size": 96,
        "layer_norm_epsilon": 1e-3, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": PAD}),
    # every layer local: a stack of one layer, which export writes
    "gpt_neo_local": ("GPTNeoConfig", "GPTNeoForCausalLM", {
        "vocab_size": VOCAB, "hidden_size": 64, "num_layers": 2, "num_heads": 4, "max_position_embeddings": 40,
        "attention_types": [[["local"], 2]], "window_size": 5, "bos_token_id": 0, "eos_token_id": 0,
        "pad_token_id": PAD}),
    # fairseq names, offset positions, the embedding scaled by sqrt(64), exact GELU
    "biogpt": ("BioGptConfig", "BioGptForCausalLM", {
        "vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 96, "max_position_embeddings": 40, "bos_token_id": 0, "eos_token_id": 2,
        "pad_token_id": PAD}),
}
EXPORTED = ("gpt_bigcode", "gpt_neo_local", "biogpt")
"""The families ``export --format hf`` writes (GPT-Neo's layers differ: one block per stack)."""


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields = CASES[case]
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    model = perturb(getattr(transformers, model_class)(getattr(transformers, config_class)(**fields)).eval())
    model.save_pretrained(path)
    return model


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


DEFAULTS = {"gpt_bigcode": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM"),
            "gpt_neo": ("GPTNeoConfig", "GPTNeoForCausalLM"),
            "biogpt": ("BioGptConfig", "BioGptForCausalLM")}
"""Each family's default configuration: the shapes of gpt2 with one key/value head, gpt-neo-1.3B, biogpt."""


@pytest.mark.parametrize("family", DEFAULTS)
def test_default_config_counts_as_transformers(family, cli, tmp_path):
    config_class, model_class = DEFAULTS[family]
    config = getattr(transformers, config_class)()
    assert_config_imports_at_count(cli, tmp_path / "hf", config, model_class)


@pytest.mark.parametrize("case", EXPORTED)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), CASES[case][1], tokens, keep)


@pytest.mark.parametrize("case,change,needle", [
    ("gpt_bigcode", {"multi_query": False}, "multi_query: false is not supported"),
    ("gpt_bigcode", {"scale_attn_weights": False}, "scale_attn_weights: false is not supported"),
    ("gpt_bigcode", {"activation_function": "gelu_fast"}, "activation_function: \"gelu_fast\" is not supported"),
    ("gpt_bigcode", {"n_head": "four"}, "n_head must be an integer"),
    ("gpt_bigcode", {"moe_experts": 8}, "unknown field moe_experts"),
    ("gpt_neo", {"attention_types": [[["global", "sparse"], 1]]},
     "attention_types: [[[\"global\", \"sparse\"], 1]] is not supported"),
    ("gpt_neo", {"attention_types": [[["global"], 2]]}, "attention_types gives 2 layers; num_layers is 3"),
    ("gpt_neo", {"window_size": "4"}, "window_size must be an integer"),
    ("gpt_neo", {"tie_word_embeddings": False}, "tie_word_embeddings: false is not supported"),
    ("biogpt", {"scale_embedding": "yes"}, "scale_embedding must be true or false"),
    ("biogpt", {"hidden_act": "quick_gelu"}, "hidden_act: \"quick_gelu\" is not supported")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)


def test_gpt_neo_with_global_and_local_layers_is_not_exported(cli, tmp_path):
    """export --format hf writes one repeated layer; GPT-Neo's mixed stack is refused in one line."""
    save("gpt_neo", tmp_path / "original")
    imported = tmp_path / "imported"
    assert cli("import", tmp_path / "original", "-o", imported, "--quiet")[0] == 0
    code, _, err = cli("export", imported, "--weights", imported / "model.safetensors", "--format", "hf",
                       "-o", tmp_path / "exported")
    assert code == 2 and "decoder layers are not all alike" in err and len(err.strip().splitlines()) == 1, err
