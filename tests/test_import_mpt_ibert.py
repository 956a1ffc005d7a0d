"""`tfspec import` of MPT and I-BERT checkpoints against transformers: small random models (every
weight perturbed) written by ``save_pretrained`` and imported through the CLI.

MPT: logits of the PyTorch backend and of the exported ONNX graph equal transformers' at the real
tokens of a right-padded batch and 20 greedy tokens equal ``generate``'s (ALiBi over a power of two
of heads and over six, clip_qkv and softmax_scale, an untied output), MptModel's hidden states,
the default and mpt-7b's configurations count what transformers counts (mpt-7b's config.json
naming the remote code's MPTForCausalLM), import -> ``export --format hf`` -> ``from_pretrained``
gives the original logits back, and what transformers' MPT does not compute as the file says
(``attn_config`` included) is one error line naming the field.

I-BERT (float mode): the encoder's outputs, the masked LM's and a sequence classifier's logits
equal transformers' in PyTorch and ONNX, the integer mode's buffers left out; it comes back from
``export --format hf`` as RoBERTa with the original outputs; the defaults count as transformers
counts; ``quant_mode: true`` is one error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, right_padded, save_random)
from test_import_encoders import assert_close, outputs
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 0  # no MPT below generates id 0 in its 20 greedy tokens
MPT = dict(vocab_size=VOCAB, d_model=64, n_heads=4, n_layers=2, max_seq_len=40, layer_norm_epsilon=1e-3,
           bos_token_id=2, eos_token_id=3, pad_token_id=PAD)
"""mpt-7b's layer, shrunk; layer_norm_epsilon off its default, so that an importer ignoring it
computes something else."""
MPT_CASES = {
    "mpt": {},
    # six heads: ALiBi's slopes of 8 heads, then every other of 16's; q, k, v clamped; scores scaled; untied
    "mpt-six-heads-clipped-untied": dict(d_model=48, n_heads=6, tie_word_embeddings=False,
                                         attn_config={"clip_qkv": 0.5, "softmax_scale": 0.3}),
}
MPT_7B = {
    "architectures": ["MPTForCausalLM"],
    "attn_config": {"alibi": True, "alibi_bias_max": 8, "attn_impl": "torch", "attn_pdrop": 0,
                    "attn_type": "multihead_attention", "attn_uses_sequence_id": False, "clip_qkv": None,
                    "prefix_lm": False, "qk_ln": False, "softmax_scale": None},
    "auto_map": {"AutoConfig": "configuration_mpt.MPTConfig", "AutoModelForCausalLM": "modeling_mpt.MPTForCausalLM"},
    "d_model": 4096, "emb_pdrop": 0, "embedding_fraction": 1.0, "expansion_ratio": 4,
    "init_config": {"emb_init_std": None, "emb_init_uniform_lim": None, "fan_mode": "fan_in",
                    "init_div_is_residual": True, "init_gain": 0, "init_nonlinearity": "relu", "init_std": 0.02,
                    "name": "kaiming_normal_", "verbose": 0},
    "init_device": "cpu", "learned_pos_emb": True, "logit_scale": None, "max_seq_len": 2048, "model_type": "mpt",
    "n_heads": 32, "n_layers": 32, "no_bias": True, "norm_type": "low_precision_layernorm", "resid_pdrop": 0,
    "tokenizer_name": "EleutherAI/gpt-neox-20b", "torch_dtype": "bfloat16", "transformers_version": "4.28.1",
    "use_cache": False, "verbose": 0, "vocab_size": 50432}
"""mosaicml/mpt-7b's config.json (and mpt-7b-instruct's), as published for its remote code."""


def mpt_config(case: str):
    return transformers.MptConfig(**MPT | MPT_CASES[case])


@pytest.mark.parametrize("case", MPT_CASES)
def test_mpt_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    ref = save_random("MptForCausalLM", mpt_config(case), tmp_path / "hf")
    assert_decoder_import_matches(cli, tmp_path / "hf", ref, tokens, keep, PAD)


@torch.no_grad()
def test_mpt_base_model_hidden_states_match_transformers(cli, tmp_path):
    """MptModel (no lm_head): the spec's output is tied to the token embedding, so its logits are
    the last hidden states seen through that projection."""
    base = save_random("MptForCausalLM", mpt_config("mpt"), tmp_path / "causal").base_model
    base.save_pretrained(tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    assert sum(p.numel() for p in model.parameters()) == base.num_parameters()
    tokens, keep = right_padded(VOCAB, PAD)
    want = base(input_ids=tokens, attention_mask=keep.long()).last_hidden_state @ base.get_input_embeddings().weight.T
    torch.testing.assert_close(model(tokens)[keep], want[keep], atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", MPT_CASES)
def test_mpt_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    original = save_random("MptForCausalLM", mpt_config(case), tmp_path / "original")
    assert_hf_round_trip(cli, tmp_path / "original", original, "MptForCausalLM", tokens, keep)


@pytest.mark.parametrize("fields", [{}, MPT_7B], ids=["MptConfig", "mpt-7b"])
def test_mpt_configs_count_as_transformers(fields, cli, tmp_path):
    assert_config_imports_at_count(cli, tmp_path / "hf", transformers.MptConfig(**fields), "MptForCausalLM")


def test_mpt_7b_config_reads_as_transformers_reads_it(cli, tmp_path):
    """The remote code's MPTForCausalLM imports as transformers' MptForCausalLM, ALiBi over its
    2048 trained positions, LayerNorms without a shift, no biases, the output tied."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(MPT_7B))
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    spec = load_spec(tmp_path / "ours")
    assert (spec.reference.architecture, spec.positional.kind, spec.positional.max_len, spec.uses_norm_bias,
            spec.tie_embeddings, spec.d_ff) == ("MptForCausalLM", "alibi", 2048, False, "output", 4 * 4096)


