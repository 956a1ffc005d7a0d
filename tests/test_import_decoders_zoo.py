"""`tfspec import` of more published decoder families against transformers: CodeGen, GLM, GLM-4,
Persimmon, Helium, MiniCPM3, and the options Cohere (use_qk_norm), StableLM (qk_layernorm,
use_parallel_residual) and OLMo (clip_qkv) brought. Small random models (every weight perturbed)
written by ``save_pretrained`` are imported through the CLI; logits of the PyTorch backend and of
the exported ONNX graph equal transformers' at the real tokens of a right-padded batch, 20 greedy
tokens equal ``generate``'s, each default configuration (XConfig()) counts what transformers
counts, import -> ``export --format hf`` -> ``from_pretrained`` gives the original logits back,
and bad configurations are refused in one line naming the field."""

from __future__ import annotations

import json

import pytest

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, right_padded, save_random)

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 4
IDS = {"vocab_size": VOCAB, "pad_token_id": PAD, "bos_token_id": 2, "eos_token_id": 3}
LLAMA_SHAPE = IDS | {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "max_position_embeddings": 40}
"""Llama-like families' fields: grouped-query attention, epsilons set per case off their defaults."""
MHA_SHAPE = {k: v for k, v in LLAMA_SHAPE.items() if k != "num_key_value_heads"}
GPT_SHAPE = IDS | {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 40, "layer_norm_epsilon": 1e-3}
EPS = {"rms_norm_eps": 1e-3}
LN_EPS = {"layer_norm_eps": 1e-3}
MLA = {"num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 24, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8}
CASES = {
    # 16-wide heads rotating their first 8 features in interleaved pairs; qkv_proj in 4 model-parallel blocks
    "codegen": ("CodeGenConfig", "CodeGenForCausalLM", GPT_SHAPE | {"rotary_dim": 8, "n_inner": 80}),
    # q, k, v biased, half of each 16-wide head rotated in interleaved pairs, gate_up_proj fused
    "glm": ("GlmConfig", "GlmForCausalLM", LLAMA_SHAPE | EPS | {"head_dim": 16}),
    "glm4": ("Glm4Config", "Glm4ForCausalLM", LLAMA_SHAPE | EPS | {"head_dim": 16, "tie_word_embeddings": True,
                                                                   "pad_token_id": 5}),
    "helium": ("HeliumConfig", "HeliumForCausalLM", LLAMA_SHAPE | EPS | {"head_dim": 16, "attention_bias": True,
                                                                         "pad_token_id": 5}),
    # squared ReLU, query_key_value head by head, biased LayerNorms on queries and keys (gain and shift shared)
    "persimmon": ("PersimmonConfig", "PersimmonForCausalLM", MHA_SHAPE | LN_EPS),
    # latent attention (q through its own latent), every multiplier off 1, v_head_dim from hidden / heads
    "minicpm3": ("MiniCPM3Config", "MiniCPM3ForCausalLM", LLAMA_SHAPE | EPS | MLA | {
        "scale_emb": 3.0, "scale_depth": 1.8, "dim_model_base": 16}),
    # a LayerNorm gain per head on queries and keys, rotated in interleaved pairs
    "cohere-qk-norm": ("CohereConfig", "CohereForCausalLM", LLAMA_SHAPE | LN_EPS | {"use_qk_norm": True}),
    # stablelm-2-12b's layer: parallel attention and MLP on one norm, a LayerNorm per head (one module each)
    "stablelm-2-12b": ("StableLmConfig", "StableLmForCausalLM", LLAMA_SHAPE | LN_EPS | {
        "qk_layernorm": True, "use_parallel_residual": True}),
    "olmo-clip-qkv": ("OlmoConfig", "OlmoForCausalLM", LLAMA_SHAPE | {"clip_qkv": 1.0}),
}
"""case -> (config class, model class, config fields); a case pads with an id its 20 greedy tokens avoid."""


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields = CASES[case]
    return save_random(model_class, getattr(transformers, config_class)(**fields), path)


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][1].endswith("ForCausalLM")])
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    pad = CASES[case][2]["pad_token_id"]
    tokens, keep = right_padded(VOCAB, pad)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, pad)


