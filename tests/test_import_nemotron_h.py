"""`tfspec import` of Nemotron-H checkpoints against transformers (its PyTorch "slow path", as
mamba-ssm's kernels are absent on CPU): small random hybrids of Mamba-2, attention, MLP and
mixture-of-experts layers (every weight perturbed, the SSM's A_log, D and dt_bias included)
written by ``save_pretrained``, imported through the CLI. Logits of the PyTorch backend and of the
exported ONNX graph equal transformers' at the real tokens of a right-padded batch, 20 greedy
tokens equal ``generate``'s through both backends' caches (the Mamba layers' convolution window
and state carried from step to step, in the ONNX step graph as ``past.*.window`` and
``past.*.state``), one decoding step's logits equal the full sequence's, the default
configuration counts what transformers counts, import -> ``export --format hf`` ->
``from_pretrained`` gives the original logits back, and bad configurations are refused by name."""

from __future__ import annotations

import json

import pytest

from hf_checkpoints import (assert_config_refused, assert_decoder_import_matches, assert_hf_round_trip,
                            assert_pytorch_import_matches, assert_step_after_prompt_matches, right_padded,
                            save_random, transformers_count)

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 0  # no model below generates id 0 in its 20 greedy tokens
SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 8, "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 16,
         "n_groups": 2, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
         "moe_shared_expert_intermediate_size": 24, "layer_norm_epsilon": 1e-3, "pad_token_id": PAD, "bos_token_id": 2,
         "eos_token_id": 3}
"""Two groups of two Mamba heads each; layer_norm_epsilon off its default."""
CASES = {
    "hybrid": {"layers_block_type": ["linear_attention", "full_attention", "mlp", "linear_attention", "moe"]},
    # the older pattern string, one group, a biased Mamba projection without a convolution bias
    "pattern": {"hybrid_override_pattern": "MM*-", "n_groups": 1, "use_bias": True, "use_conv_bias": False,
                "conv_kernel": 3},
}


def save(case: str, path):
    return save_random("NemotronHForCausalLM", transformers.NemotronHConfig(**SHAPE | CASES[case]), path)


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


def test_a_step_after_the_prompt_gives_the_full_sequence_logits(cli, tmp_path):
    """The ONNX step graph fed a 9-token prompt, then its 10th token with the carried window and
    state, gives the full-sequence graph's logits of the 10th position."""
    save("hybrid", tmp_path / "hf")
    assert_step_after_prompt_matches(cli, tmp_path / "hf", VOCAB, PAD)


def test_fields_transformers_ignores_change_nothing(cli, tmp_path):
    """expand and time_step_limit, which transformers' Nemotron-H never reads (its inner width is
    heads x head_dim; the step is floored at time_step_min), set in a checkpoint's config: the import
    still computes transformers' logits."""
    save("hybrid", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text()) | {"expand": 7, "time_step_limit": [0.5, 0.6]}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    ref = transformers.NemotronHForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert_pytorch_import_matches(cli, tmp_path / "hf", ref, *right_padded(VOCAB, PAD))


def test_default_config_counts_as_transformers(cli, tmp_path):
    """NemotronHConfig() (M, E, *, -): transformers' count plus the experts' score bias, a buffer there."""
    config = transformers.NemotronHConfig()
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    params = json.loads(out)["params"]
    assert code == 0 and params["total"] == transformers_count(config, "NemotronHForCausalLM") + 8


@pytest.mark.parametrize("case", CASES)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), "NemotronHForCausalLM",
                         tokens, keep)


@pytest.mark.parametrize("change,needle", [
    ({"layers_block_type": ["linear_attention", "sliding"]}, "layers_block_type: [\"linear_attention\", \"sliding\"]"),
    ({"moe_latent_size": 8}, "moe_latent_size: 8 is not supported"),
    ({"mamba_hidden_act": "gelu"}, "mamba_hidden_act: \"gelu\" is not supported"),
    ({"use_conv_bias": "yes"}, "use_conv_bias must be true or false")])
def test_unsupported_or_malformed_configs_are_refused_by_name(change, needle, cli, tmp_path):
    config = json.loads(transformers.NemotronHConfig(**SHAPE | CASES["hybrid"]).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)



def test_mamba2_has_table1s_recurrent_row():
    """Each Mamba-2 step reads the state the previous one wrote: Table 1's recurrent row, O(n)
    sequential operations and O(n) maximum path length (paper, Table 1), measured on the IR."""
    from tfspec.analysis.complexity import NS, layer_facts
    from tfspec.layers.mamba2 import Mamba2

    facts = layer_facts(Mamba2(heads=4, head_dim=8, state=16))
    assert (facts.sequential_ops, facts.max_path_length) == ("O(n)", "O(n)")
    assert list(facts.sequential_measured) == list(NS)
