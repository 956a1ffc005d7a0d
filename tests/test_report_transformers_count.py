"""``tfspec report`` of an imported spec says how its count differs from transformers' own
(``num_parameters()``) where the two count by different conventions: the sinusoid tables
Marian and Pegasus store as parameters (tfspec computes them), the final_logits_bias BART's
family keeps as a buffer (a trained weight in tfspec), DeepSeek-V3's e_score_correction_bias
(a buffer there), the pooler and sentence heads of BERT's and ALBERT's *ForPreTraining (left
out). Reference: transformers' count of the class built from the same configuration (meta device)."""

from __future__ import annotations

import json

import pytest

from hf_checkpoints import transformers_count

transformers = pytest.importorskip("transformers")

SEQ2SEQ = dict(vocab_size=90, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64)
IDS = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
PAD_STARTS = dict(pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
ENCODER = dict(vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48)
DEEPSEEK = dict(vocab_size=90, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=4, max_position_embeddings=40, pad_token_id=1, bos_token_id=2, eos_token_id=3,
                n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2, moe_intermediate_size=24,
                kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=12,
                first_k_dense_replace=1, n_shared_experts=1)
CASES = {  # case: (config class, architecture, fields, the conventions that differ)
    "marian": ("MarianConfig", "MarianMTModel", SEQ2SEQ | PAD_STARTS, ["sinusoid", "final_logits_bias"]),
    "pegasus": ("PegasusConfig", "PegasusForConditionalGeneration", SEQ2SEQ | PAD_STARTS,
                ["sinusoid", "final_logits_bias"]),
    "bart": ("BartConfig", "BartForConditionalGeneration", SEQ2SEQ | IDS, ["final_logits_bias"]),
    "mbart": ("MBartConfig", "MBartForConditionalGeneration", SEQ2SEQ | IDS, ["final_logits_bias"]),
    "plbart": ("PLBartConfig", "PLBartForConditionalGeneration", SEQ2SEQ | IDS, ["final_logits_bias"]),
    "blenderbot": ("BlenderbotConfig", "BlenderbotForConditionalGeneration", SEQ2SEQ | IDS, ["final_logits_bias"]),
    "blenderbot-small": ("BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration", SEQ2SEQ | IDS,
                         ["final_logits_bias"]),
    "deepseek-v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", DEEPSEEK, ["e_score_correction_bias"]),
    "bert-pretraining": ("BertConfig", "BertForPreTraining", ENCODER, ["pooler", "next-sentence"]),
    "albert-pretraining": ("AlbertConfig", "AlbertForPreTraining", ENCODER | dict(embedding_size=16),
                           ["pooler", "sentence-order"]),
    # no difference: no params.transformers, no line
    "bart-base-model": ("BartConfig", "BartModel", SEQ2SEQ | IDS, []),
    "m2m-100": ("M2M100Config", "M2M100ForConditionalGeneration", SEQ2SEQ | IDS, []),
    "bert-mlm": ("BertConfig", "BertForMaskedLM", ENCODER, []),
}


@pytest.mark.parametrize("case", CASES)
def test_report_names_each_difference_from_transformers_count(case, cli, tmp_path):
    config_class, architecture, fields, named = CASES[case]
    config = getattr(transformers, config_class)(**fields)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config.to_dict() | {"architectures": [architecture]}))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    theirs = transformers_count(config, architecture)
    code, out, err = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0, err
    params = json.loads(out)["params"]
    code, text, err = cli("report", tmp_path / "ours")
    assert code == 0, err
    if not named:
        assert params["total"] == theirs and "transformers" not in params and "transformers counts" not in text
        return
    differences = params["transformers"]["differences"]
    assert params["transformers"]["total"] == theirs == params["total"] + sum(d["count"] for d in differences)
    assert len(differences) == len(named) and all(word in d["what"] for word, d in zip(named, differences))
    assert f"transformers counts {theirs:,} ({architecture}): " in text
    assert all(f"{d['count']:+,} {d['what']}" in text for d in differences), text
