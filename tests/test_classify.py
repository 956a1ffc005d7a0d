"""`tfspec classify` (issue 56): image files through an exported ViT, each prepared as the
checkpoint's own image processor says, against transformers' `pipeline("image-classification")`
on the same checkpoint and the same real photographs (scikit-image's)."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A random ViT classifier with named labels and a bicubic shortest-edge + crop processor, exported."""
    from PIL import Image
    from skimage import data

    root = tmp_path_factory.mktemp("classify")
    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=96, num_labels=3,
                                    id2label={0: "cat", 1: "coffee", 2: "astronaut"},
                                    label2id={"cat": 0, "coffee": 1, "astronaut": 2})
    model = transformers.ViTForImageClassification(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(root / "hf")
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}, resample=3).save_pretrained(root / "hf")
    images = []
    for name in ("chelsea", "coffee", "astronaut"):
        Image.fromarray(getattr(data, name)()).save(root / f"{name}.png")
        images.append(str(root / f"{name}.png"))
    from tfspec.cli import main

    assert main(["export", str(root / "hf"), "-o", str(root / "onnx")]) == 0
    return root, images


def test_classify_gives_transformers_pipeline_labels_and_scores(exported, cli):
    root, images = exported
    code, out, err = cli("classify", *images, "--model", root / "onnx", "--top-k", 3, "--json")
    assert code == 0, err
    ours = [json.loads(line) for line in out.splitlines()]
    pipe = transformers.pipeline("image-classification", model=str(root / "hf"))
    for image, row in zip(images, ours):
        theirs = pipe(image, top_k=3)
        assert row["image"] == image and [t["label"] for t in row["top"]] == [t["label"] for t in theirs]
        assert max(abs(a["score"] - b["score"]) for a, b in zip(row["top"], theirs)) < 1e-5, (row, theirs)


def test_classify_refuses_what_is_not_an_image_or_not_a_classifier(exported, cli, tmp_path):
    root, images = exported
    (tmp_path / "notes.txt").write_text("not an image", encoding="utf-8")
    code, out, err = cli("classify", tmp_path / "notes.txt", "--model", root / "onnx")
    assert code == 2 and err.startswith("error:") and "notes.txt" in err and len(err.splitlines()) == 1, err
    import shutil

    shutil.copytree(root / "onnx", tmp_path / "broken")
    for garbage in ("[1, 2]", "{not json", "\udcff"):
        (tmp_path / "broken" / "preprocessor_config.json").write_text(garbage, encoding="utf-8", errors="surrogateescape")
        code, out, err = cli("classify", images[0], "--model", tmp_path / "broken")
        assert code == 2 and "preprocessor_config.json" in err and len(err.splitlines()) == 1, err
    assert cli("export", "tiny", "-o", tmp_path / "text", "--no-check")[0] == 0
    code, out, err = cli("classify", images[0], "--model", tmp_path / "text")
    assert code == 2 and "not an image classifier" in err and len(err.splitlines()) == 1, err