def test_mpt_position_table_is_refused(cli, tmp_path):
    """A checkpoint holding llm-foundry's learned position table (wpe) beside ALiBi: transformers'
    MPT has none and would leave it out, computing another model than the one trained."""
    from safetensors.torch import load_file, save_file

    save_random("MptForCausalLM", mpt_config("mpt"), tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    save_file(load_file(path) | {"transformer.wpe.weight": torch.zeros(40, 64)}, path, metadata={"format": "pt"})
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and "unexpected tensor 'transformer.wpe.weight'" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "ours").exists()


@pytest.mark.parametrize("change,needle", [
    ({"attn_config": {"qk_ln": True}}, "(attn_config): qk_ln: true is not supported"),
    ({"attn_config": {"alibi": False}}, "alibi: false is not supported"),
    ({"attn_config": {"alibi_bias_max": 16}}, "alibi_bias_max: 16 is not supported"),
    ({"attn_config": {"attn_type": "multiquery_attention"}}, "attn_type: \"multiquery_attention\" is not supported"),
    ({"attn_config": {"prefix_lm": True}}, "prefix_lm: true is not supported"),
    ({"attn_config": {"clip_qkv": "8"}}, "clip_qkv must be a number"),
    ({"attn_config": {"clip_qkv": -1.0}}, "clip_qkv must be positive"),
    ({"attn_config": {"softmax_scale": 0}}, "softmax_scale must be positive"),
    ({"attn_config": {"rope": True}}, "unknown field rope"),
    ({"attn_config": "torch"}, "attn_config must be an object"),
    ({"no_bias": False}, "no_bias: false is not supported"),
    ({"expansion_ratio": 2}, "expansion_ratio: 2 is not supported"),
    ({"logit_scale": "inv_sqrt_d_model"}, "logit_scale: \"inv_sqrt_d_model\" is not supported"),
    ({"norm_type": "rmsnorm"}, "norm_type: \"rmsnorm\" is not supported"),
    ({"ffn_config": {"ffn_type": "mptgeglu"}}, "ffn_config: {\"ffn_type\": \"mptgeglu\"} is not supported"),
    ({"d_model": "64"}, "d_model must be an integer"),
    ({"tie_word_embeddings": 0}, "tie_word_embeddings must be true or false")])
def test_mpt_unsupported_configs_are_refused_by_name(change, needle, cli, tmp_path):
    written = json.loads(mpt_config("mpt").to_json_string())
    if isinstance(change.get("attn_config"), dict):
        change = {"attn_config": written["attn_config"] | change["attn_config"]}
    assert_config_refused(cli, tmp_path, written | change, needle)


