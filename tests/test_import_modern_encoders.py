"""`tfspec import` of ModernBERT and DeBERTa-v2/v3 against transformers: small random models written
by ``save_pretrained``, every weight perturbed, imported through the CLI; logits of the PyTorch
backend and of the exported ONNX graph equal transformers' within 1e-4 on a right-padded batch
of 13 tokens (longer than ModernBERT's local window and DeBERTa's exact distances and bucket
reach); ``export --format hf`` gives back the original outputs; each configuration class's
defaults (and DeBERTa-v3-base's shape) imported config-only count what transformers counts;
configurations and spec fields tfspec cannot compute are one error line naming the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_hf_round_trip, assert_pytorch_import_matches,
                            right_padded, save_random)
from tfspec.backends.onnx import OnnxModel

transformers = pytest.importorskip("transformers")

VOCAB, POSITIONS = 100, 40
MODERNBERT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
                  local_attention=6, max_position_embeddings=POSITIONS, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                  cls_token_id=1, sep_token_id=2, global_rope_theta=1000.0, local_rope_theta=100.0, norm_eps=1e-3)
"""ModernBERT-base's shape, shrunk: a global layer, two local ones (3 tokens each side), a
global one; rotary bases and epsilon off their defaults, so that an importer mixing them up or
ignoring them computes something else."""
DEBERTA = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
               max_position_embeddings=POSITIONS, layer_norm_eps=1e-3, type_vocab_size=0)
V3 = dict(relative_attention=True, position_buckets=4, max_relative_positions=10, norm_rel_ebd="layer_norm",
          share_att_key=True, pos_att_type="p2c|c2p", position_biased_input=False)
"""DeBERTa-v3's settings, shrunk: distances up to 2 exact, log-spaced up to 10, the 13-token
batch reaching past both."""
V3_BASE = dict(vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
               intermediate_size=3072, relative_attention=True, position_buckets=256, norm_rel_ebd="layer_norm",
               share_att_key=True, pos_att_type=["p2c", "c2p"], max_relative_positions=-1, layer_norm_eps=1e-7,
               position_biased_input=False, type_vocab_size=0)
"""microsoft/deberta-v3-base's config.json."""
OLD_MODERNBERT = {"layer_types": None, "rope_parameters": None, "global_attn_every_n_layers": 2,
                  "global_rope_theta": 1000.0, "local_rope_theta": 100.0}
"""How ModernBERT's files on the hub (transformers 4) state the layers and their rotary bases."""
CASES = {
    "modernbert": ("ModernBertConfig", "ModernBertForMaskedLM", MODERNBERT, {}),
    # every bias ModernBERT can switch on, and a config.json as transformers 4 wrote it
    "modernbert-biases": ("ModernBertConfig", "ModernBertForMaskedLM", MODERNBERT | dict(
        norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True, decoder_bias=False,
        global_attn_every_n_layers=2), OLD_MODERNBERT),
    "modernbert-base": ("ModernBertConfig", "ModernBertModel", MODERNBERT, {}),
    "deberta-v3": ("DebertaV2Config", "DebertaV2ForMaskedLM", DEBERTA | V3, {}),
    # one term (scale 1 / sqrt(2 d_k)), an unnormalised table, two token types, ReLU
    "deberta-c2p": ("DebertaV2Config", "DebertaV2ForMaskedLM", DEBERTA | V3 | dict(
        pos_att_type=["c2p"], norm_rel_ebd="none", type_vocab_size=2, hidden_act="relu"), {}),
    # DebertaV2Config's defaults: a learned position table, no relative attention
    "deberta-absolute": ("DebertaV2Config", "DebertaV2Model", DEBERTA, {}),
}