DEFAULTS = {
    "codegen": ("CodeGenConfig", "CodeGenForCausalLM", {}), "glm": ("GlmConfig", "GlmForCausalLM", {}),
    "glm4": ("Glm4Config", "Glm4ForCausalLM", {}), "helium": ("HeliumConfig", "HeliumForCausalLM", {}),
    "persimmon": ("PersimmonConfig", "PersimmonForCausalLM", {}),
    "minicpm3": ("MiniCPM3Config", "MiniCPM3ForCausalLM", {}),
    # its ids (50256, GPT-2's) lie outside its 49152-token vocabulary: read as <|endoftext|>, 0
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", {}),
    "command-r-plus": ("CohereConfig", "CohereForCausalLM", {"use_qk_norm": True, "num_key_value_heads": 8}),
    "stablelm-2-12b": ("StableLmConfig", "StableLmForCausalLM", {"qk_layernorm": True, "use_parallel_residual": True,
                                                                 "num_key_value_heads": 8}),
    "olmo-0424": ("OlmoConfig", "OlmoForCausalLM", {"clip_qkv": 8.0}),
}
"""Each family's default configuration (XConfig(): codegen-6B's, glm-4-9b's, helium-1-preview-2b's,
persimmon-8b's, MiniCPM3-4B's, starcoder2-3b's shapes), and the options new here at published shapes."""


@pytest.mark.parametrize("case", DEFAULTS)
def test_default_config_counts_as_transformers(case, cli, tmp_path):
    config_class, model_class, fields = DEFAULTS[case]
    assert_config_imports_at_count(cli, tmp_path / "hf", getattr(transformers, config_class)(**fields), model_class)


def test_starcoder2_ids_outside_the_vocabulary_are_the_tokenizers(cli, tmp_path):
    """Starcoder2Config()'s 50256 names no token of its vocabulary: bos and eos are 0, StarCoder's
    <|endoftext|>, which a shipped vocab.json says, and which every published configuration names."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(transformers.Starcoder2Config(vocab_size=VOCAB).to_json_string())
    (tmp_path / "hf" / "vocab.json").write_text(json.dumps({"<|endoftext|>": 7, "a": 8}))
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    from tfspec.spec import load_spec
    vocab = load_spec(tmp_path / "ours").vocab
    assert (vocab.bos_id, vocab.eos_id) == (7, 7)


EXPORTED = {"codegen": "CodeGenForCausalLM", "glm": "GlmForCausalLM", "glm4": "Glm4ForCausalLM",
            "helium": "HeliumForCausalLM", "persimmon": "PersimmonForCausalLM", "minicpm3": "MiniCPM3ForCausalLM",
            "cohere-qk-norm": "CohereForCausalLM", "stablelm-2-12b": "StableLmForCausalLM",
            "olmo-clip-qkv": "OlmoForCausalLM"}
"""What ``export --format hf`` writes: the family the spec was imported from, though CodeGen's is
GPT-J's computation (only the stored qkv order differs) and Helium's, biased q, k and v, Qwen2's
(its interleaved rotary is a row order that import undoes)."""


@pytest.mark.parametrize("case", EXPORTED)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    pad = CASES[case][2]["pad_token_id"]
    tokens, keep = right_padded(VOCAB, pad)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), EXPORTED[case], tokens, keep)


@pytest.mark.parametrize("case,change,needle", [
    ("codegen", {"n_embd": 66, "n_head": 3, "rotary_dim": 8}, "n_embd (66) must be a multiple of 4"),
    ("codegen", {"rotary_dim": 7}, "rotary_dim: 7 is not supported"),
    ("glm", {"mlp_bias": True}, "unknown field mlp_bias"),
    ("glm", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}},
     "rope type \"yarn\" is not supported"),
    ("glm4", {"attention_bias": "yes"}, "attention_bias must be true or false"),
    ("helium", {"head_dim": 8}, "num_attention_heads (4) x head_dim (8) must equal hidden_size (64)"),
    ("persimmon", {"hidden_act": "relu6"}, "hidden_act: \"relu6\" is not supported"),
    ("persimmon", {"qk_layernorm": "yes"}, "qk_layernorm must be true or false"),
    ("minicpm3", {"num_key_value_heads": 2}, "num_key_value_heads (2) must equal num_attention_heads (4)"),
    ("minicpm3", {"attention_bias": True}, "attention_bias: true is not supported"),
    ("minicpm3", {"scale_emb": 0}, "scale_emb must be positive"),
    ("minicpm3", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}},
     "rope type \"longrope\" is not supported"),
    ("cohere-qk-norm", {"use_qk_norm": 1}, "use_qk_norm must be true or false"),
    ("stablelm-2-12b", {"use_parallel_residual": "yes"}, "use_parallel_residual must be true or false"),
    ("olmo-clip-qkv", {"clip_qkv": -1.0}, "clip_qkv must be positive"),
    ("olmo-clip-qkv", {"clip_qkv": "8"}, "clip_qkv must be a number")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)
