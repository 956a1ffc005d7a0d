"""`tfspec import` of RoFormer and ESM against transformers: small random models written by
``save_pretrained``, every weight perturbed, imported through the CLI; logits (or hidden states
and the pooled output) of the PyTorch backend and of the exported ONNX graph equal transformers'
within 1e-4 at the real tokens of a right-padded batch; ``export --format hf`` ->
``from_pretrained`` gives the original outputs back; default configurations (RoFormerConfig's,
EsmConfig's with a vocabulary, esm2_t6_8M_UR50D's shape) imported config-only count what
transformers counts, up to the differences ``report`` names (RoFormer's frozen sinusoid table,
ESM's contact head); configurations tfspec cannot compute are one error line naming the field.

RoFormer rotates interleaved pairs and tfspec halves (its query and key rows permuted), so a
wrong permutation, a rotary base or an epsilon read wrongly shows at 13 perturbed positions;
ESM-2's rotary base is set off its default for the same reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hf_checkpoints import assert_config_refused, assert_hf_round_trip, right_padded, save_random, transformers_count
from tfspec.backends.onnx import OnnxModel
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

ROFORMER = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                max_position_embeddings=40, layer_norm_eps=1e-3, pad_token_id=0)
"""junnyu/roformer_chinese_base's shape, shrunk; epsilon off its default."""
ESM2 = dict(vocab_size=33, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=40, layer_norm_eps=1e-3, pad_token_id=1, mask_token_id=32,
            position_embedding_type="rotary", rope_theta=100.0, emb_layer_norm_before=False, token_dropout=False)
"""ESM-2's settings, shrunk (its 33-token vocabulary, <pad> 1, <mask> 32), without token_dropout
(refused); the rotary base off its default."""
ESM1B = ESM2 | dict(position_embedding_type="absolute", emb_layer_norm_before=True)
"""ESM-1b's: learned positions from row pad + 1 = 2, a LayerNorm on the embeddings."""
ESM2_8M = {"architectures": ["EsmForMaskedLM"], "attention_probs_dropout_prob": 0.0, "classifier_dropout": None,
           "emb_layer_norm_before": False, "esmfold_config": None, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
           "hidden_size": 320, "initializer_range": 0.02, "intermediate_size": 1280, "is_folding_model": False,
           "layer_norm_eps": 1e-05, "mask_token_id": 32, "max_position_embeddings": 1026, "model_type": "esm",
           "num_attention_heads": 20, "num_hidden_layers": 6, "pad_token_id": 1, "position_embedding_type": "rotary",
           "token_dropout": True, "torch_dtype": "float32", "transformers_version": "4.42.4", "use_cache": True,
           "vocab_list": None, "vocab_size": 33}
"""facebook/esm2_t6_8M_UR50D's config.json."""
CASES = {  # case: (config class, architecture, fields, pad)
    # 16-wide embeddings under 32-wide layers: projected up, the head's dense layer back down
    "roformer-mlm": ("RoFormerConfig", "RoFormerForMaskedLM", ROFORMER | dict(embedding_size=16), 0),
    "roformer": ("RoFormerConfig", "RoFormerModel", ROFORMER | dict(hidden_act="gelu_new"), 0),
    "roformer-narrow": ("RoFormerConfig", "RoFormerModel", ROFORMER | dict(embedding_size=16), 0),
    "esm2-mlm": ("EsmConfig", "EsmForMaskedLM", ESM2, 1),
    "esm2": ("EsmConfig", "EsmModel", ESM2, 1),
    "esm1b-mlm": ("EsmConfig", "EsmForMaskedLM", ESM1B, 1),
    "esm2-untied": ("EsmConfig", "EsmForMaskedLM", ESM2 | dict(tie_word_embeddings=False), 1),
}
TASKS = {  # case: (config class, architecture, fields, pad)
    # the classifier's dense layer applies hidden_act: ReLU, not a fixed tanh or GELU
    "roformer-sequence": ("RoFormerConfig", "RoFormerForSequenceClassification",
                          ROFORMER | dict(hidden_act="relu", embedding_size=16, num_labels=3), 0),
    "roformer-span": ("RoFormerConfig", "RoFormerForQuestionAnswering", ROFORMER, 0),
    "esm2-sequence": ("EsmConfig", "EsmForSequenceClassification", ESM2 | dict(num_labels=3), 1),
    "esm1b-token": ("EsmConfig", "EsmForTokenClassification", ESM1B | dict(num_labels=5), 1),
}


def _save(case: str, path):
    config_class, architecture, fields, pad = (CASES | TASKS)[case]
    return save_random(architecture, getattr(transformers, config_class)(**fields), path), architecture, pad


@torch.no_grad()
def _outputs(model, tokens, keep) -> dict[str, torch.Tensor]:
    """transformers' outputs named as tfspec's ports (question answering's start and end stacked)."""
    out = model(input_ids=tokens, attention_mask=keep.long())
    if hasattr(out, "start_logits"):
        return {"logits": torch.stack([out.start_logits, out.end_logits], -1)}
    if hasattr(out, "logits"):
        return {"logits": out.logits}
    pooled = {"pooled": out.pooler_output} if getattr(out, "pooler_output", None) is not None else {}
    return {"memory": out.last_hidden_state, **pooled}


def _assert_close(got, want: torch.Tensor, keep) -> None:
    got = torch.as_tensor(np.asarray(got))
    if want.dim() == 3:  # real tokens only: padded positions are compared nowhere
        got, want = got[keep], want[keep]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", [*CASES, *TASKS])
