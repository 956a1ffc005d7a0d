"""`tfspec import` of BEiT and data2vec-vision against transformers (Bao et al. 2022): small random
models written by ``save_pretrained`` (every weight perturbed, the relative bias tables too),
imported through the CLI. On real photographs (scikit-image's) the last hidden states, pooled
outputs and logits of the PyTorch backend and of the exported ONNX graph equal transformers'
within 1e-4 at the training size and at larger and smaller non-square ones (the relative bias
table resized bilinearly, the absolute positions bicubically, as transformers does with and
without ``interpolate_pos_encoding``); the 2-D bias itself equals the BEiT paper's definition
written out here; parameter counts are transformers'; ``export --format hf`` gives back the
original outputs; ``tfspec classify`` gives transformers' pipeline's labels and scores; the
optimum layout opens in ORTModelForImageClassification (where optimum is installed); and
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
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, image_size=SIZE,
            patch_size=PATCH, layer_norm_eps=1e-3, num_labels=3, id2label={0: "cat", 1: "coffee", 2: "astronaut"},
            label2id={"cat": 0, "coffee": 1, "astronaut": 2})
"""A 4 x 4 patch grid; epsilon off the default, so that an importer ignoring it computes otherwise."""
CASES = {
    "beit-classifier": ("BeitConfig", "BeitForImageClassification", dict(use_relative_position_bias=True)),
    "beit-model": ("BeitConfig", "BeitModel", dict(use_relative_position_bias=True, hidden_act="relu")),
    "beit-shared": ("BeitConfig", "BeitModel", dict(use_shared_relative_position_bias=True, use_mean_pooling=False,
                                                    use_absolute_position_embeddings=True, use_mask_token=True)),
    "beit-plain": ("BeitConfig", "BeitForImageClassification", dict(layer_scale_init_value=0.0,
                                                                     use_absolute_position_embeddings=True)),
    "data2vec-classifier": ("Data2VecVisionConfig", "Data2VecVisionForImageClassification",
                            dict(use_shared_relative_position_bias=True)),
    "data2vec-model": ("Data2VecVisionConfig", "Data2VecVisionModel", dict(use_relative_position_bias=True)),
}
SIZES = ((SIZE, SIZE), (SIZE + PATCH, SIZE + 3 * PATCH), (SIZE - PATCH, SIZE + PATCH))
"""The training grid, a 5 x 7 one (the offset table grown) and a 3 x 5 one (shrunk along one side)."""


def _pixels(height: int, width: int) -> np.ndarray:
    images = [skimage_data.astronaut(), skimage_data.chelsea(), skimage_data.coffee()]
    return Preprocessing(size=(height, width), resample=3).batch(images)


def _save(case: str, tmp_path):
    config_class, architecture, fields = CASES[case]
    ref = save_random(architecture, getattr(transformers, config_class)(**TINY | fields), tmp_path / "hf")
    return ref, architecture


def _saved_model(tmp_path):
    return getattr(transformers, json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"][0]
                   ).from_pretrained(tmp_path / "hf")


def _expected(ref, pixels: np.ndarray, **call) -> dict[str, np.ndarray]:
    """transformers' outputs by tfspec port."""
    with torch.no_grad():
        out = ref(pixel_values=torch.from_numpy(pixels), **call)
    if hasattr(out, "logits"):
        return {"logits": out.logits.numpy()}
    pooled = {"pooled": out.pooler_output.numpy()} if out.pooler_output is not None else {}
    return {"memory": out.last_hidden_state.numpy()} | pooled


def _import(cli, tmp_path):
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.spec import load_spec

    ours = tmp_path / "imported"
    code, _, err = cli("import", tmp_path / "hf", "-o", ours, "--quiet")
    assert code == 0, err
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    return ours, model


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_import_matches_transformers_in_pytorch_and_onnx(case, cli, tmp_path):
    ref, architecture = _save(case, tmp_path)
    ours, model = _import(cli, tmp_path)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "-o", tmp_path / "onnx")
    assert code == 0 and "parity: ok" in out, out + err
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    for height, width in SIZES:
        pixels = _pixels(height, width)
        want = _expected(ref, pixels)
        resized = _expected(ref, pixels, interpolate_pos_encoding=True)  # resizes the bias to its own size
        got = model.run({"pixel_values": torch.from_numpy(pixels)}, tuple(want))
        from_onnx = dict(zip(want, onnx.run("model", list(want), {"pixel_values": pixels})))
        for port, value in want.items():
            np.testing.assert_allclose(resized[port], value, atol=1e-5, rtol=0)
            np.testing.assert_allclose(got[port].numpy(), value, atol=1e-4, rtol=0, err_msg=f"{port} {height}x{width}")
            np.testing.assert_allclose(from_onnx[port], value, atol=1e-4, rtol=0, err_msg=f"onnx {port}")


