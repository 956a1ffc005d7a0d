"""Images end to end: real image directories, baselines in bits/dim, causal models, KV-cached
sampling and PNG grids, checked against references written here from their definitions."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.backends.torch.images import image_pairs, intensity_log_probs, prefix_ids, sample_images
from tfspec.cli import main
from tfspec.data.image_baselines import class_histogram_bits, histogram_bits, uniform_bits
from tfspec.data.images import load_split, prepare_images
from tfspec.errors import TfspecError
from tfspec.spec import Spec

TINY = """\
name: tiny-digits
family: decoder-only
image: {height: 8, width: 8, channels: 1, levels: 17}
vocab: {size: 28, pad_id: 17, bos_id: 17, eos_id: 17, unk_id: 17}
d_model: 16
heads: 2
d_ff: 32
dropout: 0.0
label_smoothing: 0.0
positional: {kind: none}
norm: pre
tie_embeddings: output
decoder: {layers: 1, block: [{kind: local_1d_self_attention, block: 8, memory: 8, causal: true}, ffn]}
"""


def rgb_spec(**changes) -> Spec:
    data = {"name": "rgb", "family": "decoder-only", "image": {"height": 4, "width": 4, "channels": 3, "levels": 16},
            "vocab": {"size": 17, "pad_id": 16, "bos_id": 16, "eos_id": 16, "unk_id": 16}, "d_model": 16,
            "heads": 2, "d_ff": 32, "dropout": 0.0, "positional": {"kind": "none"}, "norm": "pre",
            "decoder": {"layers": 2, "block": [{"kind": "local_1d_self_attention", "block": 12, "memory": 12,
                                                "causal": True}, "ffn"]}}
    return Spec.model_validate(data | changes)


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("digits")
    prepare_images("digits", out)
    return out


def test_digits_are_split_in_contiguous_blocks(digits):
    from sklearn.datasets import load_digits

    bunch = load_digits()
    got = {s: load_split(digits, s) for s in ("train", "valid", "test")}
    assert [len(got[s][0]) for s in got] == [1437, 180, 180]
    assert np.array_equal(got["test"][0][..., 0], bunch.images[-180:].astype(np.uint8))
    assert np.array_equal(got["valid"][1], bunch.target[1437:1617])
    assert got["train"][0].max() == 16 and got["train"][2]["classes"] == [str(k) for k in range(10)]


def test_photos_hold_out_whole_photographs(tmp_path):
    import skimage.data

    manifest = prepare_images("photos", tmp_path)
    train, _, _ = load_split(tmp_path, "train")
    test, labels, _ = load_split(tmp_path, "test")
    chelsea = skimage.data.chelsea()
    assert labels is None and test.shape[1:] == (32, 32, 3)
    assert np.array_equal(test[0], chelsea[:32, :32])  # the first patch of the first test photograph
    assert np.array_equal(test[14], chelsea[32:64, :32])  # 451 // 32 = 14 patches a row
    assert manifest["splits"]["test"]["images"] == (300 // 32) * (451 // 32) + (400 // 32) * (600 // 32)
    assert not {p.tobytes() for p in test} & {p.tobytes() for p in train}
    assert not set(manifest["photographs"]["test"]) & set(manifest["photographs"]["train"])


def test_baselines_equal_their_definitions():
    rng = np.random.default_rng(0)
    train, test = rng.integers(0, 5, (40, 2, 3, 1)), rng.integers(0, 5, (7, 2, 3, 1))
    assert uniform_bits(256) == 8.0 and uniform_bits(17) == math.log2(17)
    total = 0.0
    for image in test.reshape(7, -1):
        for pos, value in enumerate(image):
            count = sum(int(t.reshape(-1)[pos] == value) for t in train)
            total -= math.log2((count + 1) / (len(train) + 5))
    assert histogram_bits(train, test, 5) == pytest.approx(total / test.size, abs=1e-12)
    labels, test_labels = np.arange(40) % 2, np.arange(7) % 2
    by_class = sum(histogram_bits(train[labels == k], test[test_labels == k], 5) * (test_labels == k).sum()
                   for k in (0, 1)) / 7
    assert class_histogram_bits(train, labels, test, test_labels, 5) == pytest.approx(by_class, abs=1e-12)


def test_training_sequences_are_raster_order_after_a_prefix():
    spec = Spec.model_validate(__import__("yaml").safe_load(TINY))
    pixels = np.random.default_rng(0).integers(0, 17, (3, 8, 8, 1)).astype(np.uint8)
    pairs = image_pairs(spec, pixels, np.array([4, 0, 9]), 10)
    assert len(pairs) == 6 and [int(t[0]) for t in pairs.tgt] == [22, 18, 27, 17, 17, 17]
    r, c = 5, 3
    assert pairs.tgt[1][1 + r * 8 + c] == pixels[1, r, c, 0] == pairs.tgt[4][1 + r * 8 + c]
    with pytest.raises(TfspecError, match="use vocab.size 28"):
        prefix_ids(spec.model_copy(update={"vocab": spec.vocab.model_copy(update={"size": 20})}), [1], 10)


def test_changing_a_later_intensity_never_changes_an_earlier_distribution():
    torch.manual_seed(0)
    model = build_module(rgb_spec()).eval()
    x = torch.randint(0, 16, (2, 48))
    prefix = torch.full((2,), 16)
    with torch.no_grad():
        before = intensity_log_probs(model, x, prefix)
        for j in (0, 7, 11, 12, 30, 46):
            changed = x.clone()
            changed[:, j] = (x[:, j] + 5) % 16
            after = intensity_log_probs(model, changed, prefix)
            assert torch.equal(after[:, :j + 1], before[:, :j + 1]), j  # position j predicts x_j from x_<j
            assert not torch.allclose(after[:, j + 1], before[:, j + 1]), j


def test_cached_sampling_equals_full_passes():
    """Greedy sampling through the KV cache picks what argmax over full causal passes picks."""
    torch.manual_seed(1)
    model = build_module(rgb_spec()).eval()
    prefix = np.full(3, 16)
    ours = sample_images(model, prefix, temperature=0).reshape(3, -1)
    x = torch.zeros(3, 48, dtype=torch.int64)
    with torch.no_grad():
        for i in range(48):
            x[:, i] = intensity_log_probs(model, x, torch.from_numpy(prefix))[:, i].argmax(-1)
    assert np.array_equal(ours, x.numpy())
    drawn = sample_images(model, prefix, temperature=1.0, seed=5)
    assert np.array_equal(drawn, sample_images(model, prefix, temperature=1.0, seed=5))
    assert drawn.shape == (3, 4, 4, 3) and drawn.max() < 16


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def bits_by_hand(weights, pixels, prefixes) -> float:
    """-log2 p(x) per intensity (§4 of the Image Transformer), one image at a time: the model
    reads [prefix, x_0 .. x_{n-2}] and position i gives x_i's softmax over the 17 levels."""
    model = build_module(Spec.model_validate(__import__("yaml").safe_load(TINY))).eval()
    load_weights(model, weights)
    nats = 0.0
    with torch.no_grad():
        for image, prefix in zip(pixels, prefixes):
            x = torch.from_numpy(image.reshape(-1).astype(np.int64))
            logits = model(torch.cat([torch.tensor([int(prefix)]), x[:-1]])[None])[0, :, :17].double()
            nats -= torch.log_softmax(logits, -1)[torch.arange(len(x)), x].sum().item()
    return nats / pixels.size / math.log(2)


