"""`tfspec import` of GPT-NeoX, Phi and Falcon checkpoints against transformers: decoders whose
attention and MLP read the layer's input in parallel (two LayerNorms, or one shared), small
random models (every weight perturbed) written by ``save_pretrained`` and imported through the
CLI. Logits of the PyTorch backend and of the exported ONNX graph equal transformers' at the
real tokens of a right-padded batch, 20 greedy tokens equal ``generate``'s, the default
configurations count what transformers counts, import -> ``export --format hf`` ->
``from_pretrained`` gives the original logits back, and bad configurations are one error line."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_decoder_import_matches, assert_hf_round_trip,
                            assert_pytorch_import_matches, perturb, right_padded)
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 0
SHAPE = {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "max_position_embeddings": 40, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": PAD}
EPS = {"gpt_neox": {"layer_norm_eps": 1e-3, "intermediate_size": 96},
       "phi": {"layer_norm_eps": 1e-3, "intermediate_size": 96},
       "falcon": {"layer_norm_epsilon": 1e-3, "ffn_hidden_size": 96}}
"""Each family's epsilon (off its default, so that an importer ignoring it computes something
else) and MLP width, under its own names."""
CLASSES = {"gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM"), "phi": ("PhiConfig", "PhiForCausalLM"),
           "falcon": ("FalconConfig", "FalconForCausalLM")}
CASES = {
    # Pythia: parallel residual, two norms, rotary on a quarter of each head's 16 features
    "gpt_neox": ({}, {}),
    # sequential layers, unbiased attention; config.json as transformers 4 wrote it (gpt-neox-20b's gelu_fast)
    "gpt_neox-sequential": ({"use_parallel_residual": False, "attention_bias": False}, {
        "rope_parameters": None, "rotary_pct": 0.5, "rotary_emb_base": 100, "hidden_act": "gelu_fast"}),
    # phi-2: one shared norm, half the features rotated, grouped-query attention, biased output
    "phi": ({"num_key_value_heads": 2}, {}),
    # queries and keys LayerNormed per head, the output tied (its bias still its own); transformers 4's fields
    "phi-qk-norm": ({"qk_layernorm": True, "tie_word_embeddings": True},
                    {"rope_parameters": None, "partial_rotary_factor": 0.75, "rope_theta": 500.0}),
    # falcon-7b: multi-query, one shared norm, no biases, the output tied
    "falcon": ({}, {}),
    # falcon-40b: two groups of key/value heads, ln_attn and ln_mlp; biases on
    "falcon-40b": ({"new_decoder_architecture": True, "num_kv_heads": 2, "bias": True}, {}),
    # falcon-11B: the new architecture with one norm, the output untied
    "falcon-11b": ({"new_decoder_architecture": True, "num_kv_heads": 1, "num_ln_in_parallel_attn": 1,
                    "tie_word_embeddings": False}, {}),
    # sequential layers, a key/value head a query head (q, k, v stored head by head)
    "falcon-sequential": ({"parallel_attn": False, "multi_query": False, "bias": True}, {}),
}
"""case -> (config fields, fields rewritten in the saved config.json; None removes one)."""


def family(case: str) -> str:
    return case.split("-")[0]


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns what transformers loads from there
    (eval mode), the rewritten config.json read."""
    (config_class, model_class), (fields, published) = CLASSES[family(case)], CASES[case]
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**SHAPE | EPS[family(case)] | fields)
    model = perturb(getattr(transformers, model_class)(config).eval())
    model.save_pretrained(path)
    written = json.loads((path / "config.json").read_text()) | published
    (path / "config.json").write_text(json.dumps({k: v for k, v in written.items() if v is not None}))
    return getattr(transformers, model_class).from_pretrained(path).eval()


FULL = ("gpt_neox", "phi-qk-norm", "falcon", "falcon-40b")
"""Cases checked through both backends and decoding; the others' layouts in PyTorch (their ONNX
graphs are the same ops, and the round trip below checks their export's parity)."""


@pytest.mark.parametrize("case", FULL)
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


@pytest.mark.parametrize("case", [case for case in CASES if case not in FULL])
def test_other_layouts_match_transformers_in_pytorch(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_pytorch_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep)


