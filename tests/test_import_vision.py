"""`tfspec import` of ViT, DeiT and DINOv2 against transformers: small random models written by
``save_pretrained`` (every weight perturbed), imported through the CLI; on real photographs
(scikit-image's astronaut, chelsea and coffee) prepared by tfspec's numpy preprocessing, the logits
(or last hidden states and pooled output of the base models) of the PyTorch backend and of the
exported ONNX graph equal transformers' within 1e-4, at the training size and at a larger,
non-square one (transformers with ``interpolate_pos_encoding=True``); ``export --format hf``
gives back the original outputs; each configuration class's defaults imported config-only count
what transformers counts; the preprocessing equals transformers' processors within 1e-5; and
configurations tfspec cannot compute are one error line naming the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hf_checkpoints import assert_config_imports_at_count, assert_config_refused, save_random
from tfspec.backends.onnx import OnnxModel
from tfspec.data.pixels import Preprocessing

transformers = pytest.importorskip("transformers")
skimage_data = pytest.importorskip("skimage.data")

SIZE, PATCH = 32, 8
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=SIZE, patch_size=PATCH,
            layer_norm_eps=1e-3, num_labels=3, id2label={0: "cat", 1: "coffee", 2: "astronaut"},
            label2id={"cat": 0, "coffee": 1, "astronaut": 2})
"""A 4 x 4 patch grid; epsilon off the default, so that an importer ignoring it computes otherwise."""
CASES = {
    "vit-classifier": ("ViTConfig", "ViTForImageClassification", dict(intermediate_size=48, qkv_bias=False)),
    "vit-model": ("ViTConfig", "ViTModel", dict(intermediate_size=48)),
    "deit-teacher": ("DeiTConfig", "DeiTForImageClassificationWithTeacher", dict(intermediate_size=48)),
    "deit-classifier": ("DeiTConfig", "DeiTForImageClassification", dict(intermediate_size=40, hidden_act="relu")),
    "dinov2-classifier": ("Dinov2Config", "Dinov2ForImageClassification", dict(use_swiglu_ffn=True)),
    "dinov2-model": ("Dinov2Config", "Dinov2Model", dict(mlp_ratio=3)),
}
SIZES = ((SIZE, SIZE), (SIZE + PATCH, SIZE + 3 * PATCH))
"""The training size, and a 5 x 7 grid: the position table resized bicubically."""


def _images():
    return [skimage_data.astronaut(), skimage_data.chelsea(), skimage_data.coffee()]


def _pixels(height: int, width: int) -> np.ndarray:
    return Preprocessing(size=(height, width), resample=3).batch(_images())


def _save(case: str, tmp_path):
    config_class, architecture, fields = CASES[case]
    ref = save_random(architecture, getattr(transformers, config_class)(**TINY | fields), tmp_path / "hf")
    return ref, architecture


def _expected(ref, architecture: str, pixels: np.ndarray) -> dict[str, np.ndarray]:
    """transformers' outputs by tfspec port, positions resized where the image is of another size."""
    resize = {} if architecture.startswith("Dinov2") else {"interpolate_pos_encoding": True}
    with torch.no_grad():
        out = ref(pixel_values=torch.from_numpy(pixels), **resize)
    if hasattr(out, "logits"):
        return {"logits": out.logits.numpy()}
    ports = {"memory": out.last_hidden_state.numpy()}
    return ports | ({"pooled": out.pooler_output.numpy()} if architecture.startswith(("ViT", "DeiT")) else {})


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_import_matches_transformers_in_pytorch_and_onnx(case, cli, tmp_path):
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.spec import load_spec

    ref, architecture = _save(case, tmp_path)
    ours = tmp_path / "imported"
    code, _, err = cli("import", tmp_path / "hf", "-o", ours, "--quiet")
    assert code == 0, err
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "-o", tmp_path / "onnx")
    assert code == 0 and "parity: ok" in out, out + err
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    for height, width in SIZES:
        pixels = _pixels(height, width)
        want = _expected(ref, architecture, pixels)
        got = model.run({"pixel_values": torch.from_numpy(pixels)}, tuple(want))
        from_onnx = dict(zip(want, onnx.run("model", list(want), {"pixel_values": pixels})))
        for port, value in want.items():
            np.testing.assert_allclose(got[port].numpy(), value, atol=1e-4, rtol=0, err_msg=f"{port} {height}x{width}")
            np.testing.assert_allclose(from_onnx[port], value, atol=1e-4, rtol=0, err_msg=f"onnx {port}")


@pytest.mark.parametrize("case", ["vit-model", "deit-teacher", "dinov2-classifier"])
@torch.no_grad()
def test_hf_export_round_trip_gives_the_original_outputs(case, cli, tmp_path):
    ref, architecture = _save(case, tmp_path)
    imported, exported = tmp_path / "imported", tmp_path / "exported"
    assert cli("import", tmp_path / "hf", "-o", imported, "--quiet")[0] == 0
    code, out, err = cli("export", imported, "--weights", imported / "model.safetensors", "--format", "hf",
                         "-o", exported)
    assert code == 0 and "parity: ok" in out, out + err
    config = json.loads((exported / "config.json").read_text())
    assert config["architectures"] == [architecture]
    back = getattr(transformers, architecture).from_pretrained(exported).eval()
    pixels = _pixels(SIZE, SIZE)
    for port, value in _expected(back, architecture, pixels).items():
        np.testing.assert_allclose(value, _expected(ref, architecture, pixels)[port], atol=1e-4, rtol=0)
    if "id2label" in config:
        assert config["id2label"] == {"0": "cat", "1": "coffee", "2": "astronaut"}


