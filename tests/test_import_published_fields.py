"""config.json files as their repositories publish them: the fields transformers reads past.

DeepSeek-V3's, DeepSeek-V2-Lite's and phi-2's files carry ``auto_map`` (pointers to the
repositories' own code, which transformers does not run for a model type it has a class of);
gpt-j-6b's carries ``rotary`` and ``scale_attn_weights``, and DeepSeek's the fields of their own
code (``aux_loss_alpha``, ``seq_aux``, ``ep_size``, ``scoring_func``, ``moe_layer_freq``), none of
which transformers' classes read. Each file imports at transformers' own count (its class built
from the same file on the meta device); at tiny sizes each field leaves transformers' logits as
they are, and tfspec's equal them. A value transformers would not compute stays refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hf_checkpoints import assert_config_refused, assert_pytorch_import_matches, save_random, transformers_count
from tfspec.interop.hf.family import COMMON_IGNORED

transformers = pytest.importorskip("transformers")

FIXTURES = Path(__file__).parent / "fixtures/hf"
QUANTIZED = "quantization_config"
"""DeepSeek-V3's file describes its fp8 weights: refused (below), so the count reads the file without it."""


def published(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text())


@pytest.mark.parametrize("name", ["DeepSeek-V3", "DeepSeek-V2-Lite", "phi-2", "gpt-j-6b"])
def test_published_config_imports_at_transformers_count(name, cli, tmp_path):
    config = {k: v for k, v in published(name).items() if k != QUANTIZED}
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(config))
    code, _, err = cli("import", tmp_path / name, "-o", tmp_path / "ours", "--quiet", "--verbose")
    assert code == 0, err
    assert ("auto_map" in config) == ("ignored: auto_map: " in err), err
    theirs = transformers_count(transformers.AutoConfig.from_pretrained(tmp_path / name), config["architectures"][0])
    code, out, err = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0, err
    params = json.loads(out)["params"]
    assert params.get("transformers", params)["total"] == theirs


def test_quantized_weights_are_refused_by_name(cli, tmp_path):
    assert_config_refused(cli, tmp_path, published("DeepSeek-V3"), "quantization_config: ")


DEEPSEEK = dict(vocab_size=90, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=4, max_position_embeddings=40, pad_token_id=1, bos_token_id=2, eos_token_id=3,
                n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=24, kv_lora_rank=16,
                q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=12, first_k_dense_replace=1,
                n_shared_experts=1)
TINY = {  # case: (config class, architecture, tiny fields, the published fields added to them)
    "gptj": ("GPTJConfig", "GPTJForCausalLM",
             dict(vocab_size=90, n_positions=40, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, bos_token_id=2,
                  eos_token_id=3, pad_token_id=1), ("rotary", "scale_attn_weights")),
    "deepseek-v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM", DEEPSEEK | dict(n_group=1, topk_group=1),
                    ("auto_map", "aux_loss_alpha", "seq_aux", "scoring_func", "moe_layer_freq")),
    "deepseek-v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", DEEPSEEK | dict(n_group=4, topk_group=2),
                    ("auto_map", "aux_loss_alpha", "ep_size", "scoring_func", "moe_layer_freq", "topk_method")),
    "phi": ("PhiConfig", "PhiForCausalLM",
            dict(vocab_size=90, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=40, bos_token_id=2, eos_token_id=3, pad_token_id=1), ("auto_map",)),
}
SOURCE = {"gptj": "gpt-j-6b", "deepseek-v2": "DeepSeek-V2-Lite", "deepseek-v3": "DeepSeek-V3", "phi": "phi-2"}


@pytest.mark.parametrize("case", TINY)
@torch.no_grad()
def test_published_fields_leave_the_logits_as_they_are(case, cli, tmp_path):
    """The tiny checkpoint's config.json given the published values of ``case``'s fields: what
    transformers loads from it computes the logits of the model saved without them, and tfspec's
    import of it the same."""
    config_class, architecture, fields, added = TINY[case]
    original = save_random(architecture, getattr(transformers, config_class)(**fields), tmp_path / "hf")
    source = published(SOURCE[case])
    path = tmp_path / "hf" / "config.json"
    written = json.loads(path.read_text())
    assert not set(added) & written.keys()  # fields of the published file that transformers never writes
    path.write_text(json.dumps(written | {key: source[key] for key in added}))
    loaded = getattr(transformers, architecture).from_pretrained(tmp_path / "hf").eval()
    tokens = torch.randint(4, 90, (2, 11), generator=torch.Generator().manual_seed(1))
    keep = torch.ones_like(tokens, dtype=torch.bool)
    want = original(tokens).logits
    torch.testing.assert_close(loaded(tokens).logits, want, atol=0, rtol=0)
    assert_pytorch_import_matches(cli, tmp_path / "hf", loaded, tokens, keep)


REFUSED = {  # the field set to a value transformers' class would not compute: (published file, field, value)
    "gptj-unrotated": ("gpt-j-6b", "rotary", False),
    "gptj-unscaled": ("gpt-j-6b", "scale_attn_weights", False),
    "deepseek-v2-sigmoid": ("DeepSeek-V2-Lite", "scoring_func", "sigmoid"),
    "deepseek-v2-alternating": ("DeepSeek-V2-Lite", "moe_layer_freq", 2),
    "deepseek-v3-softmax": ("DeepSeek-V3", "scoring_func", "softmax"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_value_transformers_would_not_compute_is_refused_by_name(case, cli, tmp_path):
    name, key, value = REFUSED[case]
    config = {k: v for k, v in published(name).items() if k != QUANTIZED} | {key: value}
    assert_config_refused(cli, tmp_path, config, f"{key}: {json.dumps(value)} is not supported")


def test_generation_settings_transformers_moves_are_ignored():
    """Every generation setting transformers moves from a model's configuration to its
    generation_config (and then never reads in the model) is among the ignored fields."""
    moved = transformers.GenerationConfig._get_default_generation_params()
    assert set(moved) <= COMMON_IGNORED.keys(), sorted(set(moved) - COMMON_IGNORED.keys())
