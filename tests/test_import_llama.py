"""`tfspec import` of Llama-family checkpoints (llama, mistral, qwen2) against transformers:
small random models written by ``save_pretrained`` (one sharded, one bf16), imported through
the CLI, loaded by the PyTorch backend; logits equal, and greedy decoding equals `generate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hf_checkpoints import assert_config_refused, perturb
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.search import SearchOptions, search
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

SMALL = {"vocab_size": 120, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
         "bos_token_id": 1, "eos_token_id": 2, "rms_norm_eps": 1e-3}
"""rms_norm_eps off its default, so that an importer ignoring it computes something else."""
CASES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "llama-llama3-rope": ("LlamaConfig", "LlamaForCausalLM", {"rope_parameters": {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    "mistral-window": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 6}),
    "qwen2-tied": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True, "bos_token_id": 5,
                                                       "eos_token_id": 5}),
}


def save(case: str, path, **save_options):
    config_class, model_class, extra = CASES[case]
    torch.manual_seed(0)
    model = perturb(getattr(transformers, model_class)(getattr(transformers, config_class)(**SMALL | extra)).eval())
    model.save_pretrained(path, **save_options)
    return model


@pytest.mark.parametrize("case,options", [("llama", {}), ("llama-llama3-rope", {"max_shard_size": "100KB"}),
                                          ("mistral-window", {}), ("qwen2-tied", {})])
def test_imported_llama_family_matches_transformers(case, options, cli, tmp_path):
    ref = save(case, tmp_path / "hf", **options)
    code, out, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    spec = load_spec(tmp_path / "ours")
    model = build_module(spec).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    tokens = torch.randint(6, 120, (2, 30))
    with torch.no_grad():
        assert torch.allclose(model(tokens), ref(tokens).logits, atol=1e-4)
    prompt = tokens[:, :4]
    want = ref.generate(prompt, max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)[:, 4:]
    got = search(TorchDecoder(model), None, SearchOptions(beam=1, max_length=12, min_length=12, max_extra=12),
                 prefix=prompt.numpy())
    assert [list(map(int, row)) for row in want] == got


def test_config_only_counts_as_transformers(cli, tmp_path):
    config = transformers.MistralConfig(**SMALL | {"sliding_window": 6})
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    with torch.device("meta"):
        expected = sum(p.numel() for p in transformers.MistralForCausalLM(config).parameters())
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0 and json.loads(out)["params"]["total"] == expected


@pytest.mark.parametrize("config_class,change,needle", [
    ("LlamaConfig", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4, "factor": 4.0}},
     "rope type \"proportional\" is not supported"),
    ("LlamaConfig", {"hidden_act": "gelu_fast"}, "hidden_act"),
    ("LlamaConfig", {"attention_bias": "yes"}, "attention_bias must be true or false, got \"yes\""),
    ("LlamaConfig", {"moe_experts": 8}, "unknown field moe_experts"),
    ("MistralConfig", {"sliding_window": "4096"}, "sliding_window must be an integer"),
    ("LlamaConfig", {"rope_parameters": [1]}, "rope_parameters must be an object of rotary settings"),
    ("LlamaConfig", {"rope_scaling": "x"}, "rope_scaling must be an object of rotary settings"),
    ("LlamaConfig", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": None,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
     "rope_scaling: low_freq_factor must be a number"),
    ("MistralConfig", {"num_key_value_heads": 3}, "valid tfspec spec: heads (4) must be a multiple of kv_heads (3)")])
def test_unsupported_or_malformed_configs_are_refused_by_name(config_class, change, needle, cli, tmp_path):
    config = json.loads(getattr(transformers, config_class)(**SMALL).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)


PUBLISHED = {"Llama-2-7b-hf": 6_738_415_616, "TinyLlama-1.1B": 1_100_048_384, "Mistral-7B-v0.1": 7_241_732_096,
             "Qwen2.5-0.5B": 494_032_768, "Llama-3.2-1B": 1_235_814_400,
             "SmolLM2-360M": 361_821_120, "Mistral-Nemo-Base-2407": 12_247_782_400}
"""The counts transformers gives for these configurations (its num_parameters()); each is
also recounted from the fixture by transformers on the meta device."""


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_configs_import_at_their_counts(name, cli, tmp_path):
    fixture = Path(__file__).parent / "fixtures" / "hf" / name
    code, _, err = cli("import", fixture, "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    config = transformers.AutoConfig.from_pretrained(fixture)
    with torch.device("meta"):
        counted = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0 and json.loads(out)["params"]["total"] == counted == PUBLISHED[name]


def test_base_models_have_no_output_projection(cli, tmp_path):
    """LlamaModel, MistralModel and Qwen2Model hold no lm_head: imported with untied embeddings,
    the spec ties its output to the token embedding instead of inventing a matrix, so it holds
    exactly the class's parameters, and its hidden states are transformers' (seen through that
    tied projection). A *ForCausalLM checkpoint imported as the base class drops its lm_head."""
    config = transformers.MistralConfig(**SMALL | {"sliding_window": 6, "tie_word_embeddings": False})
    torch.manual_seed(0)
    causal = transformers.MistralForCausalLM(config).eval()
    causal.save_pretrained(tmp_path / "causal")
    base = causal.model
    base.save_pretrained(tmp_path / "base")
    tokens = torch.randint(6, 120, (2, 20))
    with torch.no_grad():
        want = base(tokens).last_hidden_state @ base.embed_tokens.weight.T
    for source, extra in (("base", []), ("causal", ["--architecture", "MistralModel"])):
        code, out, err = cli("import", tmp_path / source, "-o", tmp_path / f"ours-{source}", "--quiet", *extra)
        assert code == 0, err
        model = build_module(load_spec(tmp_path / f"ours-{source}")).eval()
        load_weights(model, tmp_path / f"ours-{source}" / "model.safetensors")
        assert sum(p.numel() for p in model.parameters()) == base.num_parameters()
        with torch.no_grad():
            assert torch.allclose(model(tokens), want, atol=1e-4)


def test_e5_mistral_pads_with_unk_not_its_eos(cli, tmp_path):
    """e5-mistral-7b-instruct (MistralModel) sets pad_token_id to </s>, the token its inputs end
    with: the spec pads with <unk> (id 0, as Llama does) so that </s> stays visible, and counts
    MistralModel's parameters."""
    fixture = Path(__file__).parent / "fixtures" / "hf" / "e5-mistral-7b-instruct"
    code, _, err = cli("import", fixture, "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    spec = load_spec(tmp_path / "ours")
    assert (spec.vocab.pad_id, spec.vocab.bos_id, spec.vocab.eos_id) == (0, 1, 2)
    with torch.device("meta"):
        counted = transformers.MistralModel(transformers.AutoConfig.from_pretrained(fixture)).num_parameters()
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0 and json.loads(out)["params"]["total"] == counted == 7_110_660_096