@pytest.mark.parametrize("config_class, fields, architecture", [
    ("ViTConfig", {}, "ViTModel"),  # ViT-B/16 at 224: its pooler too
    ("ViTConfig", {}, "ViTForImageClassification"),
    ("DeiTConfig", {}, "DeiTForImageClassificationWithTeacher"),
    ("Dinov2Config", {}, "Dinov2Model"),  # the mask token counted
    ("Dinov2Config", {"use_swiglu_ffn": True}, "Dinov2ForImageClassification"),
])
def test_config_only_import_counts_as_transformers(config_class, fields, architecture, cli, tmp_path):
    config = getattr(transformers, config_class)(**fields)
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


@pytest.mark.parametrize("processor, fields", [
    ("ViTImageProcessorPil", {}),  # ViTImageProcessor without torchvision: bilinear to 224 x 224
    ("ViTImageProcessorPil", {"size": {"height": 40, "width": 56}, "resample": 3}),
    ("DeiTImageProcessorPil", {}),  # bicubic to 256 x 256, a 224 x 224 centre crop
    ("BitImageProcessorPil", {}),  # DINOv2's: the shortest edge to 256, crop, CLIP's mean and std
])
def test_preprocessing_equals_transformers_processor(processor, fields):
    from sklearn.datasets import load_sample_images

    theirs = getattr(transformers, processor)(**fields)
    ours = Preprocessing.from_config(theirs.to_dict(), processor)
    for image in _images() + list(load_sample_images().images):
        want = theirs(image, return_tensors="np")["pixel_values"][0]
        got = ours(image)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_report_prints_the_image_encoder_rows(cli, tmp_path):
    _save("deit-teacher", tmp_path)
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, err = cli("report", tmp_path / "ours", "--n", SIZE // PATCH * (SIZE // PATCH) + 2)
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split()[1:2] == ["patch_embedding"])
    assert "O(n·d)" in row  # linear in the patches, and so in the pixels
    flops = json.loads(cli("report", tmp_path / "ours", "--n", 18, "--format", "json")[1])["layers"]
    patch = next(r for r in flops if r["layer"] == "patch_embedding")
    assert patch["forward_flops"] == 2 * 16 * 32 * 3 * PATCH * PATCH  # 16 patches, d 32, C p^2 = 192


@pytest.mark.parametrize("case, change, needle", [
    ("vit-model", {"image_size": [32, 48]}, "image_size: [32, 48] is not supported"),
    ("vit-model", {"pooler_act": "relu"}, "pooler_act: \"relu\" is not supported"),
    ("vit-model", {"pooler_output_size": 16}, "pooler_output_size (16) must equal hidden_size (32)"),
    ("vit-model", {"patch_size": 64}, "patch_size (64) must be 1 .. image_size (32)"),
    ("vit-model", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("vit-model", {"use_mask_token": True}, "unknown field use_mask_token"),
    ("vit-classifier", {"num_labels": 0, "id2label": None, "label2id": None}, "num_labels: 0 is not supported"),
    ("dinov2-model", {"layerscale_value": 0.0}, "layerscale_value must be positive"),
    ("dinov2-model", {"use_swiglu_ffn": "yes"}, "use_swiglu_ffn must be true or false"),
])
def test_unsupported_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, architecture, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**TINY | fields).to_json_string())
    config = {k: v for k, v in (config | change).items() if v is not None}
    assert_config_refused(cli, tmp_path, config | {"architectures": [architecture]}, needle)


SPEC = """family: encoder-only
vocab: 4
d_model: 32
heads: 4
d_ff: 64
norm: pre
positional: {kind: none}
encoder: {layers: 1, block: [self_attention, ffn]}
"""


@pytest.mark.parametrize("text, needle", [
    (SPEC.replace("{kind: none}", "{kind: learned, max_len: 20}") + "patches: {image_size: 32, patch_size: 8}\n",
     "patches carry their own learned positions"),
    (SPEC + "patches: {image_size: 8, patch_size: 16}\n", "patch_size (16) exceeds image_size (8)"),
    (SPEC + "patches: {image_size: 32, patch_size: 8, class_token: false, distillation_token: true}\n",
     "distillation token follows the class token"),
    (SPEC + "patches: {image_size: 32, patch_size: 8, class_token: false}\n"
     "head: {kind: image_classification, classes: 3}\n", "pooling class_token reads the class token"),
    (SPEC + "patches: {image_size: 32, patch_size: 8}\nhead: {kind: image_classification, classes: 3, "
     "distillation: true}\n", "the distillation classifier reads DeiT's token"),
    (SPEC.replace("vocab: 4", "vocab: 8") + "head: {kind: image_classification, classes: 3}\n",
     "an image_classification head reads image patches"),
    (SPEC + "patches: {image_size: 32, patch_size: 8}\nsublayer_gain: -0.1\n", "sublayer_gain"),
    (SPEC + "patches: {image_size: 32, patch_size: 8}\nhead: {kind: image_classification, classes: 3, "
     "labels: [cat]}\n", "1 labels for 3 classes"),
])
def test_bad_spec_fields_are_one_error_line(text, needle, cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = cli("validate", path)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err
