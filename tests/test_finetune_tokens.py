"""``tfspec finetune`` on a token task: ``tfspec data code-switch`` composing mixed English and
German lines from a tiny langid-shaped directory (lines of the shipped sample), the first-subword
alignment against references that do not use it, the loss, the ONNX export, and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import test_finetune
from test_finetune import one_error
from tfspec.backends.torch import build_module
from tfspec.backends.torch.finetune import IGNORE, loss_of, padded
from tfspec.backends.torch.training.tasks.classification import examples as _examples
from tfspec.data import read_split, sample_dir
from tfspec.data.clean import LETTER
from tfspec.data.codecs import encode_words, open_codec
from tfspec.spec import load_spec, spec_from_data

pretrained = test_finetune.pretrained  # the same small encoder and sentencepiece tokenizer
SIZES = {"train": 40, "dev": 10, "test": 10}
WORDS = ["Click", "the", "Einfügen", "button", "–", "Querverweis…", "ok"]


@pytest.fixture
def langid(tmp_path):
    """As `tfspec data langid` writes one: English and German lines of the sample, labelled en
    and de, each on its own page named after its split."""
    out = tmp_path / "langid"
    out.mkdir()
    for split, n in SIZES.items():
        pairs = read_split(sample_dir(), split)[:n]
        texts = [text for pair in pairs for text in pair]
        (out / f"{split}.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
        (out / f"{split}.labels").write_text("en\nde\n" * n, encoding="utf-8")
        (out / f"{split}.docs").write_text("".join(f"{split}/{i}\n" for i in range(len(texts))), encoding="utf-8")
    return out


@pytest.fixture
def data(langid, tmp_path, cli):
    out = tmp_path / "code-switch"
    code, _, err = cli("data", "code-switch", langid, out, *(f"--{s}={n}" for s, n in SIZES.items()))
    assert code == 0, err
    return out


def lines(directory, split, suffix):
    return (directory / f"{split}.{suffix}").read_text(encoding="utf-8").splitlines()


def fragments(words, tags, sentences, languages):
    """The split of ``words`` into consecutive slices of ``sentences`` (in order), each tagged
    with its sentence's language (``other`` for a word without a letter); None if there is none."""
    if not sentences:
        return [] if not words else None
    sentence, language = sentences[0].split(), languages[0]
    for n in range(min(len(words), 6), 0, -1):
        piece = words[:n]
        if any(sentence[i:i + n] == piece for i in range(len(sentence) - n + 1)) and tags[:n] == [
                language if LETTER.search(w) else "other" for w in piece]:
            rest = fragments(words[n:], tags[n:], sentences[1:], languages[1:])
            if rest is not None:
                return [piece] + rest
    return None


def test_code_switch_keeps_splits_apart_and_labels_every_word(langid, data, tmp_path, cli):
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["task"] == "tokens" and manifest["splits"]["test"]["pairs"] == 10
    for split in SIZES:
        texts, sources = lines(langid, split, "txt"), lines(langid, split, "labels")
        for text, tags, docs in zip(lines(data, split, "txt"), lines(data, split, "labels"), lines(data, split, "docs")):
            pages = docs.split()
            assert all(page.startswith(f"{split}/") for page in pages)  # only the same split of langid
            index = [int(page.split("/")[1]) for page in pages]
            found = fragments(text.split(), tags.split(), [texts[i] for i in index], [sources[i] for i in index])
            assert found is not None and len(found) == 2, (text, tags, docs)  # two languages: two fragments
            assert len({sources[i] for i in index}) == 2
    again = tmp_path / "again"
    assert cli("data", "code-switch", langid, again, *(f"--{s}={n}" for s, n in SIZES.items()))[0] == 0
    assert all((again / name).read_bytes() == (data / name).read_bytes() for name in manifest["files"])
    assert cli("data", "code-switch", langid, tmp_path / "seed1", "--seed", "1")[0] == 0
    assert lines(tmp_path / "seed1", "test", "txt")[:10] != lines(data, "test", "txt")


def test_first_subwords_match_transformers_word_ids(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "click", "the", "ein", "##fu", "##gen", "button", "–",
             "quer", "##verweis", "…", "ok", "##g", "e", "##n"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    reference = transformers.BertTokenizerFast(str(tmp_path / "vocab.txt"))
    reference.save_pretrained(tmp_path / "tok")
    codec = open_codec(tmp_path / "tok", spec_from_data({**test_finetune.ENCODER, "vocab": {"size": len(vocab)}},
                                                        "t").vocab)
    encoded = reference(WORDS, is_split_into_words=True)
    word_ids = encoded.word_ids()
    ids, firsts = encode_words(codec, WORDS)
    assert ids == encoded.input_ids and ids[0] == 2 and ids[-1] == 3
    assert firsts == [word_ids.index(w) for w in range(len(WORDS))]
    assert len(ids) > len(WORDS) + 2  # some words have several pieces


def test_first_subwords_match_sentencepiece_by_hand(pretrained):
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(pretrained / "tokenizer.model"))
    codec = open_codec(pretrained, load_spec(pretrained).vocab)
    pieces = [sp.encode(word) for word in WORDS]
    ids, firsts = encode_words(codec, WORDS)
    assert ids == [i for p in pieces for i in p] + [2]  # eos once, at the end
    assert firsts == list(np.cumsum([0] + [len(p) for p in pieces[:-1]]))
    assert ids == codec.encode(" ".join(WORDS))  # sentencepiece cuts a word alone as it does in the line
    assert max(map(len, pieces)) > 1


