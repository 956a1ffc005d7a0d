"""`tfspec import` of Gemma and Phi-3 checkpoints against transformers: small random models
(every weight perturbed, Gemma's RMSNorm gains included) written by ``save_pretrained``, imported
through the CLI; logits of the PyTorch backend and of the exported ONNX graph equal transformers'
at the real tokens of a right-padded batch, 20 greedy tokens equal ``generate``'s, the default
configurations count what transformers counts, and import -> ``export --format hf`` ->
``from_pretrained`` gives the original logits back."""

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

VOCAB, PAD = 120, 0  # Gemma pads with id 0
SHAPE = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 40, "rms_norm_eps": 1e-3, "pad_token_id": PAD,
         "bos_token_id": 2, "eos_token_id": 3}
"""rms_norm_eps off its defaults, so that an importer ignoring it computes something else."""
CASES = {
    # one key/value head (gemma-2b), heads 32 wide under a 64-wide model (4 x 32: wider, as gemma-7b's),
    # the tied output; config.json as google/gemma-2b writes it ("gelu", which transformers reads as tanh GELU)
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"num_key_value_heads": 1, "head_dim": 32},
              {"hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh"}),
    # a 6-token window, grouped-query attention, the untied output
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"num_key_value_heads": 2, "sliding_window": 6}, {}),
    # rotary on half of each head's 16 features
    "phi3-partial": ("Phi3Config", "Phi3ForCausalLM", {"num_key_value_heads": 2, "partial_rotary_factor": 0.5}, {}),
}
"""case -> (config class, model class, config fields, fields rewritten in the saved config.json)."""


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields, published = CASES[case]
    model = save_random(model_class, getattr(transformers, config_class)(**SHAPE | fields), path)
    config = json.loads((path / "config.json").read_text()) | published
    (path / "config.json").write_text(json.dumps(config))
    return model


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


@pytest.mark.parametrize("case", ["gemma", "phi3"])
@torch.no_grad()
def test_base_model_hidden_states_match_transformers(case, cli, tmp_path):
    """GemmaModel and Phi3Model (no lm_head): the spec's output is tied to the token embedding,
    so its logits are transformers' last hidden states seen through that projection."""
    base = save(case, tmp_path / "causal").model
    base.save_pretrained(tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    assert sum(p.numel() for p in model.parameters()) == base.num_parameters()
    tokens, keep = right_padded(VOCAB, PAD)
    want = base(input_ids=tokens, attention_mask=keep.long()).last_hidden_state @ base.embed_tokens.weight.T
    torch.testing.assert_close(model(tokens)[keep], want[keep], atol=1e-4, rtol=0)


DEFAULTS = {
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {}),  # gemma-7b's shape
    "gemma-2b": ("GemmaConfig", "GemmaForCausalLM", {
        "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18, "num_attention_heads": 8,
        "num_key_value_heads": 1, "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh"}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {  # Phi-3-mini-4k-instruct's shape, with its published extras
        "sliding_window": 2047, "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config"}}),
    "phi-4": ("Phi3Config", "Phi3ForCausalLM", {
        "vocab_size": 100352, "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40,
        "num_attention_heads": 40, "num_key_value_heads": 10, "max_position_embeddings": 16384,
        "original_max_position_embeddings": 16384, "rope_parameters": {"rope_type": "default", "rope_theta": 250000.0},
        "bos_token_id": 100257, "eos_token_id": 100265, "pad_token_id": 100349, "attention_bias": False}),
}
"""Each family's default configuration (GemmaConfig(), Phi3Config()) and published shapes beside it."""


@pytest.mark.parametrize("family", DEFAULTS)
def test_default_config_counts_as_transformers(family, cli, tmp_path):
    config_class, model_class, changes = DEFAULTS[family]
    config = getattr(transformers, config_class)(**changes)
    assert_config_imports_at_count(cli, tmp_path / "hf", config, model_class)


EXPORTED = {"gemma": "GemmaForCausalLM", "phi3": "Phi3ForCausalLM", "phi3-partial": "Phi3ForCausalLM"}
"""The class ``export --format hf`` writes: the family the spec was imported from (Phi-3 rotating
every feature is also Mistral's computation, with the projections unfused)."""


@pytest.mark.parametrize("case", CASES)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), EXPORTED[case], tokens, keep)


LONGROPE = {"short_factor": [1.0] * 8, "long_factor": [2.0] * 8, "original_max_position_embeddings": 20}


@pytest.mark.parametrize("case,change,needle", [
    ("gemma", {"use_bidirectional_attention": True}, "use_bidirectional_attention: true is not supported"),
    ("gemma", {"hidden_activation": "gelu"}, "hidden_activation: \"gelu\" is not supported"),
    ("gemma", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("gemma", {"mlp_bias": True}, "unknown field mlp_bias"),
    ("gemma", {"head_dim": "32"}, "head_dim must be an integer"),
    # rope_scaling (Phi-3-mini-128k's "su"), when set, replaces rope_parameters whole, as transformers reads it
    ("phi3", {"rope_scaling": {"type": "su", **LONGROPE}}, "rope type \"su\" is not supported"),
    ("phi3", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, **LONGROPE, "long_factor": [2.0] * 7}},
     "long_factor has 7 values and short_factor 8"),
    ("phi3", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}},
     "rope type \"llama3\" is not supported"),
    ("phi3", {"partial_rotary_factor": 0.2, "rope_parameters": None}, "fraction) = int(16 x 0.2) = 3 must be even"),
    ("phi3", {"sliding_window": "6"}, "sliding_window must be an integer"),
    ("phi3", {"resid_pdrop": "none"}, "resid_pdrop must be a number"),
    ("phi3", {"qk_layernorm": True}, "unknown field qk_layernorm")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _, fields, _ = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**SHAPE | fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)


@pytest.mark.parametrize("rotary", [{}, {"partial_rotary_factor": 0.5},
                                    {"partial_rotary_factor": 0.5, "rope_parameters": {
                                        "rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.75}}])
def test_phi3_rotates_the_share_transformers_reads(rotary, cli, tmp_path):
    """Phi-3's rotated share as transformers 4 files write it (top level, all features when
    absent: Phi-4-mini's 0.75) and as transformers 5 does (inside rope_parameters, which wins)."""
    config = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], **SHAPE, **rotary}
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    theirs = transformers.Phi3Config.from_pretrained(tmp_path / "hf").rope_parameters["partial_rotary_factor"]
    assert load_spec(tmp_path / "ours").positional.fraction == theirs
