"""Task heads (``tfspec.spec.heads``): against the math written out here, against
transformers' BertForSequenceClassification / BertForTokenClassification, and exported to ONNX."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec.analysis.flops import analyze_flops
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import read_weights
from tfspec.backends.torch.finetune import head_parameters, load_body
from tfspec.cli.finetune import with_head
from tfspec.errors import TfspecError
from tfspec.ir import build_graph
from tfspec.spec import load_spec, spec_from_data

ENCODER = {"family": "encoder-only", "vocab": {"size": 60}, "d_model": 16, "heads": 2, "d_ff": 32,
           "positional": {"kind": "learned", "max_len": 32}, "segments": 2, "embed_norm": True,
           "encoder": {"layers": 2, "block": ["self_attention", "ffn"]}}
HEADS = {"first": {"kind": "sequence_classification", "classes": 3, "pooling": "first"},
         "first-itself": {"kind": "sequence_classification", "classes": 3, "pooling": "first"},
         "mean": {"kind": "sequence_classification", "classes": 3, "pooling": "mean"},
         "token": {"kind": "token_classification", "classes": 5}}


def model_with(head: str, seed: int = 0):
    spec = spec_from_data(ENCODER | {"pooler": head == "first", "head": HEADS[head]}, "test")
    torch.manual_seed(seed)
    model = build_module(spec).eval()
    with torch.no_grad():  # the classifier starts near 0: make its weights matter
        model.classifier.weight.normal_(0, 1)
        model.classifier.bias.normal_(0, 1)
    return model


def tokens():
    x = torch.randint(4, 60, (3, 9), generator=torch.Generator().manual_seed(1))
    x[1, 5:] = 0  # padding
    return x


@pytest.mark.parametrize("head", HEADS)
def test_head_equals_hand_written_math(head):
    model, x = model_with(head), tokens()
    memory = model.run({"src": x}, ("memory",))["memory"]
    w, b = model.classifier.weight, model.classifier.bias
    if head == "first":  # BERT: tanh(W_p h_0 + b_p), then the classifier
        pooler = model.encoder.pooler
        vector = torch.tanh(memory[:, 0] @ pooler.w_pool.T + pooler.b_pool)
    elif head == "first-itself":  # no pooler, no transform: the first position itself (XLM's sequence_summary)
        vector = memory[:, 0]
    elif head == "mean":  # the mean over real tokens only
        keep = (x != 0).float()
        vector = (memory * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
    else:
        vector = memory
    expected = vector @ w.T + b
    with torch.no_grad():
        assert torch.allclose(model(x), expected, atol=1e-5)
    assert model(x).shape == ((3, 3) if head != "token" else (3, 9, 5))


def test_heads_in_ir_reports():
    graph = build_graph(spec_from_data(ENCODER | {"head": HEADS["token"]}, "test"))
    assert graph.params["classifier.weight"].shape == (5, 16)
    assert "output.weight" not in graph.params and graph.ports["logits"] == "classifier"
    row = next(r for r in analyze_flops(graph, 10).layers if r.label == "classifier")
    assert row.forward == 2 * 10 * 16 * 5
    sequence = build_graph(spec_from_data(ENCODER | {"head": HEADS["mean"]}, "test"))
    assert next(r for r in analyze_flops(sequence, 10).layers if r.label == "classifier").forward == 2 * 16 * 3


@pytest.mark.parametrize("data, message", [
    ({"head": HEADS["token"], "head_transform": True}, "head_transform belongs to the masked-LM projection"),
    ({"head": {"kind": "sequence_clasification", "classes": 3}}, "did you mean 'sequence_classification'"),
    ({"head": {"kind": "token_classification", "classes": 1}}, "greater than or equal to 2"),
])
def test_bad_heads_are_refused(data, message):
    with pytest.raises(TfspecError, match=message):
        spec_from_data(ENCODER | data, "test")


@pytest.mark.parametrize("head", HEADS)
def test_onnx_export_equals_pytorch(head, tmp_path):
    from tfspec.backends.onnx import OnnxModel, export

    model, x = model_with(head), tokens()
    result = export(model, tmp_path)
    assert result.ok, [str(c) for c in result.checks]
    ours = OnnxModel(tmp_path, device="cpu").logits(src=x.numpy())
    with torch.no_grad():
        ref = model(x).numpy()
    keep = np.ones(3, bool) if head != "token" else (x != 0).numpy()
    assert ours.shape == ref.shape
    assert np.abs(ours - ref)[keep].max() < 1e-4


@pytest.mark.parametrize("task", ["sequence", "tokens"])
def test_imported_bert_head_equals_transformers(task, tmp_path, cli):
    transformers = pytest.importorskip("transformers")
    from hf_checkpoints import make_config, padded_batch

    torch.manual_seed(0)
    kind = "BertForSequenceClassification" if task == "sequence" else "BertForTokenClassification"
    hf = getattr(transformers, kind)(make_config("bert", num_labels=4)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if p.dim() == 1:
                p.normal_(0.0 if "bias" in name else 1.0, 0.2)
    body = transformers.BertModel(hf.config).eval()  # BertForTokenClassification has no pooler: keep a random one
    body.load_state_dict(hf.bert.state_dict(), strict=False)
    body.save_pretrained(tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "bert")[0] == 0
    spec = with_head(load_spec(tmp_path / "bert"), task, list("abcd"), "first" if task == "sequence" else None, None)
    model = build_module(spec).eval()
    assert load_body(model, read_weights(tmp_path / "bert" / "model.safetensors"), "bert") == []
    assert head_parameters(model) == {"classifier.weight", "classifier.bias"}
    with torch.no_grad():
        model.classifier.weight.copy_(hf.classifier.weight)
        model.classifier.bias.copy_(hf.classifier.bias)
        x, mask = padded_batch("bert")
        ours, theirs = model(x), hf(input_ids=x, attention_mask=mask.long()).logits
    keep = torch.ones(3, dtype=torch.bool) if task == "sequence" else mask
    assert (ours - theirs).abs()[keep].max() < 1e-4


def test_load_body_refuses_mismatched_shapes():
    model = model_with("mean")
    tensors = {n: p.detach() for n, p in model.named_parameters()}
    tensors["encoder.embed.weight"] = torch.zeros(61, 16)
    del tensors["encoder.layers.0.ffn.w_1"]
    with pytest.raises(TfspecError) as error:
        load_body(model, tensors, "ckpt")
    assert error.value.lines() == [
        "ckpt: the pretrained weights do not fit model (1 shapes differ, 1 missing): encoder.embed.weight: checkpoint "
        "has [61, 16], the model needs [60, 16]; missing encoder.layers.0.ffn.w_1 [32, 16]"]
