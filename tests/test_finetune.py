"""``tfspec finetune`` end to end on a tiny labelled set (English vs German lines of the shipped
sample), and its refusals: one ``error:`` line, exit 2."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights, save_weights
from tfspec.data import read_split, sample_dir, train_tokenizer
from tfspec.spec import load_spec, spec_from_data

ENCODER = {"name": "enc", "family": "encoder-only", "vocab": {"size": 300}, "d_model": 32, "heads": 2, "d_ff": 64,
           "label_smoothing": 0.0, "positional": {"kind": "learned", "max_len": 64},
           "encoder": {"layers": 1, "block": ["self_attention", "ffn"]}}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A directory as `tfspec import` writes one: spec.yaml, model.safetensors, tokenizer."""
    import yaml

    path = tmp_path_factory.mktemp("pretrained")
    (path / "spec.yaml").write_text(yaml.safe_dump(ENCODER), encoding="utf-8")
    torch.manual_seed(0)  # the same weights in every run: the accuracy floor below is checked over seeds
    save_weights(build_module(spec_from_data(ENCODER, "enc")), path / "model.safetensors")
    shutil.copyfile(train_tokenizer(sample_dir(), 300, out_dir=path), path / "tokenizer.model")
    return path


def labelled(out, sizes: dict[str, int]):
    """English and German lines of the sample, labelled en and de: ``sizes[split]`` pairs each."""
    out.mkdir()
    for split, n in sizes.items():
        pairs = read_split(sample_dir(), split)[:n]
        (out / f"{split}.txt").write_text("".join(f"{en}\n{de}\n" for en, de in pairs), encoding="utf-8")
        (out / f"{split}.labels").write_text("en\nde\n" * n, encoding="utf-8")
    return out


@pytest.fixture
def data(tmp_path):
    return labelled(tmp_path / "data", {"train": 40, "dev": 10, "test": 10})


def recounted_accuracy(run, data, split: str) -> float:
    """The accuracy on ``split`` counted outside the fine-tuning code: the saved spec, weights,
    tokenizer (sentencepiece itself) and labels.json loaded as a user would, each text classified
    alone (no batch, no padding; a long one cut to the positions, its eos kept, as finetune says)
    and its class name matched with the .labels file."""
    import sentencepiece

    spec = load_spec(run)
    model = build_module(spec).eval()
    load_weights(model, run / "model.safetensors")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(run / "tokenizer.model"))
    names = json.loads((run / "labels.json").read_text())
    texts = (data / f"{split}.txt").read_text(encoding="utf-8").splitlines()
    labels = (data / f"{split}.labels").read_text(encoding="utf-8").splitlines()
    right = 0
    with torch.no_grad():
        for text, label in zip(texts, labels, strict=True):
            ids = sp.encode(text)[:spec.positional.max_len - 1] + [spec.vocab.eos_id]  # finetune keeps the eos
            right += names[int(model(torch.tensor([ids])).argmax(-1))] == label
    return right / len(texts)


