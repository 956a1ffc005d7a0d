"""`tfspec import` of DeBERTa (v1) and MPNet against transformers: small random models written by
``save_pretrained``, every weight perturbed, imported through the CLI; outputs of the PyTorch
backend and of the exported ONNX graph equal transformers' within 1e-4 at the real tokens of a
right-padded batch (the masked LM's logits, the base model's hidden states, the sequence
class's logits); ``export --format hf`` gives back the original outputs; each configuration
class's defaults imported config-only count what transformers counts; configurations tfspec
cannot compute are one error line naming the field.

DeBERTa v1 is imported without relative attention (``deberta.py`` says why its relative
attention is refused); MPNet holds learned positions and a stack's relative bias at once, on
a batch reaching past the bias's 128-token reach."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_hf_round_trip,
                            right_padded, save_random)
from tfspec.backends.onnx import OnnxModel
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB = 100
DEBERTA = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
               max_position_embeddings=40, layer_norm_eps=1e-3, pad_token_id=0)
"""deberta-base's shape, shrunk; the epsilon off its default."""
DEBERTA_BASE = dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, max_position_embeddings=512, relative_attention=True,
                    pos_att_type="c2p|p2c", max_relative_positions=-1, position_biased_input=False,
                    layer_norm_eps=1e-7, type_vocab_size=0, hidden_act="gelu")
"""microsoft/deberta-base's config.json."""
MPNET = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=150, layer_norm_eps=1e-3)
"""mpnet-base's shape, shrunk: 148 positions (rows from padding_idx + 1 = 2), room for a batch
reaching past the bias's 128-token reach."""
CASES = {
    # learned positions; pos_att_type scales the logits by 1 / sqrt(3 d_k) even without relative
    # attention; two token types
    "deberta-mlm": ("DebertaConfig", "DebertaForMaskedLM",
                    DEBERTA | dict(pos_att_type=["c2p", "p2c"], type_vocab_size=2)),
    # no positions at all (position_biased_input false), ReLU
    "deberta-base-model": ("DebertaConfig", "DebertaModel", DEBERTA | dict(position_biased_input=False,
                                                                           hidden_act="relu")),
    # the ContextPooler with tanh instead of its default GELU; one pos_att_type term
    "deberta-sequence": ("DebertaConfig", "DebertaForSequenceClassification",
                         DEBERTA | dict(pooler_hidden_act="tanh", pos_att_type="p2c", num_labels=3)),
    "mpnet-mlm": ("MPNetConfig", "MPNetForMaskedLM", MPNET),
    "mpnet-model": ("MPNetConfig", "MPNetModel", MPNET),
    "mpnet-sequence": ("MPNetConfig", "MPNetForSequenceClassification", MPNET | dict(num_labels=3)),
}


def batch(case: str) -> tuple[torch.Tensor, torch.Tensor]:
    """DeBERTa: ``right_padded``'s 13 tokens padded with 0. MPNet: 3 rows of 140 tokens, row 1
    padded with 1 (its padding row) after 70: distances past the 8 exact buckets and past 128."""
    if case.startswith("deberta"):
        return right_padded(VOCAB, 0)
    tokens = torch.randint(5, VOCAB, (3, 140), generator=torch.Generator().manual_seed(1))
    tokens[1, 70:] = 1
    return tokens, tokens != 1


def _save(case: str, tmp_path):
    config_class, architecture, fields = CASES[case]
    return save_random(architecture, getattr(transformers, config_class)(**fields), tmp_path / "hf"), architecture


