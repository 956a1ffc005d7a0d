"""`tfspec import` of fine-tuned encoders' task heads against transformers: *ForSequenceClassification,
*ForTokenClassification and *ForQuestionAnswering of BERT, RoBERTa, XLM-RoBERTa, ALBERT, DeBERTa-v2,
ELECTRA, DistilBERT and ModernBERT (its prediction head before every classifier, cls or mean pooling), small random models (every weight perturbed, heads included) written by
``save_pretrained`` with named labels, imported through the CLI: logits of the PyTorch backend and of
the exported ONNX graph equal transformers' (sequence: one row per text; token and question answering:
at the real positions of a right-padded batch; question answering's start and end logits stacked
last), the labels and problem_type are kept, ``export --format hf`` -> ``from_pretrained`` gives the
original logits back, and a fine-tune starts from an imported classifier."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hf_checkpoints import assert_config_refused, perturb, right_padded
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 100, 0
SMALL = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             layer_norm_eps=1e-3, pad_token_id=PAD)
FAMILIES = {
    "Bert": ("BertConfig", SMALL | dict(max_position_embeddings=40)),
    # positions from row pad + 1 = 1; one token type
    "Roberta": ("RobertaConfig", SMALL | dict(max_position_embeddings=42, type_vocab_size=1)),
    "XLMRoberta": ("XLMRobertaConfig", SMALL | dict(max_position_embeddings=42, type_vocab_size=1)),
    "Albert": ("AlbertConfig", SMALL | dict(max_position_embeddings=40, embedding_size=16, hidden_act="gelu")),
    # relative attention as deberta-v3 has it; the ContextPooler's tanh instead of its default GELU
    "DebertaV2": ("DebertaV2Config", SMALL | dict(
        max_position_embeddings=40, relative_attention=True, position_biased_input=False, pos_att_type=["c2p", "p2c"],
        position_buckets=8, max_relative_positions=16, norm_rel_ebd="layer_norm", share_att_key=True,
        pooler_hidden_act="tanh")),
    "Electra": ("ElectraConfig", SMALL | dict(max_position_embeddings=40, embedding_size=16)),
    "DistilBert": ("DistilBertConfig", dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                                            max_position_embeddings=40, pad_token_id=PAD)),
    # global, local (3 tokens each side), global layers; the prediction head's SiLU (the layers' GELU),
    # its bias and LayerNorm bias on, mean pooling (test_modernbert_cls_pooling: the first position)
    "ModernBert": ("ModernBertConfig", dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        local_attention=6, max_position_embeddings=40, pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
        cls_token_id=1, sep_token_id=2, global_attn_every_n_layers=2, norm_eps=1e-3, norm_bias=True,
        classifier_activation="silu", classifier_bias=True, classifier_pooling="mean")),
}
"""family -> (config class, fields): shapes shrunk, epsilons off their defaults."""
TASKS = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
LABELS = {"ForSequenceClassification": ["negative", "neutral", "positive"],
          "ForTokenClassification": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]}
CASES = [(family, task) for family in FAMILIES for task in TASKS]


def save(family: str, task: str, path, **fields):
    """A random ``family`` + ``task`` model with named labels, written to ``path``; returned in eval mode."""
    config_class, shape = FAMILIES[family]
    labels = LABELS.get(task)
    named = {"id2label": dict(enumerate(labels)), "label2id": {n: i for i, n in enumerate(labels)}} if labels else {}
    config = getattr(transformers, config_class)(**shape | named | fields)
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    model = perturb(getattr(transformers, family + task)(config).eval())
    model.save_pretrained(path)
    return model


def expected(model, task: str, tokens, keep):
    """transformers' logits: (B, classes), or (B, S, classes), or start and end stacked (B, S, 2)."""
    with torch.no_grad():
        out = model(input_ids=tokens, attention_mask=keep.long())
    return torch.stack([out.start_logits, out.end_logits], -1) if task == "ForQuestionAnswering" else out.logits


def imported(cli, directory):
    ours = directory.with_name(directory.name + "-imported")
    code, _, err = cli("import", directory, "-o", ours, "--quiet")
    assert code == 0, err
    return ours