def char_ngram_reference(data) -> float:
    """The baseline as its docstring states it, built here from scikit-learn: TF-IDF of character
    1-3-grams within word boundaries and logistic regression, fitted on train, scored on test."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    def read(split):
        return [(data / f"{split}.{kind}").read_text(encoding="utf-8").splitlines() for kind in ("txt", "labels")]

    model = make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3)), LogisticRegression(max_iter=1000))
    model.fit(*read("train"))
    texts, labels = read("test")
    return sum(got == want for got, want in zip(model.predict(texts), labels)) / len(labels)


def test_finetune_end_to_end(pretrained, tmp_path, cli):
    """The accuracies finetune reports are those of the model it saves, recounted here; and the
    model beats always answering one class (0.5: the texts alternate en and de). Over 12 seeds
    of the pretrained weights and of fine-tuning these 26 steps reached test accuracy 0.80-0.89."""
    data = labelled(tmp_path / "data", {"train": 200, "dev": 10, "test": 50})
    run = tmp_path / "run"
    code, out, err = cli("finetune", pretrained, data, "-o", run, "--epochs", "2", "--lr", "1e-2", "--quiet",
                         "--baseline", "--threads", "1")
    assert code == 0, err
    results = json.loads((run / "results.json").read_text())
    assert "body loaded from" in err and f"epoch 2: dev accuracy {results['dev_accuracy'][-1]:.4f}" in err
    assert results["steps"] == 26 and len(results["dev_accuracy"]) == 2 and results["test_sentences"] == 100
    assert json.loads((run / "labels.json").read_text()) == ["de", "en"]
    assert results["test_accuracy"] == pytest.approx(recounted_accuracy(run, data, "test"), abs=1e-12)
    assert results["dev_accuracy"][-1] == pytest.approx(recounted_accuracy(run, data, "dev"), abs=1e-12)
    assert results["test_accuracy"] > 0.7  # the constant-class floor is 0.5
    assert results["baseline_test_accuracy"] == pytest.approx(char_ngram_reference(data), abs=1e-12)
    assert results["baseline_test_accuracy"] > 0.5
    assert f"{results['test_accuracy']:.4f}  fine-tuned model" in out
    assert f"{results['baseline_test_accuracy']:.4f}  character 1-3-gram" in out
    assert (run / "tokenizer.model").is_file() and list((run / "checkpoints").iterdir())
    code, out, err = cli("report", run)  # spec.yaml carries the head
    assert code == 0 and "classifier" in out


def test_an_interrupted_finetune_resumes_to_the_weights_of_an_uninterrupted_one(pretrained, data, tmp_path, cli,
                                                                               monkeypatch):
    """A stop request (Ctrl-C, SIGTERM) in epoch 1 finishes the step, saves and exits 130;
    --resume then ends at the weights, dev accuracies and test accuracy of a run never stopped
    (the epoch's remaining batches, AdamW's moments and the dropout RNG restored; the head
    initialised from --seed, whatever the process drew before)."""
    from safetensors.numpy import load_file

    from tfspec.backends.torch import finetune as finetuning

    argv = [pretrained, data, "--epochs", "2", "--lr", "1e-3", "--batch", "16", "--quiet"]
    assert cli("finetune", *argv, "-o", tmp_path / "whole")[0] == 0
    torch.rand(5)  # the global RNG moved on: --seed alone decides the new head's weights (it did not)

    class Stopped:
        requested = True

    with monkeypatch.context() as patch:
        patch.setattr(finetuning, "stop_requests", lambda: (Stopped, lambda: None))
        code, _, err = cli("finetune", *argv, "-o", tmp_path / "cut")
    weights = tmp_path / "cut" / "checkpoints" / "step-0000001" / "model.safetensors"
    assert code == 130 and f"stopped at step 1; checkpoint saved, --resume continues (the weights so far: {weights}" in err
    assert cli("finetune", *argv, "-o", tmp_path / "cut")[0] == 2  # not without --resume
    code, _, err = cli("finetune", *argv, "-o", tmp_path / "cut", "--resume")
    assert code == 0 and "resumed from" in err, err
    whole, cut = (json.loads((tmp_path / run / "results.json").read_text()) for run in ("whole", "cut"))
    assert {k: whole[k] for k in ("steps", "epochs", "dev_accuracy", "test_accuracy")} == {
        k: cut[k] for k in ("steps", "epochs", "dev_accuracy", "test_accuracy")}
    whole, cut = (load_file(tmp_path / run / "model.safetensors") for run in ("whole", "cut"))
    assert whole.keys() == cut.keys() and all((whole[k] == cut[k]).all() for k in whole)


def test_a_forged_checkpoint_state_is_refused_on_resume(pretrained, data, tmp_path, cli):
    run = tmp_path / "run"
    assert cli("finetune", pretrained, data, "-o", run, "--epochs", "1", "--quiet")[0] == 0
    meta = next((run / "checkpoints").iterdir()) / "trainer.json"
    meta.write_text(json.dumps(json.loads(meta.read_text()) | {"done": -3}))
    code, _, err = cli("finetune", pretrained, data, "-o", run, "--resume")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "trainer.json: not a fine-tuning checkpoint" in errors[0], err


def one_error(cli, *args) -> str:
    code, _, err = cli("finetune", *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_missing_labels_refused(pretrained, data, tmp_path, cli):
    (data / "dev.labels").unlink()
    assert "dev.labels: no such file" in one_error(cli, pretrained, data, "-o", tmp_path / "run")


def test_short_labels_refused(pretrained, data, tmp_path, cli):
    lines = (data / "train.labels").read_text().splitlines()
    (data / "train.labels").write_text("\n".join(lines[:-1]) + "\n")
    assert "train.txt has 80 lines but train.labels has 79" in one_error(cli, pretrained, data, "-o", tmp_path / "r")


def test_unknown_label_refused(pretrained, data, tmp_path, cli):
    (data / "test.labels").write_text("en\nde\n" * 9 + "en\nfr\n")
    message = one_error(cli, pretrained, data, "-o", tmp_path / "run")
    assert "test.labels:20: label 'fr' is not among the 2 labels train has (de, en)" in message


def test_mismatched_checkpoint_refused(pretrained, data, tmp_path, cli):
    import yaml

    other = tmp_path / "other"
    shutil.copytree(pretrained, other)
    (other / "spec.yaml").write_text(yaml.safe_dump(ENCODER | {"d_ff": 48}))
    message = one_error(cli, other, data, "-o", tmp_path / "run")
    assert "do not fit enc-classifier (3 shapes differ, 0 missing): encoder.layers.0.ffn.w_1: checkpoint has " \
           "[64, 32], the model needs [48, 32]" in message


def test_decoder_only_refused(data, tmp_path, cli):
    assert "fine-tuning adds a classification head to an encoder-only" in one_error(cli, "tiny", data, "-o",
                                                                                   tmp_path / "run")


def test_finetune_keeps_an_imported_heads_shape_and_names_the_labels(pretrained, data, tmp_path, cli):
    """PRETRAINED with a sequence head of its own (an imported RobertaForSequenceClassification's:
    a dense layer and tanh on the first position): the new head has that shape, fresh weights, and
    the data's labels as its class names, which `export --format hf` would write as id2label."""
    import yaml

    imported = tmp_path / "imported"
    shutil.copytree(pretrained, imported)
    head = {"kind": "sequence_classification", "classes": 3, "pooling": "first", "transform": {"activation": "tanh"}}
    (imported / "spec.yaml").write_text(yaml.safe_dump(ENCODER | {"head": head}), encoding="utf-8")
    code, _, err = cli("finetune", imported, data, "-o", tmp_path / "run", "--epochs", "1", "--quiet")
    assert code == 0, err
    spec = load_spec(tmp_path / "run")
    assert (spec.head.transform.activation, spec.head.pooling, spec.head.labels) == ("tanh", "first", ["de", "en"])
    model = build_module(spec)
    load_weights(model, tmp_path / "run" / "model.safetensors")
    assert {"head.transform.weight", "classifier.weight"} <= set(dict(model.named_parameters()))
