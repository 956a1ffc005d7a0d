"""`tfspec import` of Qwen3-Next checkpoints against transformers (its PyTorch fallbacks for the
FLA and causal-conv1d kernels, absent on CPU): small random hybrids of gated DeltaNet and gated
attention layers over experts and dense MLPs (every weight perturbed, A_log, dt_bias and the
zero-centred norms included) written by ``save_pretrained``, imported through the CLI. Logits of
the PyTorch backend and of the exported ONNX graph equal transformers' at the real tokens of a
right-padded batch, 20 greedy tokens equal ``generate``'s through both backends' caches (the
DeltaNet layers' convolution window and state carried from step to step, in the ONNX step graph
as ``past.*.window`` and ``past.*.state``), one decoding step's logits equal the full sequence's,
the default configuration counts what transformers counts, import -> ``export --format hf`` ->
``from_pretrained`` gives the original logits back, and bad configurations are refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, assert_pytorch_import_matches, assert_step_after_prompt_matches,
                            right_padded, save_random)

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 0
SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 8, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
         "linear_key_head_dim": 8, "linear_value_head_dim": 6, "num_experts": 4, "num_experts_per_tok": 2,
         "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24, "rms_norm_eps": 1e-3,
         "pad_token_id": PAD, "bos_token_id": 2, "eos_token_id": 3}
"""Two DeltaNet value heads per key head, d_k != d_v; rms_norm_eps off its default."""
CASES = {
    # three DeltaNet layers then gated attention (the default interval of 4), a dense MLP at layer 2
    "hybrid": {"num_hidden_layers": 4, "mlp_only_layers": [2]},
    # every other layer attention, experts every second layer, one value head per key head, kernel 3, half rotated
    "interval": {"num_hidden_layers": 4, "layer_types": ["linear_attention", "full_attention"] * 2,
                 "decoder_sparse_step": 2, "linear_num_value_heads": 2, "linear_conv_kernel_dim": 3,
                 "rope_parameters": {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5}},
}


def save(case: str, path):
    return save_random("Qwen3NextForCausalLM", transformers.Qwen3NextConfig(**SHAPE | CASES[case]), path)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


def test_pytorch_logits_match_transformers(cli, tmp_path):
    """The fast check of the default run: PyTorch logits alone (the ONNX graph and greedy tokens: slow)."""
    ref = save("hybrid", tmp_path / "hf")
    assert_pytorch_import_matches(cli, tmp_path / "hf", ref, *right_padded(VOCAB, PAD))


@pytest.mark.slow
def test_a_step_after_the_prompt_gives_the_full_sequence_logits(cli, tmp_path):
    """The ONNX step graph fed a 9-token prompt, then its 10th token with the carried window and
    state, gives the full-sequence graph's logits of the 10th position."""
    save("hybrid", tmp_path / "hf")
    assert_step_after_prompt_matches(cli, tmp_path / "hf", VOCAB, PAD)


def test_published_style_fields_change_nothing(cli, tmp_path):
    """A config.json written as the published Qwen3-Next-80B's is: full_attention_interval in place of
    layer_types, rope_theta and partial_rotary_factor at the top level (the factor's default, 0.25,
    left out), and fields transformers' Qwen3-Next never reads (use_sliding_window, sliding_window,
    max_window_layers) or that do not compute (torch_dtype), and a multi-token prediction tensor
    (``mtp.*``, which transformers does not load): the import computes transformers' logits."""
    from safetensors.torch import load_file, save_file

    ref = save("hybrid", tmp_path / "hf")
    weights = tmp_path / "hf" / "model.safetensors"
    save_file(load_file(weights) | {"mtp.fc.weight": torch.ones(32, 64)}, weights, metadata={"format": "pt"})
    path = tmp_path / "hf" / "config.json"
    config = json.loads(path.read_text())
    theta = config.pop("rope_parameters")["rope_theta"]
    del config["layer_types"]
    path.write_text(json.dumps(config | {"full_attention_interval": 4, "rope_theta": theta, "use_sliding_window":
                                         False, "sliding_window": 4096, "max_window_layers": 28,
                                         "torch_dtype": "float32"}))
    assert_pytorch_import_matches(cli, tmp_path / "hf", ref, *right_padded(VOCAB, PAD))


def test_default_config_counts_as_transformers(cli, tmp_path):
    """Qwen3NextConfig() (Qwen3-Next-80B-A3B's shape): tfspec report gives transformers' count."""
    assert_config_imports_at_count(cli, tmp_path / "hf", transformers.Qwen3NextConfig(), "Qwen3NextForCausalLM")


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), "Qwen3NextForCausalLM",
                         tokens, keep)


@pytest.mark.parametrize("change,needle", [
    ({"layer_types": ["linear_attention", "sliding_attention"] * 2}, "layer_types: [\"linear_attention\""),
    ({"attention_bias": True}, "attention_bias: true is not supported"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}, "rope type \"yarn\""),
    ({"full_attention_interval": 0, "layer_types": None}, "full_attention_interval must be a positive integer")])
def test_unsupported_or_malformed_configs_are_refused_by_name(change, needle, cli, tmp_path):
    config = json.loads(transformers.Qwen3NextConfig(**SHAPE | CASES["hybrid"]).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)


def test_gated_deltanet_has_table1s_recurrent_row():
    """Each gated DeltaNet step reads the state the previous one wrote: Table 1's recurrent row, O(n)
    sequential operations and O(n) maximum path length (paper, Table 1), measured on the IR, and
    its work O(n d^2) with h d_v = d, like a recurrent layer's."""
    from tfspec.analysis.complexity import NS, layer_facts
    from tfspec.layers.gated_deltanet import GatedDeltaNet

    facts = layer_facts(GatedDeltaNet(heads=4, key_heads=2, d_k=8, d_v=8))
    assert (facts.sequential_ops, facts.max_path_length) == ("O(n)", "O(n)")
    assert "n·d²" in facts.complexity
    assert list(facts.sequential_measured) == list(NS)