def paper_bias(table: np.ndarray, grid: int) -> np.ndarray:
    """BEiT §2.5 written out pair by pair: B[i, j] = table[(dy + g - 1)(2g - 1) + dx + g - 1] for
    patches i, j at (y, x) with dy = y_i - y_j, dx = x_i - x_j; the class token (position 0) reads
    the last three rows: to a patch, from a patch, to itself. (heads, L, L)."""
    length, rows = 1 + grid * grid, table.shape[0]
    bias = np.empty((table.shape[1], length, length), np.float32)
    for i in range(length):
        for j in range(length):
            if i == 0 or j == 0:
                bias[:, i, j] = table[rows - 1 if i == j == 0 else rows - 3 if i == 0 else rows - 2]
                continue
            (yi, xi), (yj, xj) = divmod(i - 1, grid), divmod(j - 1, grid)
            bias[:, i, j] = table[(yi - yj + grid - 1) * (2 * grid - 1) + xi - xj + grid - 1]
    return bias


@torch.no_grad()
def test_the_bias_is_the_papers_in_both_backends(cli, tmp_path):
    """The score term at the training grid equals ``paper_bias`` of the imported table, and the
    ONNX index built from graph ops equals the numpy one for the resized grids."""
    from backends.onnx.lower.scores import relative_bias_2d as onnx_term
    from backends.torch.model import RunContext
    from backends.torch.patches import GRID
    from backends.torch.scores.relative_bias_2d import RelativeBias2d
    from tfspec.positions.relative_bias_2d import offset_index

    _save("beit-classifier", tmp_path)
    _, model = _import(cli, tmp_path)
    node = next(n for n in model.graph.nodes() if n.op == "attention")
    module = model.get_submodule(node.name)
    ctx = RunContext(False, {})
    ctx.published[GRID] = (SIZE // PATCH, SIZE // PATCH)
    bias = RelativeBias2d(node)(ctx, module, None, None)
    np.testing.assert_array_equal(bias[0].numpy(), paper_bias(module.rel_bias_2d.numpy(), SIZE // PATCH))
    import onnx
    import onnxruntime

    from backends.onnx.builder import Builder

    b = Builder("index", 18, "float32", {})
    grid = b.input("grid", [2], onnx.TensorProto.INT64)
    b.output("index", onnx_term.offset_index(b, grid), ["L", "L"], onnx.TensorProto.INT64)
    session = onnxruntime.InferenceSession(b.model({}).SerializeToString(), providers=["CPUExecutionProvider"])
    for height, width in ((4, 4), (5, 7), (3, 5), (1, 2)):
        got = session.run(None, {"grid": np.array([height, width], np.int64)})[0]
        np.testing.assert_array_equal(got, offset_index(np, height, width))


@pytest.mark.parametrize("case", ["beit-classifier", "beit-shared", "data2vec-model"])
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
    pixels = _pixels(SIZE + PATCH, SIZE)
    for port, value in _expected(back, pixels).items():
        np.testing.assert_allclose(value, _expected(ref, pixels)[port], atol=1e-4, rtol=0)


@pytest.mark.parametrize("config_class, fields, architecture", [
    ("BeitConfig", {}, "BeitModel"),  # BEiT-B/16 at 224: the pooler's LayerNorm, no relative bias
    ("BeitConfig", {"use_relative_position_bias": True}, "BeitForImageClassification"),  # a table per layer
    ("BeitConfig", {"use_shared_relative_position_bias": True, "use_mask_token": True,
                    "use_absolute_position_embeddings": True}, "BeitModel"),
    ("Data2VecVisionConfig", {"use_relative_position_bias": True}, "Data2VecVisionModel"),  # no pooler
])
def test_config_only_import_counts_as_transformers(config_class, fields, architecture, cli, tmp_path):
    config = getattr(transformers, config_class)(**fields)
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


def test_report_counts_the_table_and_keeps_attention_quadratic(cli, tmp_path):
    _save("beit-shared", tmp_path)
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    n = 1 + (SIZE // PATCH) ** 2
    report = json.loads(cli("report", tmp_path / "ours", "--n", n, "--format", "json")[1])
    d, table = 32, ((2 * (SIZE // PATCH) - 1) ** 2 + 3) * 4  # one (7^2 + 3, heads) table for the stack
    per_layer = 4 * d * d + 3 * d  # q, k, v, o; biases on q, v and o
    assert report["params"]["encoder"]["attention"] == 2 * per_layer + table
    assert report["params"]["tied"] == {"encoder.layers.1.self_attn.rel_bias_2d": "encoder.layers.0.self_attn.rel_bias_2d"}
    assert report["params"]["total"] == sum(p.numel() for p in _saved_model(tmp_path).parameters())
    code, out, err = cli("report", tmp_path / "ours", "--n", n)
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split()[1:2] == ["self_attention"])
    assert "O(n²·d)" in row


def test_classify_gives_transformers_pipeline_labels_and_scores(cli, tmp_path):
    from PIL import Image

    _save("beit-classifier", tmp_path)
    transformers.BeitImageProcessorPil(size={"height": SIZE, "width": SIZE}, do_center_crop=False,
                                       resample=3).save_pretrained(tmp_path / "hf")
    images = []
    for name in ("chelsea", "coffee", "astronaut"):
        Image.fromarray(getattr(skimage_data, name)()).save(tmp_path / f"{name}.png")
        images.append(str(tmp_path / f"{name}.png"))
    assert cli("export", tmp_path / "hf", "-o", tmp_path / "onnx")[0] == 0
    code, out, err = cli("classify", *images, "--model", tmp_path / "onnx", "--top-k", 3, "--json")
    assert code == 0, err
    pipe = transformers.pipeline("image-classification", model=str(tmp_path / "hf"))
    for image, row in zip(images, (json.loads(line) for line in out.splitlines())):
        theirs = pipe(image, top_k=3)
        assert [t["label"] for t in row["top"]] == [t["label"] for t in theirs]
        assert max(abs(a["score"] - b["score"]) for a, b in zip(row["top"], theirs)) < 1e-5, (row, theirs)


def test_optimum_opens_the_export_and_matches_transformers(tmp_path):
    import subprocess

    from tests.test_export_optimum import IMAGE_CHECK, OPTIMUM

    if not OPTIMUM.is_file():
        pytest.skip(f"no optimum-onnx environment at {OPTIMUM} (README: References)")
    _save("beit-classifier", tmp_path)
    transformers.BeitImageProcessorPil(size={"height": SIZE, "width": SIZE}).save_pretrained(tmp_path / "hf")
    from tfspec.cli import main

    assert main(["export", str(tmp_path / "hf"), "--format", "optimum", "-o", str(tmp_path / "out")]) == 0
    done = subprocess.run([str(OPTIMUM), "-c", IMAGE_CHECK, str(tmp_path / "out"), str(tmp_path / "hf"),
                           "ORTModelForImageClassification", "BeitForImageClassification"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["diffs"] and max(result["diffs"].values()) < 1e-4, result


@pytest.mark.parametrize("case, change, needle", [
    ("beit-model", {"use_shared_relative_position_bias": True}, "use_relative_position_bias and "
                                                               "use_shared_relative_position_bias are both true"),
    ("beit-model", {"image_size": [32, 48]}, "image_size: [32, 48] is not supported"),
    ("beit-model", {"use_mean_pooling": "yes"}, "use_mean_pooling must be true or false"),
    ("beit-model", {"qkv_bias": False}, "unknown field qkv_bias"),
    ("beit-classifier", {"num_labels": 0, "id2label": None, "label2id": None}, "num_labels: 0 is not supported"),
])
def test_unsupported_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, architecture, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**TINY | fields).to_json_string())
    config = {k: v for k, v in (config | change).items() if v is not None}
    assert_config_refused(cli, tmp_path, config | {"architectures": [architecture]}, needle)


SPEC = """family: encoder-only
vocab: 8
d_model: 32
heads: 4
d_ff: 64
norm: pre
encoder: {layers: 1, block: [self_attention, ffn]}
"""


@pytest.mark.parametrize("text, needle", [
    (SPEC + "positional: {kind: relative_bias_2d}\n", "relative_bias_2d biases attention by the 2-D offsets"),
    (SPEC + "positional: {kind: relative_bias_2d}\npatches: {image_size: 32, patch_size: 8, registers: 2}\n",
     "entries for one class token"),
    (SPEC + "positional: {kind: none}\npatches: {image_size: 32, patch_size: 8}\n"
     "head: {kind: image_classification, classes: 3, pooling: pooler}\n", "pooling pooler reads the spec's image_pooler"),
    (SPEC + "positional: {kind: none}\npatches: {image_size: 32, patch_size: 8}\npooler: true\n"
     "image_pooler: {pooling: patch_mean}\n", "pooler and image_pooler both"),
    (SPEC + "positional: {kind: none}\nimage_pooler: {pooling: patch_mean}\n", "image_pooler pools image patches"),
    (SPEC + "positional: {kind: relative_bias_2d, buckets: 8}\npatches: {image_size: 32, patch_size: 8}\n",
     "buckets shapes"),
])
def test_bad_spec_fields_are_one_error_line(text, needle, cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = cli("validate", path)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err