@pytest.mark.parametrize("family,task", CASES)
def test_logits_match_transformers_in_pytorch_and_onnx(family, task, cli, tmp_path):
    from tfspec.backends.onnx import OnnxModel

    ref = save(family, task, tmp_path / "hf")
    tokens, keep = right_padded(VOCAB, PAD)
    want = expected(ref, task, tokens, keep)
    ours = imported(cli, tmp_path / "hf")
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    real = slice(None) if task == "ForSequenceClassification" else keep
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[real], want[real], atol=1e-4, rtol=0)
    code, out, err = cli("export", ours, "-o", tmp_path / "onnx")
    assert code == 0, out + err
    got = OnnxModel(tmp_path / "onnx", device="cpu").logits(src=tokens.numpy())
    np.testing.assert_allclose(got[real], want[real].numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("family,task", CASES)
def test_round_trip_gives_the_original_logits_and_labels(family, task, cli, tmp_path):
    ref = save(family, task, tmp_path / "original")
    ours = imported(cli, tmp_path / "original")
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "--format", "hf",
                         "-o", tmp_path / "exported")
    assert code == 0 and "parity: ok" in out, out + err
    exported = json.loads((tmp_path / "exported" / "config.json").read_text())
    # the family imported from is written back (ELECTRA's token and span heads over narrower embeddings also
    # compute what ALBERT's do without shared layers; XLM-RoBERTa's classes are RoBERTa's)
    name = family
    assert exported["architectures"] == [name + task]
    tokens, keep = right_padded(VOCAB, PAD)
    back = getattr(transformers, name + task).from_pretrained(tmp_path / "exported").eval()
    assert (back.config.id2label, back.config.label2id) == (ref.config.id2label, ref.config.label2id)
    real = slice(None) if task == "ForSequenceClassification" else keep
    torch.testing.assert_close(expected(back, task, tokens, keep)[real], expected(ref, task, tokens, keep)[real],
                               atol=1e-4, rtol=0)


def assert_sequence_logits(cli, directory, ref):
    """``directory`` (a *ForSequenceClassification ``ref`` wrote) imports to transformers' logits
    in PyTorch, one row per text of a right-padded batch; returns the imported directory."""
    tokens, keep = right_padded(VOCAB, PAD)
    ours = imported(cli, directory)
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), expected(ref, "ForSequenceClassification", tokens, keep),
                                   atol=1e-4, rtol=0)
    return ours


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_modernbert_pools_as_classifier_pooling_says(pooling, cli, tmp_path):
    """ModernBERT's sequence class without the head's bias, pooling the first position or the mean;
    read back from its own export, which writes the pooling and the head's activation and bias."""
    ref = save("ModernBert", "ForSequenceClassification", tmp_path / "hf", classifier_pooling=pooling,
               classifier_bias=False)
    ours = assert_sequence_logits(cli, tmp_path / "hf", ref)
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "--format", "hf",
                         "-o", tmp_path / "exported")
    assert code == 0 and "parity: ok" in out, out + err
    exported = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert (exported["classifier_pooling"], exported["classifier_activation"], exported["classifier_bias"]) == (
        pooling, "silu", False)


def test_labels_and_problem_type_are_kept(cli, tmp_path):
    save("Roberta", "ForSequenceClassification", tmp_path / "hf", problem_type="multi_label_classification")
    head = load_spec(imported(cli, tmp_path / "hf")).head
    assert (head.kind, head.classes, head.labels, head.problem, head.transform.activation) == (
        "sequence_classification", 3, LABELS["ForSequenceClassification"], "multi_label", "tanh")


def test_regression_head_has_one_output(cli, tmp_path):
    """num_labels 1 (STS-B's regression): one score per text, as transformers computes it."""
    ref = save("Bert", "ForSequenceClassification", tmp_path / "hf", id2label=None, label2id=None, num_labels=1)
    assert_sequence_logits(cli, tmp_path / "hf", ref)


@pytest.mark.parametrize("family,change,needle", [
    ("ModernBert", {"classifier_pooling": "max"}, "classifier_pooling: \"max\" is not supported"),
    ("ModernBert", {"classifier_activation": "sigmoid"}, "classifier_activation: \"sigmoid\" is not supported"),
    ("DebertaV2", {"pooler_hidden_size": 16}, "pooler_hidden_size (16) must equal hidden_size (32)"),
    ("Bert", {"id2label": {"0": "a", "2": "b"}}, "id2label's ids must be 0 .. 1"),
    ("Bert", {"num_labels": 3}, "num_labels (3) and id2label (5 labels) disagree"),
    ("Bert", {"problem_type": "ranking"}, "problem_type: \"ranking\" is not supported")])
def test_bad_labels_are_refused_by_name(family, change, needle, cli, tmp_path):
    config_class, shape = FAMILIES[family]
    config = json.loads(getattr(transformers, config_class)(**shape | {
        "id2label": dict(enumerate(LABELS["ForTokenClassification"]))}).to_json_string())
    config |= {"architectures": [family + "ForTokenClassification"]} | change
    if family in ("DebertaV2", "ModernBert"):
        config["architectures"] = [family + "ForSequenceClassification"]
    assert_config_refused(cli, tmp_path, config, needle)
