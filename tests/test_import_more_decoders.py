"""`tfspec import` of Granite, Cohere, OLMo and GPT-J checkpoints against transformers: small
random models (every weight perturbed) written by ``save_pretrained`` and imported through the
CLI. Logits of the PyTorch backend and of the exported ONNX graph equal transformers' at the real
tokens of a right-padded batch, 20 greedy tokens equal ``generate``'s, the default configurations
count what transformers counts, import -> ``export --format hf`` -> ``from_pretrained`` gives the
original logits back, and bad configurations are one error line naming the field."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_decoder_import_matches, assert_hf_round_trip,
                            assert_pytorch_import_matches, right_padded, save_random)
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 1  # no model below generates id 1 in its 20 greedy tokens
IDS = {"vocab_size": VOCAB, "bos_token_id": 2, "eos_token_id": 3, "pad_token_id": PAD}
LLAMA_LIKE = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 40}
SHAPE = {"granite": LLAMA_LIKE | {"rms_norm_eps": 1e-3}, "cohere": LLAMA_LIKE | {"layer_norm_eps": 1e-3},
         "olmo": LLAMA_LIKE,
         "gptj": {"n_embd": 64, "n_inner": 96, "n_layer": 2, "n_head": 4, "n_positions": 40,
                  "layer_norm_epsilon": 1e-3}}
"""Each family's tiny shape under its own names; epsilons off their defaults (OLMo's is fixed)."""
CLASSES = {"granite": ("GraniteConfig", "GraniteForCausalLM"), "cohere": ("CohereConfig", "CohereForCausalLM"),
           "olmo": ("OlmoConfig", "OlmoForCausalLM"), "gptj": ("GPTJConfig", "GPTJForCausalLM")}
CASES = {
    # granite-3.0's four multipliers (other values), grouped-query attention, untied output
    "granite": {"embedding_multiplier": 3.0, "attention_multiplier": 0.3, "residual_multiplier": 0.5,
                "logits_scaling": 4.0},
    # every projection biased, the output tied
    "granite-biased-tied": {"embedding_multiplier": 2.0, "residual_multiplier": 0.7, "attention_bias": True,
                            "mlp_bias": True, "tie_word_embeddings": True},
    # command-r: one shared LayerNorm without bias, interleaved rotary, logit_scale, tied output
    "cohere": {"logit_scale": 0.5},
    # attention biased, the output untied
    "cohere-biased-untied": {"attention_bias": True, "tie_word_embeddings": False, "logit_scale": 2.0},
    # OLMo-7B: LayerNorms without parameters
    "olmo": {},
    "olmo-biased": {"attention_bias": True, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}},
    # gpt-j-6b: interleaved rotary on the first quarter of each head's 16 features, biased MLP and lm_head
    "gptj": {"rotary_dim": 4},
    # every feature rotated, the output tied (its bias still its own)
    "gptj-tied": {"rotary_dim": 16, "tie_word_embeddings": True},
}
"""case -> config fields beyond the family's SHAPE."""


def family(case: str) -> str:
    return case.split("-")[0]


def config(case: str):
    return getattr(transformers, CLASSES[family(case)][0])(**IDS | SHAPE[family(case)] | CASES[case])


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    return save_random(CLASSES[family(case)][1], config(case), path)


FULL = ("granite", "cohere", "olmo", "gptj")
"""Cases checked through both backends and decoding; the others' layouts in PyTorch (the round
trip below checks their export's parity)."""


@pytest.mark.parametrize("case", FULL)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


@pytest.mark.parametrize("case", [case for case in CASES if case not in FULL])
def test_other_layouts_match_transformers_in_pytorch(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_pytorch_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep)


@pytest.mark.parametrize("case", ["granite", "cohere-biased-untied", "gptj"])
@torch.no_grad()
def test_base_model_hidden_states_match_transformers(case, cli, tmp_path):
    """GraniteModel, CohereModel and GPTJModel (no lm_head): the spec's output is tied to the token
    embedding without a bias or scale, so its logits are the last hidden states seen through that projection."""
    base = save(case, tmp_path / "causal").base_model
    base.save_pretrained(tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    assert sum(p.numel() for p in model.parameters()) == base.num_parameters()
    tokens, keep = right_padded(VOCAB, PAD)
    want = base(input_ids=tokens, attention_mask=keep.long()).last_hidden_state @ base.get_input_embeddings().weight.T
    torch.testing.assert_close(model(tokens)[keep], want[keep], atol=1e-4, rtol=0)


DEFAULTS = {
    "granite": ("GraniteConfig", "GraniteForCausalLM", {}),  # Llama 2 7B's shape, multipliers 1
    "granite-3.0-2b": ("GraniteConfig", "GraniteForCausalLM", {
        "vocab_size": 49155, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 40,
        "num_key_value_heads": 8, "tie_word_embeddings": True, "embedding_multiplier": 12.0,
        "attention_multiplier": 0.015625, "residual_multiplier": 0.22, "logits_scaling": 8.0}),
    "cohere": ("CohereConfig", "CohereForCausalLM", {}),  # c4ai-command-r-v01's shape
    "olmo": ("OlmoConfig", "OlmoForCausalLM", {}),  # OLMo-7B's shape
    "gptj": ("GPTJConfig", "GPTJForCausalLM", {}),  # gpt-j-6b's shape
}
"""Each family's default configuration and a published shape beside it."""


@pytest.mark.parametrize("name", DEFAULTS)
def test_default_config_counts_as_transformers(name, cli, tmp_path):
    config_class, model_class, changes = DEFAULTS[name]
    assert_config_imports_at_count(cli, tmp_path / "hf", getattr(transformers, config_class)(**changes), model_class)


@pytest.mark.parametrize("case", CASES)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), CLASSES[family(case)][1],
                         tokens, keep)


@pytest.mark.parametrize("case,change,needle", [
    ("granite", {"logits_scaling": "big"}, "logits_scaling must be a number"),
    ("granite", {"residual_multiplier": 0}, "residual_multiplier: 0 is not supported"),
    ("granite", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4, "factor": 2.0}},
     "rope type \"proportional\" is not supported"),
    ("granite", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("cohere", {"use_qk_norm": "yes"}, "use_qk_norm must be true or false"),
    ("cohere", {"mlp_bias": True}, "unknown field mlp_bias"),
    ("cohere", {"logit_scale": None}, "logit_scale must be a number"),
    ("cohere", {"layer_norm_eps": "tiny"}, "layer_norm_eps must be a number"),
    ("olmo", {"clip_qkv": 0}, "clip_qkv must be positive"),
    ("olmo", {"rms_norm_eps": 1e-6}, "unknown field rms_norm_eps"),
    ("olmo", {"max_position_embeddings": 40.5}, "max_position_embeddings must be an integer"),
    ("gptj", {"rotary_dim": None}, "rotary_dim must be an integer"),
    ("gptj", {"rotary_dim": 7}, "rotary_dim: 7 is not supported"),
    ("gptj", {"activation_function": "gelu_fast"}, "activation_function: \"gelu_fast\" is not supported"),
    ("gptj", {"tie_word_embeddings": 1}, "tie_word_embeddings must be true or false"),
    ("gptj", {"n_head": 5}, "heads (5)")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    written = json.loads(config(case).to_json_string()) | change
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(written))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "ours").exists()