@torch.no_grad()
def test_import_matches_transformers_in_pytorch_and_onnx(case, cli, tmp_path):
    ref, _, pad = _save(case, tmp_path / "hf")
    tokens, keep = right_padded(ref.config.vocab_size, pad)
    want = _outputs(ref, tokens, keep)
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    got = model.run({"src": tokens}, tuple(want))
    for name, value in want.items():
        _assert_close(got[name], value, keep)
    code, out, err = cli("export", tmp_path / "ours", "-o", tmp_path / "onnx")
    assert code == 0, out + err
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    for name, value in want.items():
        _assert_close(onnx.run("encoder" if name == "memory" else "model", [name], {"src": tokens.numpy()})[0],
                      value, keep)


@pytest.mark.parametrize("case", ["roformer-mlm", "roformer-sequence", "esm2-untied", "esm1b-mlm", "esm2-sequence"])
def test_hf_export_round_trip_gives_the_original_outputs(case, cli, tmp_path):
    ref, architecture, pad = _save(case, tmp_path / "hf")
    tokens, keep = right_padded(ref.config.vocab_size, pad, seed=7)
    if architecture.endswith("SequenceClassification"):
        keep = slice(None)  # one row of logits per text
    assert_hf_round_trip(cli, tmp_path / "hf", ref, architecture, tokens, keep)


def test_untied_esm_head_reads_its_own_output_matrix(cli, tmp_path):
    """tie_word_embeddings false: lm_head.decoder.weight is a matrix of its own (and perturbed
    apart from the embedding), which the spec's untied output projection holds."""
    ref, _, _ = _save("esm2-untied", tmp_path / "hf")
    assert not torch.equal(ref.lm_head.decoder.weight, ref.esm.embeddings.word_embeddings.weight)
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    assert load_spec(tmp_path / "ours").tie_embeddings == "none"


@pytest.mark.parametrize("config_class, fields, architecture, named", [
    ("RoFormerConfig", {}, "RoFormerModel", "sinusoid"),
    ("RoFormerConfig", {}, "RoFormerForMaskedLM", "sinusoid"),
    ("RoFormerConfig", dict(embedding_size=128, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
     "RoFormerForSequenceClassification", "sinusoid"),  # narrower embeddings, projected
    ("EsmConfig", dict(vocab_size=33, pad_token_id=1), "EsmModel", "contact"),  # absolute positions, a pooler
    ("EsmConfig", {k: v for k, v in ESM2_8M.items() if k not in ("architectures", "model_type")}
     | dict(token_dropout=False), "EsmForMaskedLM", "contact"),
])
def test_config_only_import_counts_as_transformers(config_class, fields, architecture, named, cli, tmp_path):
    """Each count differs from transformers' by one convention, which ``report`` names: the
    sinusoid table RoFormer keeps as a frozen parameter, the contact head every ESM class holds."""
    config = getattr(transformers, config_class)(**fields)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config.to_dict() | {"architectures": [architecture]}))
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, err = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0, err
    params = json.loads(out)["params"]
    [difference] = params["transformers"]["differences"]
    assert named in difference["what"]
    assert params["transformers"]["total"] == params["total"] + difference["count"] == transformers_count(
        config, architecture)


def _config(case: str) -> dict:
    config_class, architecture, fields, _ = (CASES | TASKS)[case]
    return json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | {
        "architectures": [architecture]}


@pytest.mark.parametrize("config, needle", [
    (_config("roformer-mlm") | {"rotary_value": True}, "rotary_value: true is not supported: transformers' RoFormer "
                                                        "then rotates the values"),
    (_config("roformer-mlm") | {"rotary_value": "false"}, "rotary_value must be true or false"),
    (_config("roformer") | {"is_decoder": True}, "is_decoder: true is not supported"),
    (_config("roformer") | {"type_vocab_size": 0}, "type_vocab_size must be at least 1"),
    (_config("roformer") | {"position_embedding_type": "absolute"}, "unknown field position_embedding_type"),
    (_config("roformer") | {"embedding_size": 16.5}, "embedding_size must be an integer"),
    (ESM2_8M, "token_dropout: true is not supported: transformers' ESM then zeroes the embeddings of mask_token_id"),
    (_config("esm2-mlm") | {"position_embedding_type": "relative_key"},
     "position_embedding_type: \"relative_key\" is not supported"),
    (_config("esm1b-mlm") | {"pad_token_id": None}, "pad_token_id: null is not supported with position_embedding_type"),
    (_config("esm1b-mlm") | {"max_position_embeddings": 2}, "max_position_embeddings (2) must exceed pad_token_id + 1"),
    (_config("esm2-mlm") | {"vocab_size": None}, "vocab_size must be an integer, got null"),
    (_config("esm2-mlm") | {"is_folding_model": True}, "is_folding_model: true is not supported"),
    (_config("esm2-mlm") | {"hidden_act": "relu"}, "hidden_act: \"relu\" is not supported"),
    (_config("esm2-mlm") | {"emb_layer_norm_before": 1}, "emb_layer_norm_before must be true or false"),
    (_config("esm2-mlm") | {"architectures": ["EsmForQuestionAnswering"]},
     "'EsmForQuestionAnswering' is not supported: transformers has no such class"),
])
def test_unsupported_configs_are_refused_by_name(config, needle, cli, tmp_path):
    assert_config_refused(cli, tmp_path, config, needle)