def _imported(cli, directory):
    ours = directory.with_name(directory.name + "-imported")
    code, _, err = cli("import", directory, "-o", ours, "--quiet")
    assert code == 0, err
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    return ours, model


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_import_matches_transformers_in_pytorch_and_onnx(case, cli, tmp_path):
    ref, architecture = _save(case, tmp_path)
    tokens, keep = batch(case)
    out = ref(input_ids=tokens, attention_mask=keep.long())
    ours, model = _imported(cli, tmp_path / "hf")
    code, text, err = cli("export", ours, "-o", tmp_path / "onnx")
    assert code == 0, text + err
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    if architecture.endswith("Model"):  # the encoder's output (and MPNet's pooler) as ports
        ports = {"memory": out.last_hidden_state} | ({"pooled": out.pooler_output} if "mpnet" in case else {})
        got = model.run({"src": tokens}, tuple(ports))
        exported = onnx.run("encoder", list(ports), {"src": tokens.numpy()})
        for (port, want), onnx_got in zip(ports.items(), exported, strict=True):
            real = keep if port == "memory" else slice(None)
            torch.testing.assert_close(got[port][real], want[real], atol=1e-4, rtol=0)
            np.testing.assert_allclose(onnx_got[real], want[real].numpy(), atol=1e-4, rtol=0)
        return
    real = slice(None) if architecture.endswith("ForSequenceClassification") else keep  # one row per text
    torch.testing.assert_close(model(tokens)[real], out.logits[real], atol=1e-4, rtol=0)
    np.testing.assert_allclose(onnx.logits(src=tokens.numpy())[real], out.logits[real].numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", ["deberta-mlm", "deberta-sequence", "mpnet-mlm", "mpnet-sequence"])
def test_hf_export_round_trip_gives_the_original_outputs(case, cli, tmp_path):
    ref, architecture = _save(case, tmp_path)
    tokens, keep = batch(case)
    if architecture.endswith("ForSequenceClassification"):
        keep = torch.ones(len(tokens), dtype=torch.bool)  # (B, classes) logits: every row
    assert_hf_round_trip(cli, tmp_path / "hf", ref, architecture, tokens, keep,
                         attention_mask=(tokens != (0 if case.startswith("deberta") else 1)).long())


@pytest.mark.parametrize("config_class, architecture", [
    ("DebertaConfig", "DebertaModel"), ("DebertaConfig", "DebertaForMaskedLM"),
    ("MPNetConfig", "MPNetModel"), ("MPNetConfig", "MPNetForMaskedLM"),
])
def test_default_config_imports_at_transformers_count(config_class, architecture, cli, tmp_path):
    config = getattr(transformers, config_class)()
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


@pytest.mark.parametrize("case, change, needle", [
    ("deberta-mlm", DEBERTA_BASE, "relative_attention: true is not supported; DeBERTa v1 projects its relative "
                                  "table with position weights of its own (pos_proj, pos_q_proj)"),
    ("deberta-mlm", {"relative_attention": True, "position_biased_input": True}, "relative_attention: true is not"),
    ("deberta-mlm", {"talking_head": True}, "talking_head: true is not supported"),
    ("deberta-mlm", {"legacy": False}, "legacy: false is not supported with DebertaForMaskedLM"),
    ("deberta-mlm", {"embedding_size": 16}, "embedding_size: 16 is not supported"),
    ("deberta-mlm", {"pos_att_type": ["c2p", "c2p"]}, "pos_att_type: [\"c2p\", \"c2p\"] is not supported"),
    ("deberta-mlm", {"num_attention_heads": 5}, "hidden_size (32) must be a multiple of num_attention_heads (5)"),
    ("deberta-mlm", {"share_att_key": True}, "unknown field share_att_key"),  # DeBERTa-v2's, which v1 never reads
    ("deberta-mlm", {"relative_attention": "false"}, "relative_attention must be true or false"),
    ("mpnet-mlm", {"pad_token_id": 0}, "pad_token_id: 0 is not supported"),
    ("mpnet-mlm", {"relative_attention_num_buckets": 64},
                 "relative_attention_num_buckets: 64 is not supported"),
    ("mpnet-mlm", {"type_vocab_size": 2}, "unknown field type_vocab_size"),
    ("mpnet-mlm", {"hidden_act": "gelu_new"}, "its lm_head applies exact GELU"),
])
def test_unsupported_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, architecture, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config | {"architectures": [architecture]}, needle)


def test_deberta_attention_reads_in_proj_head_by_head(cli, tmp_path):
    """in_proj holds each head's query, key and value rows together; tfspec's w_qkv all queries,
    then all keys, then all values, and the biases of the query and value alone (keys have none)."""
    ref, _ = _save("deberta-mlm", tmp_path)
    ours, _ = _imported(cli, tmp_path / "hf")
    from safetensors.numpy import load_file

    weights = load_file(ours / "model.safetensors")
    attention = ref.deberta.encoder.layer[0].attention.self
    heads, d_k = attention.num_attention_heads, attention.attention_head_size
    stored = attention.in_proj.weight.detach().numpy().reshape(heads, 3, d_k, -1)
    np.testing.assert_array_equal(weights["encoder.layers.0.self_attn.w_qkv"],
                                  stored.transpose(1, 0, 2, 3).reshape(3 * heads * d_k, -1))
    assert "encoder.layers.0.self_attn.b_k" not in weights and "encoder.layers.0.self_attn.b_qkv" not in weights
    np.testing.assert_array_equal(weights["encoder.layers.0.self_attn.b_v"], attention.v_bias.detach().numpy())