def _save(case: str, tmp_path):
    config_class, architecture, fields, rewrite = CASES[case]
    ref = save_random(architecture, getattr(transformers, config_class)(**fields), tmp_path / "hf")
    if rewrite:
        path = tmp_path / "hf" / "config.json"
        config = json.loads(path.read_text()) | rewrite
        path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return ref, architecture


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_import_matches_transformers_in_pytorch_and_onnx(case, cli, tmp_path):
    ref, architecture = _save(case, tmp_path)
    tokens, keep = right_padded(VOCAB, 0)
    if architecture.endswith("Model"):  # the encoder's output as the memory port
        from tfspec.backends.torch import build_module
        from tfspec.backends.torch.checkpoint import load_weights
        from tfspec.spec import load_spec

        ours = tmp_path / "hf-imported"
        assert cli("import", tmp_path / "hf", "-o", ours, "--quiet")[0] == 0
        model = build_module(load_spec(ours)).eval()
        load_weights(model, ours / "model.safetensors")
        want = ref(input_ids=tokens, attention_mask=keep.long()).last_hidden_state
        torch.testing.assert_close(model.run({"src": tokens}, ("memory",))["memory"][keep], want[keep], atol=1e-4, rtol=0)
        port = "memory"
    else:
        _, ours, want = assert_pytorch_import_matches(cli, tmp_path / "hf", ref, tokens, keep)
        port = "logits"
    code, out, err = cli("export", ours, "-o", tmp_path / "onnx")
    assert code == 0, out + err
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    got = onnx.run("model" if port == "logits" else "encoder", [port], {"src": tokens.numpy()})[0]
    np.testing.assert_allclose(got[keep], want[keep].numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", ["modernbert", "deberta-v3"])
def test_hf_export_round_trip_gives_the_original_outputs(case, cli, tmp_path):
    ref, architecture = _save(case, tmp_path)
    tokens, keep = right_padded(VOCAB, 0)
    assert_hf_round_trip(cli, tmp_path / "hf", ref, architecture, tokens, keep)


@pytest.mark.parametrize("config_class, fields, architecture", [
    ("ModernBertConfig", {}, "ModernBertForMaskedLM"),  # config.json without architectures: the first listed
    ("DebertaV2Config", {}, "DebertaV2Model"),
    ("DebertaV2Config", V3_BASE, "DebertaV2Model"),
])
def test_config_only_import_counts_as_transformers(config_class, fields, architecture, cli, tmp_path):
    assert_config_imports_at_count(cli, tmp_path / "hf", getattr(transformers, config_class)(**fields), architecture)


def test_bucket_rows_are_transformers_log_buckets():
    """The table row of every distance, for DeBERTa-v3's settings and an odd bucket count,
    against transformers' own ``make_log_bucket_position``."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    from tfspec.ir.positions import disentangled_rows

    for buckets, top in ((256, 512), (7, 20)):
        rows = disentangled_rows({"buckets": buckets, "max_distance": top})
        reach = len(rows) // 2
        distance = torch.arange(-4 * top, 4 * top + 1)
        want = (make_log_bucket_position(distance, buckets, top).long() + buckets).clamp(0, 2 * buckets - 1)
        np.testing.assert_array_equal(rows[np.clip(distance.numpy(), -reach, reach) + reach], want.numpy())


@pytest.mark.parametrize("case, change, needle", [
    ("modernbert", {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1.0e4}}},
     "rope_parameters.full_attention: {\"rope_type\": \"linear\""),
    ("modernbert", {"classifier_activation": "relu"}, "classifier_activation: \"relu\" is not supported"),
    ("modernbert", {"layer_types": ["full_attention"]}, "layer_types gives 1 layers; num_hidden_layers is 4"),
    ("modernbert", {"local_attention": 1}, "local_attention must be at least 2"),
    ("modernbert", {"norm_bias": "no"}, "norm_bias must be true or false, got \"no\""),
    ("deberta-v3", {"conv_kernel_size": 3}, "conv_kernel_size: 3 is not supported"),
    ("deberta-v3", {"position_biased_input": True}, "position_biased_input: true is not supported with relative"),
    ("deberta-v3", {"share_att_key": False}, "share_att_key: false is not supported"),
    ("deberta-v3", {"pos_att_type": ["p2p"]}, "pos_att_type: [\"p2p\"] is not supported"),
    ("deberta-v3", {"pos_att_type": None}, "pos_att_type: null is not supported with relative_attention"),
    ("deberta-v3", {"position_buckets": -1}, "position_buckets: -1 is not supported"),
    ("deberta-v3", {"norm_rel_ebd": "batch_norm"}, "norm_rel_ebd: \"batch_norm\" is not supported"),
    ("deberta-v3", {"max_relative_positions": 3}, "max_distance (3) must exceed buckets // 2 + 1 (3)"),
    ("deberta-v3", {"legacy": False}, "legacy: false is not supported with DebertaV2ForMaskedLM"),
    ("deberta-v3", {"embedding_size": 16}, "embedding_size: 16 is not supported"),
])
def test_unsupported_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, architecture, fields, _ = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | change
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config | {"architectures": [architecture]}))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_deberta_without_share_att_key_is_refused_as_transformers_reads_it(cli, tmp_path):
    """transformers reads an absent share_att_key as false (``getattr(config, "share_att_key",
    False)``: no config class default) and gives each layer position projections of its own,
    which tfspec does not compute: the refusal says so, not that the file wrote null."""
    fields = {k: v for k, v in (DEBERTA | V3).items() if k != "share_att_key"}
    config = transformers.DebertaV2Config(**fields)
    with torch.device("meta"):
        names = [n for n, _ in transformers.DebertaV2Model(config).named_parameters()]
    assert any(".pos_key_proj." in n for n in names)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(json.loads(config.to_json_string()) | {
        "architectures": ["DebertaV2Model"]}))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and "share_att_key is absent, which transformers reads as false" in err, err


SPEC = """family: encoder-only
vocab: 100
d_model: 32
heads: 4
d_ff: 64
"""
DISENTANGLED = SPEC + "positional: {kind: disentangled, buckets: 4, max_distance: 10}\n"


@pytest.mark.parametrize("text, needle", [
    (SPEC + "norm: post\nencoder: {layers: 1, block: [{kind: self_attention, input_norm: false}, ffn]}\n",
     "encoder.block[0].input_norm: input_norm: false leaves out the norm before a sub-layer"),
    (SPEC + "norm: pre\nresidual: parallel\nencoder: {layers: 1, block: [{kind: self_attention, input_norm: false},"
     " ffn]}\n", "which only norm: pre or sandwich with residual: sequential have"),
    (DISENTANGLED + "kv_heads: 2\nencoder: {layers: 1, block: [self_attention, ffn]}\n",
     "kv_heads (2) must equal heads (4)"),
    (DISENTANGLED + "encoder: {layers: 1, block: [{kind: self_attention, score: additive}, ffn]}\n",
     "disentangled positions add to dot-product scores"),
    (SPEC + "positional: {kind: disentangled, buckets: 4, max_distance: 3}\nencoder: {layers: 1, block: "
     "[self_attention, ffn]}\n", "positional.max_distance: max_distance (3) must exceed buckets // 2 + 1 (3)"),
    (SPEC + "positional: {kind: disentangled, max_distance: 40, terms: [c2p, c2p]}\nencoder: {layers: 1, block: "
     "[self_attention, ffn]}\n", "positional.terms: terms lists ['c2p', 'c2p']"),
    (SPEC + "positional: {kind: rotary, table_norm: true}\nencoder: {layers: 1, block: [self_attention, ffn]}\n",
     "table_norm shapes disentangled positions, but kind is rotary"),
    (SPEC + "encoder: {layers: 1, block: [{kind: self_attention, positions: {kind: disentangled, max_distance: 40}},"
     " ffn]}\n", "disentangled tables are one per stack"),
])
def test_bad_spec_fields_are_one_error_line(text, needle, cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = cli("validate", path)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err