def test_digits_train_evaluate_sample(digits, tmp_path, capsys):
    from PIL import Image

    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    out = tmp_path / "run"
    code, _, err = run(capsys, "train", spec, "--data", digits, "--out", out, "--steps", 30, "--warmup", 10,
                       "--save-every", 30, "--quiet", "--threads", 1)
    assert code == 0, err
    code, text, err = run(capsys, "evaluate", out, "--quiet", "--threads", 1)
    assert code == 0, err
    result = json.loads((out / "eval" / "test.images.json").read_text())
    train, train_labels, _ = load_split(digits, "train")
    test, test_labels, _ = load_split(digits, "test")
    assert result["baselines"]["uniform"] == [f"{math.log2(17):.3f}"] * 2
    assert result["baselines"]["per-position histogram (train)"] == [
        f"{histogram_bits(train, test, 17):.3f}", f"{class_histogram_bits(train, train_labels, test, test_labels, 17):.3f}"]
    unconditional, conditional = result["models"][str(out)]["bits_per_dim"]
    assert unconditional < math.log2(17) and conditional < math.log2(17)  # 30 steps already learn something
    assert f"{unconditional:.3f}" in text
    code, _, err = run(capsys, "evaluate", out, "--quiet", "--threads", 1, "--limit", 3)
    assert code == 0, err
    limited = json.loads((out / "eval" / "test.images.json").read_text())
    spread = test[[0, len(test) // 2, len(test) - 1]]  # --limit spreads over the split: first, middle, last
    assert limited["images"] == 3
    assert limited["baselines"]["per-position histogram (train)"][0] == f"{histogram_bits(train, spread, 17):.3f}"
    spread_labels = test_labels[[0, len(test) // 2, len(test) - 1]]
    assert limited["models"][str(out)]["bits_per_dim"] == pytest.approx(
        [bits_by_hand(out / "checkpoints" / "step-0000030" / "model.safetensors", spread, prefixes) for prefixes in
         ([17] * 3, 18 + spread_labels)], rel=1e-5)
    code, _, err = run(capsys, "sample", out, "-o", tmp_path / "grid.png", "--count", 3, "--quiet", "--threads", 1)
    assert code == 0, err
    images = np.load(tmp_path / "grid.npy", allow_pickle=False)
    assert images.shape == (33, 8, 8, 1) and images.max() <= 16
    model = build_module(Spec.model_validate(__import__("yaml").safe_load(TINY)))
    load_weights(model, out / "checkpoints" / "step-0000030" / "model.safetensors")
    prefixes = np.array([18 + k for k in range(10) for _ in range(3)] + [17] * 3)  # a row per class, then bos
    assert np.array_equal(images, sample_images(model, prefixes, temperature=1.0, seed=0))  # --seed's default
    png = np.asarray(Image.open(tmp_path / "grid.png"))
    zoom, cell = 4, 33  # 32 // 8; cell pitch 8 * 4 + 1 gap
    assert png.shape == (11 * cell + 1, 3 * cell + 1)
    for i in (0, 17, 32):
        r, c = divmod(i, 3)
        expected = np.rint(images[i, ..., 0].astype(np.float64) * 255 / 16).astype(np.uint8).repeat(zoom, 0).repeat(zoom, 1)
        assert np.array_equal(png[1 + r * cell:r * cell + cell, 1 + c * cell:c * cell + cell], expected), i


@pytest.mark.parametrize("change", [{"classes": 5}, {"classes": [0, 1]}, {"splits": [1]}, {"splits": {"train": 5}},
                                    {"height": True}, {"levels": 0}, {"name": 5}],
                         ids=["classes number", "classes ints", "splits list", "split number", "height bool",
                              "levels 0", "name number"])
def test_forged_image_manifest_is_one_error_line(digits, tmp_path, capsys, change):
    """An image manifest is data: wrong types are named before any file is read (a number for
    classes, or a list for splits, were tracebacks)."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(digits, data)
    manifest = json.loads((data / "manifest.json").read_text())
    (data / "manifest.json").write_text(json.dumps(manifest | change))
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    code, _, err = run(capsys, "train", spec, "--data", data, "--out", tmp_path / "run", "--steps", 1, "--quiet")
    assert code == 2 and "corrupt image manifest" in err and err.count("\n") == 1, err


def test_train_without_warmup_takes_the_documented_default(digits, tmp_path, capsys):
    """`--warmup` left out means eq. 3's 4000 steps, as `train --help` says (it was None, a crash)."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    code, _, err = run(capsys, "train", spec, "--data", digits, "--out", tmp_path / "run", "--steps", 1, "--quiet",
                       "--threads", 1)
    assert code == 0, err
    assert json.loads((tmp_path / "run" / "run.json").read_text())["train"]["warmup"] == 4000


def test_bad_image_input_is_one_error_line(digits, tmp_path, capsys, monkeypatch):
    import shutil
    import sys

    broken = tmp_path / "broken"
    shutil.copytree(digits, broken)
    raw = (broken / "test.npy").read_bytes()
    (broken / "test.npy").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TfspecError, match="sha256 differs"):
        load_split(broken, "test")
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest["splits"]["test"]["files"]["test.npy"] = hashlib.sha256(raw[: len(raw) // 2]).hexdigest()
    (broken / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TfspecError, match="not a readable .npy"):
        load_split(broken, "test")
    code, _, err = run(capsys, "train", "specs/zoo/image-photos.yaml", "--data", digits, "--out", tmp_path / "r",
                       "--quiet")
    assert code == 2 and err.count("error:") == 1 and "does not match the data's" in err
    code, _, err = run(capsys, "sample", tmp_path, "-o", tmp_path / "g.png")
    assert code == 2 and "not a training run" in err
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    code, _, err = run(capsys, "data", "images", "digits", tmp_path / "d")
    assert code == 2 and err.strip() == "error: sklearn is not installed: install the images extra " \
                                        "(pip install 'tfspec[images]')"
