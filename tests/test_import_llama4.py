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
                            assert_hf_round_trip, assert_pytorch_import_matches, right_padded, save_random,
                            transformers_count)
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


SCOUT_TEXT = {
    "attention_bias": False, "attention_chunk_size": 8192, "attention_dropout": 0.0, "attn_scale": 0.1,
    "attn_temperature_tuning": 4, "bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008],
    "floor_scale": 8192, "for_llm_compressor": False, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "initializer_range": 0.02, "interleave_moe_layer_step": 1, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "max_position_embeddings": 262144, "model_type": "llama4_text",
    "moe_layers": list(range(48)), "no_rope_layers": [1, 1, 1, 0] * 12, "num_attention_heads": 40,
    "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
    "output_router_logits": False, "pad_token_id": 200018, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0, "torch_dtype": "bfloat16",
    "use_cache": True, "use_qk_norm": True, "vocab_size": 202048}
"""The text_config of meta-llama/Llama-4-Scout-17B-16E's config.json as published (transformers 4.51)."""
SCOUT_VISION = {
    "attention_dropout": 0.0, "hidden_act": "gelu", "hidden_size": 1408, "image_size": 336, "initializer_range": 0.02,
    "intermediate_size": 5632, "model_type": "llama4_vision_model", "multi_modal_projector_bias": False,
    "norm_eps": 1e-05, "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 34, "patch_size": 14,
    "pixel_shuffle_ratio": 0.5, "projector_dropout": 0.0, "projector_input_dim": 4096, "projector_output_dim": 4096,
    "rope_theta": 10000, "vision_feature_layer": -1, "vision_feature_select_strategy": "default",
    "vision_output_dim": 4096}
TINY_VISION = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
               "image_size": 28, "patch_size": 14, "projector_input_dim": 32, "projector_output_dim": 32,
               "vision_output_dim": 32}


def published(text: dict, vision: dict) -> dict:
    """A config.json as Meta published Llama 4 (Llama4ForConditionalGeneration, text and vision nested)."""
    return {"architectures": ["Llama4ForConditionalGeneration"], "boi_token_index": 200080,
            "eoi_token_index": 200081, "image_token_index": 200092, "model_type": "llama4", "text_config": text,
            "tie_word_embeddings": False, "transformers_version": "4.51.0", "vision_config": vision}


def text_config(text: dict):
    """``text`` as transformers 5 builds it: its Llama4TextConfig refuses the published integer
    attn_temperature_tuning (4), which its modeling code reads by truth (``if self.attn_temperature_tuning``),
    and never reads for_llm_compressor."""
    fields = {k: v for k, v in text.items() if k != "for_llm_compressor"}
    return transformers.Llama4TextConfig(**fields | {"attn_temperature_tuning": bool(text["attn_temperature_tuning"])})


def test_published_multimodal_config_counts_the_text_model(cli, tmp_path):
    """Llama-4-Scout's config.json as published imports as its text model, 107.8B parameters:
    Llama4ForCausalLM's count built from its text_config; one note says the vision tower is left out."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(published(SCOUT_TEXT, SCOUT_VISION)))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 0, err
    assert err.count("vision tower") == 1 and err.startswith("note: left out the vision tower"), err
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0 and json.loads(out)["params"]["total"] == transformers_count(text_config(SCOUT_TEXT),
                                                                                  "Llama4ForCausalLM")


def save_multimodal(path):
    """A small Llama4ForConditionalGeneration (Scout's layer settings on SHAPE, a one-layer vision tower)
    written by save_pretrained, its config.json's text_config then written as Scout's is (integer
    attn_temperature_tuning, for_llm_compressor, rope_scaling); returns Llama4ForCausalLM built from that
    text_config holding the language model's weights."""
    scout = {k: SCOUT_TEXT[k] for k in ("attn_temperature_tuning", "for_llm_compressor", "interleave_moe_layer_step",
                                        "rope_scaling", "rope_theta", "use_qk_norm")}
    text = SHAPE | scout | {"moe_layers": [0, 1, 2, 3], "no_rope_layers": [1, 1, 1, 0],
                            "rope_scaling": scout["rope_scaling"] | {"original_max_position_embeddings": 8}}
    config = transformers.Llama4Config(text_config=text_config(text), vision_config=TINY_VISION)
    model = save_random("Llama4ForConditionalGeneration", config, path)
    written = json.loads((path / "config.json").read_text())
    written["text_config"] = {k: v for k, v in written["text_config"].items() if k != "rope_parameters"} | text
    (path / "config.json").write_text(json.dumps(written))
    ref = transformers.Llama4ForCausalLM(text_config(text)).eval()
    ref.load_state_dict(model.language_model.state_dict())
    return ref


def test_multimodal_checkpoint_imports_its_language_model(cli, tmp_path):
    """language_model.* imported, the vision tower and projector left out in one note, logits those of
    Llama4ForCausalLM built from the text_config; export --format hf writes that text model back."""
    ref = save_multimodal(tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "noted")
    assert code == 0 and err.count("vision tower") == 1, err
    assert "left out 26 tensors (multi_modal_projector.linear_1.weight, ...)" in err, err
    tokens, keep = right_padded(VOCAB, PAD)
    assert_pytorch_import_matches(cli, tmp_path / "hf", ref, tokens, keep)
    assert_hf_round_trip(cli, tmp_path / "hf", ref, "Llama4ForCausalLM", tokens, keep)


@pytest.mark.parametrize("change,needle", [
    ({"text_config": [1]}, "text_config must be an object"),
    ({"text_config": {"model_type": "llama"}}, "text_config.model_type: \"llama\" is not supported"),
    ({"text_config": {"use_qk_norm": "yes"}}, "(text_config): use_qk_norm must be true or false"),
    ({"text_config": {"mlp_bias": True}}, "(text_config): unknown field mlp_bias"),
    ({"tie_word_embeddings": True}, "tie_word_embeddings: true is not supported")])
def test_bad_multimodal_configs_are_refused_by_name(change, needle, cli, tmp_path):
    assert_config_refused(cli, tmp_path, published(SCOUT_TEXT, SCOUT_VISION) | change, needle)