@pytest.mark.parametrize("case", ["gpt_neox", "phi-qk-norm", "falcon-40b"])
@torch.no_grad()
def test_base_model_hidden_states_match_transformers(case, cli, tmp_path):
    """GPTNeoXModel, PhiModel and FalconModel (no lm_head): the spec's output is tied to the
    token embedding without a bias, so its logits are transformers' last hidden states seen
    through that projection."""
    base = save(case, tmp_path / "causal").base_model
    base.save_pretrained(tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    assert sum(p.numel() for p in model.parameters()) == base.num_parameters()
    tokens, keep = right_padded(VOCAB, PAD)
    want = base(input_ids=tokens, attention_mask=keep.long()).last_hidden_state @ base.get_input_embeddings().weight.T
    torch.testing.assert_close(model(tokens)[keep], want[keep], atol=1e-4, rtol=0)


@torch.no_grad()
def test_pythia_checkpoint_names_import(cli, tmp_path):
    """Pythia's files: the causal-mask buffers and rotary frequencies stored beside the weights
    (left out, with a note); the output projection under transformers 5's in-memory name."""
    from safetensors.torch import load_file, save_file

    ref = save("gpt_neox", tmp_path / "hf")
    tensors = load_file(tmp_path / "hf" / "model.safetensors")
    tensors["lm_head.weight"] = tensors.pop("embed_out.weight")
    for i in range(2):
        tensors[f"gpt_neox.layers.{i}.attention.bias"] = torch.ones(1, 1, 40, 40, dtype=torch.bool).tril()
        tensors[f"gpt_neox.layers.{i}.attention.masked_bias"] = torch.tensor(-1e9)
        tensors[f"gpt_neox.layers.{i}.attention.rotary_emb.inv_freq"] = torch.ones(2)
    save_file(tensors, tmp_path / "hf" / "model.safetensors", metadata={"format": "pt"})
    code, out, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 0 and "causal-mask buffer" in out + err, out + err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    tokens = torch.randint(5, VOCAB, (2, 12))
    torch.testing.assert_close(model(tokens), ref(tokens).logits, atol=1e-4, rtol=0)


DEFAULTS = {
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {}),  # gpt-neox-20b's shape
    "pythia-1.4b": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {
        "vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
        "num_attention_heads": 16, "bos_token_id": 0, "eos_token_id": 0}),
    "phi": ("PhiConfig", "PhiForCausalLM", {}),  # phi-1_5's shape
    "phi-2": ("PhiConfig", "PhiForCausalLM", {
        "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 32,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.4},
        "bos_token_id": 50256, "eos_token_id": 50256}),
    "falcon": ("FalconConfig", "FalconForCausalLM", {}),  # falcon-7b's shape
    "falcon-40b": ("FalconConfig", "FalconForCausalLM", {
        "hidden_size": 8192, "num_attention_heads": 128, "num_kv_heads": 8, "num_hidden_layers": 60,
        "new_decoder_architecture": True}),
}
"""Each family's default configuration (GPTNeoXConfig(), PhiConfig(), FalconConfig()) and
published shapes beside it."""


@pytest.mark.parametrize("name", DEFAULTS)
def test_default_config_counts_as_transformers(name, cli, tmp_path):
    config_class, model_class, changes = DEFAULTS[name]
    assert_config_imports_at_count(cli, tmp_path / "hf", getattr(transformers, config_class)(**changes), model_class)


EXPORTED = {"gpt_neox": "GPTNeoXForCausalLM", "gpt_neox-sequential": "GPTNeoXForCausalLM", "phi": "PhiForCausalLM",
            "phi-qk-norm": "PhiForCausalLM", "falcon": "FalconForCausalLM", "falcon-40b": "FalconForCausalLM",
            "falcon-11b": "FalconForCausalLM", "falcon-sequential": "FalconForCausalLM"}
"""The class ``export --format hf`` writes: the first family (by model type) that computes the spec."""


@pytest.mark.parametrize("case", CASES)
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), EXPORTED[case], tokens, keep)


@pytest.mark.parametrize("case,change,needle", [
    ("falcon", {"alibi": True}, "alibi: true is not supported; tfspec imports Falcon with alibi false"),
    ("falcon", {"new_decoder_architecture": True, "parallel_attn": False}, "parallel_attn: false is not supported"),
    ("falcon", {"num_ln_in_parallel_attn": 2}, "num_ln_in_parallel_attn: 2 is not supported"),
    ("falcon", {"multi_query": False, "num_kv_heads": 2}, "num_kv_heads: 2 is not supported"),
    ("falcon", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
     "partial_rotary_factor: 0.5 is not supported; transformers' Falcon rotates every feature"),
    ("falcon", {"partial_rotary_factor": 0.5}, "unknown field partial_rotary_factor"),
    ("falcon", {"bias": "no"}, "bias must be true or false"),
    ("falcon", {"activation": "gelu_fast"}, "activation: \"gelu_fast\" is not supported"),
    ("gpt_neox", {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}},
     "rope type \"linear\" is not supported"),
    ("gpt_neox", {"rope_parameters": None, "rotary_pct": "quarter"}, "rotary_pct must be a number"),
    ("gpt_neox", {"rope_theta": 500.0}, "unknown field rope_theta"),
    ("gpt_neox", {"use_parallel_residual": 1}, "use_parallel_residual must be true or false"),
    ("phi", {"qk_layernorm": "yes"}, "qk_layernorm must be true or false"),
    ("phi", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("phi", {"head_dim": 8}, "unknown field head_dim"),
    ("phi", {"num_key_value_heads": 3}, "heads (4) must be a multiple of kv_heads (3)")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _ = CLASSES[case]
    config = json.loads(getattr(transformers, config_class)(**SHAPE | EPS[case]).to_json_string()) | change
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "ours").exists()


def test_phi_reads_published_null_ids_from_the_tokenizer(cli, tmp_path):
    """phi-1_5's config.json writes null bos, eos and num_key_value_heads: <|endoftext|> of its
    vocab.json ends sequences, and each query head has its key/value head."""
    config = json.loads(transformers.PhiConfig(**SHAPE | EPS["phi"]).to_json_string())
    config |= {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "num_key_value_heads": None}
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    (tmp_path / "hf" / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "<|endoftext|>": VOCAB - 1}))
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    spec = load_spec(tmp_path / "ours")
    assert (spec.vocab.bos_id, spec.vocab.eos_id, spec.num_kv_heads) == (VOCAB - 1, VOCAB - 1, 4)