def test_loss_is_cross_entropy_at_first_subwords(pretrained):
    spec = spec_from_data(test_finetune.ENCODER | {"head": {"kind": "token_classification", "classes": 3}}, "enc")
    codec = open_codec(pretrained, spec.vocab)
    words = [WORDS, WORDS[2:5]]
    labels = [[0, 1, 2, 0, 1, 2, 0], [2, 2, 1]]
    ids, targets = _examples(codec, "tokens", words, labels, 64, None)
    torch.manual_seed(0)
    model = build_module(spec).eval()
    logits = model(padded(ids, model.pad_id))
    assert logits.shape[:2] == (2, len(ids[0]))
    picked, wanted = [], []
    for row, (line, line_labels) in enumerate(zip(words, labels)):
        start = 0
        for word, label in zip(line, line_labels):  # first subwords found without the code under test
            picked.append(logits[row, start])
            wanted.append(label)
            start += len(codec.sp.encode(word))
    expected = F.cross_entropy(torch.stack(picked), torch.tensor(wanted))
    assert torch.allclose(loss_of(logits, padded(targets, IGNORE)), expected, atol=1e-6)
    assert sum(t != IGNORE for line in targets for t in line) == 10


def test_token_task_end_to_end_and_its_onnx_export(pretrained, data, tmp_path, cli):
    from tfspec.backends.onnx import OnnxModel

    run = tmp_path / "run"
    code, out, err = cli("finetune", pretrained, data, "-o", run, "--epochs", "2", "--lr", "1e-3", "--quiet",
                         "--baseline")
    assert code == 0, err
    assert "epoch 2: dev accuracy" in err
    results = json.loads((run / "results.json").read_text())
    test_words = [line.split() for line in lines(data, "test", "txt")]
    assert results["task"] == "tokens" and results["steps"] == 4 and results["test_words"] == sum(map(len, test_words))
    assert "test word accuracy" in out and "on each word alone" in out
    names = json.loads((run / "labels.json").read_text())
    assert set(names) <= {"de", "en", "other"} and {"de", "en"} <= set(names)
    assert load_spec(run).head.kind == "token_classification"
    assert cli("export", run, "--weights", run / "model.safetensors", "-o", tmp_path / "onnx")[0] == 0
    exported = OnnxModel(tmp_path / "onnx", device="cpu")
    codec, right = open_codec(run, exported.spec.vocab), 0
    for words, tags in zip(test_words, lines(data, "test", "labels")):
        ids, firsts = encode_words(codec, words)
        logits = exported.logits(src=np.array([ids]))
        assert logits.shape == (1, len(ids), len(names))
        right += sum(names[c] == tag for c, tag in zip(logits[0, firsts].argmax(-1), tags.split()))
    assert right / results["test_words"] == pytest.approx(results["test_accuracy"])


def test_label_count_mismatch_refused(pretrained, data, tmp_path, cli):
    labels = lines(data, "train", "labels")
    labels[6] = labels[6].rsplit(" ", 1)[0]
    (data / "train.labels").write_text("\n".join(labels) + "\n")
    words = len(lines(data, "train", "txt")[6].split())
    message = one_error(cli, pretrained, data, "-o", tmp_path / "run")
    assert f"train.labels:7: {words - 1} labels for the {words} words of train.txt:7 (one label per word)" in message


def test_empty_line_refused(pretrained, data, tmp_path, cli):
    texts = lines(data, "dev", "txt")
    texts[2] = " "
    (data / "dev.txt").write_text("\n".join(texts) + "\n")
    assert "dev.txt:3: empty line" in one_error(cli, pretrained, data, "-o", tmp_path / "run")


def test_unknown_label_in_test_refused(pretrained, data, tmp_path, cli):
    labels = lines(data, "test", "labels")
    labels[4] = " ".join(["fr"] + labels[4].split()[1:])
    (data / "test.labels").write_text("\n".join(labels) + "\n")
    message = one_error(cli, pretrained, data, "-o", tmp_path / "run")
    assert "test.labels:5: label 'fr' is not among the" in message


def test_pooling_refused_for_a_token_task(pretrained, data, tmp_path, cli):
    assert "--pooling mean: a token task labels every word" in one_error(cli, pretrained, data, "-o",
                                                                         tmp_path / "run", "--pooling", "mean")
