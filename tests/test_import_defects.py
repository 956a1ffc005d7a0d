"""``tfspec import`` defects of issue 51, each against transformers or the file system:

- 3: a ``model.safetensors`` that is there but cannot be read (a loop of links, a dangling link, a
  directory) is one error line, not a configuration-only import whose export ships random weights;
- 16: llama3 rope scaling with ``high_freq_factor`` equal to ``low_freq_factor``
  (Llama-4-Scout-17B-16E-Instruct's 1 and 1) is imported, its frequencies transformers';
- 17: Nemotron-H's ``attention_head_dim`` (written by NVIDIA's own code) is read against the
  ``head_dim`` transformers reads: imported where they agree, refused naming both where not;
- 18: a class name of a repository's own code (Phi-mini-MoE's ``PhiMoEForCausalLM``, in its
  ``auto_map``) is read as transformers reads it, by the model type: the class its
  AutoModelForCausalLM loads, whose logits the import computes.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from hf_checkpoints import (assert_config_refused, assert_pytorch_import_matches, right_padded, save_random,
                            transformers_count)

transformers = pytest.importorskip("transformers")

WEIGHTS = "model.safetensors"


def config_only(tmp_path):
    (tmp_path / "hf").mkdir()
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=4)
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    return tmp_path / "hf"


@pytest.mark.parametrize("kind,reason", [("loop", "Too many levels of symbolic links"),
                                         ("dangling", "No such file or directory"), ("directory", "a directory")])
def test_weights_that_cannot_be_read_are_one_error_line(kind, reason, cli, tmp_path):
    directory = config_only(tmp_path)
    if kind == "loop":
        os.symlink(directory / "other", directory / WEIGHTS)
        os.symlink(directory / WEIGHTS, directory / "other")
    elif kind == "dangling":
        os.symlink(tmp_path / "gone.safetensors", directory / WEIGHTS)
    else:
        (directory / WEIGHTS).mkdir()
    with pytest.raises(OSError):  # what any reader of the file meets, transformers' safetensors too
        with open(directory / WEIGHTS, "rb"):
            pass
    code, out, err = cli("import", directory, "-o", tmp_path / "ours")
    assert code == 2 and err == f"error: {directory / WEIGHTS}: not a readable weights file ({reason})\n", out + err
    assert not (tmp_path / "ours").exists()


def test_a_directory_without_weights_still_imports_its_configuration(cli, tmp_path):
    code, out, err = cli("import", config_only(tmp_path), "-o", tmp_path / "ours")
    assert code == 0 and "configuration only" in out, out + err


def test_llama3_scaling_with_equal_factors_has_transformers_frequencies():
    """No band between the two bounds: each frequency is divided by the factor or kept, at every
    length, as ``_compute_llama3_parameters`` computes it."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from tfspec.interop.hf.family import Source
    from tfspec.interop.hf.llama import Llama
    from tfspec.ir.positions import rotary_frequencies
    from tfspec.spec import Spec

    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0, "low_freq_factor": 1.0,
            "high_freq_factor": 1.0, "original_max_position_embeddings": 64}
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=128, intermediate_size=96, num_hidden_layers=1,
                                      num_attention_heads=2, head_dim=64, max_position_embeddings=1024,
                                      rope_parameters=rope)
    spec = Spec.model_validate({"name": "m", **Llama().spec_data(Source(config.to_dict(), "c", "LlamaForCausalLM"))})
    ours = spec.plan("decoder")[0].attention.positions.model_dump()
    theirs = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")[0].double().numpy()
    unscaled = rotary_frequencies(64, ours | {"scaling": None})
    assert 0 < (theirs < unscaled * 0.5).sum() < 32  # some stretched, some kept
    for length in (None, 64, 1000):
        np.testing.assert_allclose(rotary_frequencies(64, ours, length), theirs, rtol=2e-7)


def nemotron(**fields) -> dict:
    return json.loads(transformers.NemotronHConfig(
        vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16, mamba_num_heads=4,
        mamba_head_dim=8, ssm_state_size=8, n_groups=2, layers_block_type=["linear_attention", "full_attention"],
        **fields).to_json_string())


def test_nemotron_attention_head_dim_agreeing_with_head_dim_imports(cli, tmp_path):
    """transformers builds the attention from head_dim whatever attention_head_dim says; where the
    two agree the import counts what transformers counts."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(nemotron() | {"attention_head_dim": 16}))
    built = transformers.AutoConfig.from_pretrained(tmp_path / "hf")
    with torch.device("meta"):
        attention = transformers.NemotronHForCausalLM(built).model.layers[1].mixer
    assert attention.q_proj.out_features == 4 * 16
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0 and json.loads(out)["params"]["total"] == transformers_count(built, "NemotronHForCausalLM")


def test_nemotron_attention_head_dim_differing_from_head_dim_is_refused_naming_both(cli, tmp_path):
    assert_config_refused(cli, tmp_path, nemotron() | {"attention_head_dim": 8},
                          "attention_head_dim (8) differs from head_dim (16), which transformers' Nemotron-H reads")


@torch.no_grad()
def test_a_repository_class_name_imports_as_the_class_transformers_resolves(cli, tmp_path):
    """Phi-mini-MoE's config.json names its own code's PhiMoEForCausalLM (auto_map): transformers'
    AutoModelForCausalLM loads the model type's PhimoeForCausalLM, and the import is that class."""
    config = transformers.PhimoeConfig(vocab_size=100, hidden_size=32, intermediate_size=24, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=40,
                                       num_local_experts=4, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                                       lm_head_bias=True, attention_bias=True)
    save_random("PhimoeForCausalLM", config, tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {
        "architectures": ["PhiMoEForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_slimmoe.PhiMoEConfig",
                     "AutoModelForCausalLM": "modeling_slimmoe.PhiMoEForCausalLM"}}))
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(ref).__name__ == "PhimoeForCausalLM"
    tokens, keep = right_padded(100, 0)
    _, ours, _ = assert_pytorch_import_matches(cli, tmp_path / "hf", ref, tokens, keep)
    assert "architecture: PhimoeForCausalLM" in (ours / "spec.yaml").read_text()


def test_a_repository_class_name_of_no_auto_class_stays_refused(cli, tmp_path):
    config = json.loads(transformers.PhimoeConfig().to_json_string()) | {
        "architectures": ["PhiMoEForTokenClassification"],
        "auto_map": {"AutoModelForTokenClassification": "modeling_slimmoe.PhiMoEForTokenClassification"}}
    assert_config_refused(cli, tmp_path, config, "architecture 'PhiMoEForTokenClassification' is not supported")
