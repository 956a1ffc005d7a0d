"""`tfspec import` of Arcee and Nemotron checkpoints against transformers: small random models
(every weight perturbed) written by ``save_pretrained`` and imported through the CLI. Logits of
the PyTorch backend and of the exported ONNX graph equal transformers' at the real tokens of a
right-padded batch, 20 greedy tokens equal ``generate``'s, the default configurations count what
transformers counts, import -> ``export --format hf`` -> ``from_pretrained`` gives the original
logits back, and bad configurations are one error line naming the field.

Both families' MLP is ungated squared ReLU (up_proj, down_proj); Arcee keeps Llama's RMSNorms and
full rotary (AFM-4.5B's yarn below), Nemotron has LayerNorm1P (stored gain + 1) and partial rotary."""

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
SHAPE = {"arcee": LLAMA_LIKE | {"rms_norm_eps": 1e-3},
         "nemotron": LLAMA_LIKE | {"head_dim": 24, "norm_eps": 1e-3}}
"""Each family's tiny shape; epsilons off their defaults; Nemotron's heads wider than
hidden_size / heads (16), as Minitron-8B's 128 over 4096 / 48."""
CLASSES = {"arcee": ("ArceeConfig", "ArceeForCausalLM"), "nemotron": ("NemotronConfig", "NemotronForCausalLM")}
CASES = {
    # AFM-4.5B's layer: relu2 MLP, RMSNorms, grouped-query attention, untied output
    "arcee": {},
    # yarn context extension (AFM-4.5B's), every projection biased, the output tied
    "arcee-yarn-biased": {"rope_parameters": {"rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0,
                                              "original_max_position_embeddings": 10},
                          "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True},
    # Minitron's layer: LayerNorm1P, half of each head's features rotated (the default), untied output
    "nemotron": {},
    # a quarter rotated, llama3 scaling of those frequencies, every projection biased, the output tied
    "nemotron-biased-tied": {"rope_parameters": {"rope_type": "llama3", "rope_theta": 1000.0, "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 10,
                                                 "partial_rotary_factor": 0.25},
                             "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True},
    # linear scaling, which holds no original context: export once crashed in Phi-3's config on it
    "nemotron-linear": {"rope_parameters": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.0}},
}
"""case -> config fields beyond the family's SHAPE."""


def family(case: str) -> str:
    return case.split("-")[0]


def config(case: str):
    return getattr(transformers, CLASSES[family(case)][0])(**IDS | SHAPE[family(case)] | CASES[case])


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    return save_random(CLASSES[family(case)][1], config(case), path)


FULL = ("arcee", "arcee-yarn-biased", "nemotron")
"""Cases checked through both backends and decoding; the other in PyTorch (the round trip below
checks its export's parity)."""


@pytest.mark.parametrize("case", FULL)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


@pytest.mark.parametrize("case", [case for case in CASES if case not in FULL])
def test_other_layouts_match_transformers_in_pytorch(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_pytorch_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep)


@pytest.mark.parametrize("top,fraction", [
    ({"rope_theta": 500.0, "partial_rotary_factor": 0.75, "kv_channels": 24}, 0.75),  # as Minitron-4B's file
    ({}, 0.5)])  # the share left out: NemotronConfig's 0.5
@torch.no_grad()
def test_nemotron_published_form_reads_the_top_level_rotary_fields(top, fraction, cli, tmp_path):
    """A config.json as Minitron's are written (transformers 4): no rope_parameters, rope_theta and
    partial_rotary_factor at the top level (or left out), Megatron's kv_channels beside head_dim.
    tfspec reads it as transformers' from_pretrained of the same directory does."""
    save("nemotron", tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    written = json.loads(path.read_text())
    del written["rope_parameters"]
    path.write_text(json.dumps(written | top))
    ref = transformers.NemotronForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert ref.config.rope_parameters["partial_rotary_factor"] == fraction  # of the 24 features of a head
    tokens, keep = right_padded(VOCAB, PAD)
    _, ours, _ = assert_pytorch_import_matches(cli, tmp_path / "hf", ref, tokens, keep)
    assert load_spec(ours).positional.fraction == fraction


@pytest.mark.parametrize("case", ["arcee", "nemotron-biased-tied"])
@torch.no_grad()
def test_base_model_hidden_states_match_transformers(case, cli, tmp_path):
    """ArceeModel and NemotronModel (no lm_head): the spec's output is tied to the token embedding,
    so its logits are the last hidden states seen through that projection."""
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
    # AFM-4.5B's width over a 32000-token vocabulary, bos/eos ids (128000, 128001) outside it
    "arcee": ("ArceeConfig", "ArceeForCausalLM", {}),
    # a 4.5B shape with AFM-4.5B's yarn extension from 4096 to 65536 positions
    "arcee-4.5b-yarn": ("ArceeConfig", "ArceeForCausalLM", {
        "vocab_size": 128004, "hidden_size": 2560, "intermediate_size": 18432, "num_hidden_layers": 36,
        "num_attention_heads": 20, "num_key_value_heads": 4, "head_dim": 128, "max_position_embeddings": 65536,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                            "original_max_position_embeddings": 4096}}),
    # NemotronConfig leaves num_key_value_heads unset, which transformers cannot build: multi-head here
    "nemotron": ("NemotronConfig", "NemotronForCausalLM", {"num_key_value_heads": 48}),
    # Minitron-4B-Base's shape
    "minitron-4b": ("NemotronConfig", "NemotronForCausalLM", {
        "hidden_size": 3072, "intermediate_size": 9216, "num_attention_heads": 24, "num_key_value_heads": 8}),
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
    ("arcee", {"partial_rotary_factor": 0.5}, "unknown field partial_rotary_factor"),
    ("arcee", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
     "partial_rotary_factor: 0.5 is not supported"),
    ("arcee", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4, "factor": 2.0}},
     "rope type \"proportional\" is not supported"),
    ("arcee", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("arcee", {"norm_eps": 1e-5}, "unknown field norm_eps"),
    ("arcee", {"mlp_bias": "false"}, "mlp_bias must be true or false"),
    ("nemotron", {"num_key_value_heads": None}, "num_key_value_heads is not set"),
    ("nemotron", {"kv_channels": 16}, "kv_channels (16) differs from the head width"),
    ("nemotron", {"kv_channels": "24"}, "kv_channels must be an integer"),
    ("nemotron", {"partial_rotary_factor": "half"}, "partial_rotary_factor must be a number"),
    ("nemotron", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.3}},
     "fraction"),
    ("nemotron", {"rms_norm_eps": 1e-6}, "unknown field rms_norm_eps"),
    ("nemotron", {"norm_eps": "tiny"}, "norm_eps must be a number"),
    ("nemotron", {"hidden_act": "relu6"}, "hidden_act: \"relu6\" is not supported")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    written = json.loads(config(case).to_json_string()) | change
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(written))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "ours").exists()