IBERT = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=42, type_vocab_size=1, layer_norm_eps=1e-3)
"""ibert-roberta-base's shape, shrunk (positions from row pad_token_id + 1 = 2); layer_norm_eps off
its default."""
IBERT_CASES = {"ibert": ("IBertModel", IBERT | dict(type_vocab_size=2)),
               "ibert-mlm": ("IBertForMaskedLM", IBERT),
               "ibert-sequence": ("IBertForSequenceClassification", IBERT | dict(
                   id2label={0: "negative", 1: "neutral", 2: "positive"},
                   label2id={"negative": 0, "neutral": 1, "positive": 2}))}


def save_ibert(case: str, path: Path):
    architecture, fields = IBERT_CASES[case]
    return save_random(architecture, transformers.IBertConfig(**fields), path)


@pytest.mark.parametrize("case", IBERT_CASES)
@torch.no_grad()
def test_ibert_outputs_match_transformers_in_torch_and_onnx(case, cli, tmp_path):
    from tfspec.backends.onnx import OnnxModel

    ref = save_ibert(case, tmp_path / "hf")
    code, out, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 0 and "integer-only mode" in err + out, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    tokens, keep = right_padded(100, 1)
    want = outputs(ref, tokens, keep)
    assert_close(model.run({"src": tokens}, tuple(want)), want, keep)  # a sequence's logits: every row
    code, out, err = cli("export", tmp_path / "ours", "-o", tmp_path / "onnx")
    assert code == 0, out + err
    graph = "model" if "logits" in want else "encoder"
    got = OnnxModel(tmp_path / "onnx", device="cpu").run(graph, list(want), {"src": tokens.numpy()})
    assert_close(dict(zip(want, got)), want, keep)


@pytest.mark.parametrize("case,architecture", [("ibert", "IBertModel"), ("ibert-mlm", "IBertForMaskedLM"),
                                               ("ibert-sequence", "IBertForSequenceClassification")])
@torch.no_grad()
def test_ibert_comes_back_as_ibert_with_the_original_outputs(case, architecture, cli, tmp_path):
    """I-BERT in float mode computes what RoBERTa computes; an import exports under the
    architecture it came from, labels kept."""
    original = save_ibert(case, tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, err = cli("export", tmp_path / "ours", "--format", "hf", "-o", tmp_path / "exported")
    assert code == 0 and "parity: ok" in out, out + err
    assert json.loads((tmp_path / "exported" / "config.json").read_text())["architectures"] == [architecture]
    back = getattr(transformers, architecture).from_pretrained(tmp_path / "exported").eval()
    assert back.config.id2label == original.config.id2label
    tokens, keep = right_padded(100, 1, seed=7)
    assert_close(outputs(back, tokens, keep), outputs(original, tokens, keep), keep)


@pytest.mark.parametrize("architecture", ["IBertModel", "IBertForMaskedLM", "IBertForSequenceClassification"])
def test_ibert_default_config_counts_as_transformers(architecture, cli, tmp_path):
    """IBertConfig's defaults (roberta-base's layers, 512 rows of positions, two token types)."""
    config = transformers.IBertConfig(architectures=[architecture])
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


@pytest.mark.parametrize("change,needle", [
    ({"quant_mode": True}, "quant_mode: true is not supported; I-BERT's integer-only kernels"),
    ({"quant_mode": "false"}, "quant_mode must be true or false"),
    ({"hidden_act": "relu"}, "hidden_act: \"relu\" is not supported; transformers' I-BERT layers apply exact GELU"),
    ({"architectures": ["IBertForMultipleChoice"]}, "architecture 'IBertForMultipleChoice' is not supported"),
    ({"rotary_value": 1}, "unknown field rotary_value")])
def test_ibert_unsupported_configs_are_refused_by_name(change, needle, cli, tmp_path):
    written = json.loads(transformers.IBertConfig(**IBERT, architectures=["IBertForMaskedLM"]).to_json_string())
    assert_config_refused(cli, tmp_path, written | change, needle)
