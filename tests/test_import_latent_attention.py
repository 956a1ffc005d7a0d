"""`tfspec import` of DeepSeek-V2 and DeepSeek-V3 checkpoints (multi-head latent attention and
DeepSeek's mixtures of experts; V3's router: sigmoid scores, the e_score_correction_bias,
group-limited choice, routed_scaling_factor) against transformers: small random models (every
weight perturbed, the routers and V3's score bias included) written by ``save_pretrained``,
imported through the CLI; logits of the PyTorch backend and of the exported ONNX graph equal
transformers' at the real tokens of a right-padded batch, 20 greedy tokens equal ``generate``'s
through both backends' latent caches, the default configurations count what transformers counts
(total, V3's score bias on its own line, and, by hand, active per token), the KV-cache report
counts the latent, import -> ``export --format hf`` -> ``from_pretrained`` gives the original
logits back, and bad configurations are refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import (assert_config_refused, assert_decoder_import_matches, assert_hf_round_trip, perturb,
                            right_padded, transformers_count)

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 1
SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 40, "rms_norm_eps": 1e-3,
         "pad_token_id": PAD, "bos_token_id": 2, "eos_token_id": 3, "n_routed_experts": 4, "num_experts_per_tok": 2,
         "moe_intermediate_size": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
         "v_head_dim": 12, "rope_parameters": {"rope_type": "default", "rope_theta": 100.0}}
"""rms_norm_eps and rope_theta off their defaults, so that an importer ignoring them computes something else."""
CASES = {
    # DeepSeek-V2: queries through their own latent, layer 0 dense, one shared expert
    "q_lora": ("DeepseekV2", {"q_lora_rank": 24, "first_k_dense_replace": 1, "n_shared_experts": 1}),
    # DeepSeek-V2-Lite: queries by one projection, every layer sparse, two shared experts
    "lite": ("DeepseekV2", {"q_lora_rank": None, "first_k_dense_replace": 0, "n_shared_experts": 2}),
    # DeepSeek-V3's router: 3 of 8 experts from the 2 best of 4 groups, renormalised, scaled
    "v3": ("DeepseekV3", {"q_lora_rank": 24, "first_k_dense_replace": 1, "n_shared_experts": 1,
                          "n_routed_experts": 8, "num_experts_per_tok": 3, "n_group": 4, "topk_group": 2,
                          "norm_topk_prob": True, "routed_scaling_factor": 2.5}),
    # one group, the sigmoid scores as they are (not renormalised), another scale
    "v3_ungrouped": ("DeepseekV3", {"q_lora_rank": None, "first_k_dense_replace": 0, "n_shared_experts": 2,
                                    "n_group": 1, "topk_group": 1, "norm_topk_prob": False,
                                    "routed_scaling_factor": 1.5}),
}


def save(case: str, path):
    """The case's model, perturbed, V3's score bias drawn too (a buffer: ``perturb`` leaves it at 0)."""
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    model, changes = CASES[case]
    config = getattr(transformers, f"{model}Config")(**SHAPE | changes)
    model = perturb(getattr(transformers, f"{model}ForCausalLM")(config).eval())
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(0.0, 0.3)
    model.save_pretrained(path)
    return model


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


def hand_count(c) -> tuple[int, int]:
    """(total, active per token) of DeepseekV2ForCausalLM or DeepseekV3ForCausalLM at configuration
    ``c``, counted from its fields: every layer's latent attention and norms, then its dense MLP or
    its router (and V3's score bias), experts (all of them, or the num_experts_per_tok a token
    runs) and shared experts."""
    d, h, e, f = c.hidden_size, c.num_attention_heads, c.n_routed_experts, c.moe_intermediate_size
    q = d * h * c.qk_head_dim if c.q_lora_rank is None else (d + 1 + h * c.qk_head_dim) * c.q_lora_rank
    attention = q + d * (c.kv_lora_rank + c.qk_rope_head_dim) + c.kv_lora_rank + \
        c.kv_lora_rank * h * (c.qk_nope_head_dim + c.v_head_dim) + h * c.v_head_dim * d + 2 * d
    dense, sparse = c.first_k_dense_replace, c.num_hidden_layers - c.first_k_dense_replace
    router = e * d + (e if c.model_type == "deepseek_v3" else 0)
    base = 2 * c.vocab_size * d + d + c.num_hidden_layers * attention + dense * 3 * d * c.intermediate_size + \
        sparse * (router + 3 * d * f * c.n_shared_experts)
    return base + sparse * e * 3 * d * f, base + sparse * c.num_experts_per_tok * 3 * d * f


@pytest.mark.parametrize("model,changes", [
    ("DeepseekV2", {"num_experts_per_tok": 6}), ("DeepseekV2", {"num_experts_per_tok": 6, "q_lora_rank": None,
                                                                "first_k_dense_replace": 3}),
    ("DeepseekV3", {})])
def test_default_config_counts_as_transformers_and_by_hand(model, changes, cli, tmp_path):
    """DeepseekV2Config() (num_experts_per_tok, which it leaves unset, as DeepSeek-V2-Lite's 6),
    the same with Lite's queries and three dense layers, and DeepseekV3Config() (DeepSeek-V3's
    shape, 671B): the total is transformers' count on the meta device, plus V3's score biases
    (buffers there), which the report shows on their own line; active parameters per token and
    the cache per token are counted by hand."""
    config = getattr(transformers, f"{model}Config")(**changes)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, err = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0, err
    report, (total, active) = json.loads(out), hand_count(config)
    buffers = report["params"]["decoder"].get("router score bias", 0)
    assert buffers == (58 * 256 if model == "DeepseekV3" else 0)
    assert report["params"]["total"] - buffers == transformers_count(config, f"{model}ForCausalLM")
    assert report["params"]["total"] == total and report["params"]["active"] == active
    assert report["kv_cache"]["values_per_token"] == config.num_hidden_layers * (512 + 64)


@pytest.mark.parametrize("case", ["q_lora", "lite", "v3"])
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"),
                         f"{CASES[case][0]}ForCausalLM", tokens, keep)


@pytest.mark.parametrize("case,change,needle", [
    ("q_lora", {"topk_method": "group_limited_greedy"}, 'topk_method: "group_limited_greedy" is not supported'),
    ("q_lora", {"routed_scaling_factor": 16.0}, "routed_scaling_factor: 16.0 is not supported"),
    ("q_lora", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4, "factor": 40.0}},
     'rope type "proportional" is'),
    ("q_lora", {"num_key_value_heads": 2}, "num_key_value_heads (2) must equal num_attention_heads (4)"),
    ("q_lora", {"num_experts_per_tok": None}, "num_experts_per_tok is null"),
    ("q_lora", {"num_experts_per_tok": 5}, "num_experts_per_tok (5) must be between 1 and n_routed_experts (4)"),
    ("q_lora", {"kv_lora_rank": "16"}, "kv_lora_rank must be an integer"),
    ("q_lora", {"attention_bias": True}, "attention_bias: true is not supported"),
    ("q_lora", {"hidden_act": "gelu_fast"}, 'hidden_act: "gelu_fast" is not supported'),
    ("q_lora", {"mla_absorb": True}, "unknown field mla_absorb"),
    ("v3", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4, "factor": 40.0}},
     'rope type "proportional" is'),
    ("v3", {"rope_interleave": False}, "rope_interleave: false is not supported"),
    ("v3", {"scoring_func": "softmax"}, 'scoring_func: "softmax" is not supported'),
    ("v3", {"n_group": 3}, "n_group (3) must divide n_routed_experts (8)"),
    ("v3", {"topk_group": 5}, "topk_group (5) must be between 1 and n_group (4)"),
    ("v3", {"topk_group": 1}, "must hold num_experts_per_tok (3)"),
    ("v3", {"n_group": None}, "n_group must be an integer, got null"),
    ("v3", {"routed_scaling_factor": "2.5"}, "routed_scaling_factor must be a number"),
    ("v3", {"topk_method": "greedy"}, 'topk_method: "greedy" is not supported'),
    ("v3", {"mlp_bias": False}, "unknown field mlp_bias")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    model, changes = CASES[case]
    config = json.loads(getattr(transformers, f"{model}Config")(**SHAPE | changes).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)
