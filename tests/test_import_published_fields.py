"""config.json files as their repositories publish them: the fields transformers reads past.

DeepSeek-V3's, DeepSeek-V2-Lite's, phi-2's, Nemotron-H-56B-Base-8K's and Phi-mini-MoE-instruct's
files carry ``auto_map`` (pointers to the repositories' own code, which transformers does not run
for a model type it has a class of: Phi-mini-MoE's ``PhiMoEForCausalLM`` is its
``PhimoeForCausalLM``); gpt-j-6b's carries ``rotary`` and ``scale_attn_weights``, DeepSeek's the
fields of their own code (``aux_loss_alpha``, ``seq_aux``, ``ep_size``, ``scoring_func``,
``moe_layer_freq``) and V3's its fp8 ``quantization_config``, Nemotron-H's ``attention_head_dim``,
none of which transformers' classes read. Each file imports at transformers' own count (the class
its AutoModelForCausalLM picks by model type, built from the same file on the meta device;
Llama-4-Scout-17B-16E-Instruct's text model, whose llama3 rope scaling has equal low and high
frequency factors); at tiny sizes each field leaves transformers' logits as they are, and tfspec's
equal them. A value transformers would not compute stays refused by name.
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


def published(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text())


def imported_count(cli, name: str, tmp_path) -> int:
    """The count ``tfspec report`` gives as transformers' for the published file ``name``, imported."""
    code, _, err = cli("import", FIXTURES / name, "-o", tmp_path / "ours", "--quiet", "--verbose")
    assert code == 0, err
    assert ("auto_map" in published(name)) == ("ignored: auto_map: " in err), err
    code, out, err = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0, err
    params = json.loads(out)["params"]
    return params.get("transformers", params)["total"]


@pytest.mark.parametrize("name", ["DeepSeek-V3", "DeepSeek-V2-Lite", "phi-2", "gpt-j-6b", "Nemotron-H-56B-Base-8K",
                                  "Phi-mini-MoE-instruct"])
def test_published_config_imports_at_transformers_count(name, cli, tmp_path):
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    architecture = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[published(name)["model_type"]]  # by model type, as transformers
    theirs = transformers_count(transformers.AutoConfig.from_pretrained(FIXTURES / name), architecture)
    assert imported_count(cli, name, tmp_path) == theirs


def test_published_llama4_instruct_config_imports_at_its_text_models_count(cli, tmp_path):
    """Llama-4-Scout-17B-16E-Instruct: its text model as transformers 5 builds it (its strict
    Llama4TextConfig takes the published integer attn_temperature_tuning, 4, by its truth, as the
    modeling code reads it, and has no for_llm_compressor)."""
    text = published("Llama-4-Scout-17B-16E-Instruct")["text_config"]
    assert text["rope_scaling"]["low_freq_factor"] == text["rope_scaling"]["high_freq_factor"]
    fields = {k: v for k, v in text.items() if k != "for_llm_compressor"}
    fields["attn_temperature_tuning"] = bool(text["attn_temperature_tuning"])
    theirs = transformers_count(transformers.Llama4TextConfig(**fields), "Llama4ForCausalLM")
    assert imported_count(cli, "Llama-4-Scout-17B-16E-Instruct", tmp_path) == theirs


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
    config = published(name) | {key: value}
    assert_config_refused(cli, tmp_path, config, f"{key}: {json.dumps(value)} is not supported")


def test_generation_settings_transformers_moves_are_ignored():
    """Every generation setting transformers moves from a model's configuration to its
    generation_config (and then never reads in the model) is among the ignored fields."""
    moved = transformers.GenerationConfig._get_default_generation_params()
    assert set(moved) <= COMMON_IGNORED.keys(), sorted(set(moved) - COMMON_IGNORED.keys())
