"""`tfspec import` of CLIP and SigLIP dual encoders against transformers: small random CLIPModel and
SiglipModel checkpoints written by ``save_pretrained`` (every weight perturbed), imported through
the CLI; on real photographs (scikit-image's astronaut, chelsea and coffee) prepared by tfspec's
numpy preprocessing and on real prompts tokenised into a right-padded batch, logits_per_image,
logits_per_text, text_embeds and image_embeds of the PyTorch backend and of the exported ONNX
graph equal transformers' within 1e-4; zero-shot scores equal transformers' own
``zero-shot-image-classification`` pipeline; the default configurations imported config-only
count what transformers counts; CLIP's and SigLIP's image processors equal tfspec's
preprocessing within 1e-5; and configurations or specs tfspec cannot compute are one error line
naming the field."""

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
tokenizers = pytest.importorskip("tokenizers")

WORDS = ["a", "photo", "of", "cat", "coffee", "cup", "an", "astronaut", "the", "this", "is", "dog", "."]
VOCAB = ["<unk>", "<pad>", *WORDS, "<|startoftext|>", "<|endoftext|>"]
"""Word ids 2 ..; the start and end of text last, as in CLIP's vocabulary (eos the largest id)."""
LABELS = ["cat", "coffee cup", "astronaut", "dog"]
SIZE, PATCH = 32, 8
TEXT = dict(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=16, pad_token_id=1, bos_token_id=len(VOCAB) - 2, eos_token_id=len(VOCAB) - 1,
            layer_norm_eps=1e-3)
VISION = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4, image_size=SIZE,
              patch_size=PATCH, layer_norm_eps=1e-3)
"""Epsilons off the defaults, so that an importer ignoring them computes otherwise; SigLIP's image
embedding is its probe's output, so the vision width is the text's projection_size (32)."""
CASES = {
    "clip": ("CLIPConfig", "CLIPModel", dict(projection_dim=24), dict(hidden_act="gelu")),
    # eos_token_id 2 (CLIP's configurations before transformers#24773): pooled at the largest id, the end of
    # text here, where the first id 2 ("a") would be another position
    "clip-highest-id": ("CLIPConfig", "CLIPModel", dict(projection_dim=24), dict(eos_token_id=2)),
    "siglip": ("SiglipConfig", "SiglipModel", {}, dict(max_position_embeddings=64)),  # the pipeline pads to 64
}
PROCESSORS = {  # at the tiny models' size, as their published processors compute at 224
    "clip": ("CLIPImageProcessorPil", {"size": {"shortest_edge": SIZE}, "crop_size": {"height": SIZE, "width": SIZE}}),
    "siglip": ("SiglipImageProcessorPil", {"size": {"height": SIZE, "width": SIZE}}),
}


def _images():
    return [skimage_data.astronaut(), skimage_data.chelsea(), skimage_data.coffee()]


def _tokenizer():
    """A word-level tokenizer with CLIP's template: start of text, the words, end of text."""
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Split
    from tokenizers.processors import TemplateProcessing

    backend = tokenizers.Tokenizer(WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    backend.pre_tokenizer = Split(" ", "removed")
    bos, eos = VOCAB[-2], VOCAB[-1]
    backend.post_processor = TemplateProcessing(single=f"{bos} $A {eos}", special_tokens=[(bos, len(VOCAB) - 2),
                                                                                        (eos, len(VOCAB) - 1)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token=eos,
                                                pad_token="<pad>", unk_token="<unk>", model_max_length=16)


def _save(case: str, tmp_path):
    config_class, architecture, top, text = CASES[case]
    config = getattr(transformers, config_class)(text_config=TEXT | text, vision_config=VISION, **top)
    ref = save_random(architecture, config, tmp_path / "hf")
    _tokenizer().save_pretrained(tmp_path / "hf")
    processor, fields = PROCESSORS[case.split("-")[0]]
    getattr(transformers, processor)(**fields).save_pretrained(tmp_path / "hf")
    return ref


def _texts(padding) -> tuple[np.ndarray, np.ndarray]:
    prompts = [f"a photo of a {label} ." for label in LABELS]
    length = {"max_length": 64} if padding == "max_length" else {}  # SigLIP's, as the pipeline pads it
    batch = _tokenizer()(prompts, padding=padding, return_tensors="np", **length)
    return batch["input_ids"].astype(np.int64), batch["attention_mask"].astype(np.int64)


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_import_matches_transformers_in_pytorch_and_onnx(case, cli, tmp_path):
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.spec import load_spec

    ref, ours = _save(case, tmp_path), tmp_path / "imported"
    code, _, err = cli("import", tmp_path / "hf", "-o", ours, "--quiet")
    assert code == 0, err
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "-o", tmp_path / "onnx")
    assert code == 0 and "parity: ok" in out, out + err
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    pixels = Preprocessing.read(ours).batch(_images())  # 3 images against 4 texts
    ids, keep = _texts(padding=True)
    assert (keep == 0).any()  # a padded batch
    want = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(keep),
               pixel_values=torch.from_numpy(pixels))
    ports = ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds")
    got = model.run({"src": torch.from_numpy(ids), "src_mask": torch.from_numpy(keep),
                     "pixel_values": torch.from_numpy(pixels)}, ports)
    from_onnx = dict(zip(ports, onnx.run("model", list(ports), {"src": ids, "attention_mask": keep,
                                                                "pixel_values": pixels})))
    assert getattr(want, "logits_per_image").shape == (3, 4)
    for port in ports:
        value = getattr(want, port).numpy()
        assert np.abs(value).max() > 1e-2  # perturbed weights: nothing trivially zero
        np.testing.assert_allclose(got[port].numpy(), value, atol=1e-4, rtol=0, err_msg=port)
        np.testing.assert_allclose(from_onnx[port], value, atol=1e-4, rtol=0, err_msg=f"onnx {port}")
    larger = Preprocessing(size=(SIZE + PATCH, SIZE + 3 * PATCH), resample=3).batch(_images()[:2])  # a 5 x 7 grid
    want = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(keep),
               pixel_values=torch.from_numpy(larger), interpolate_pos_encoding=True).image_embeds.numpy()
    got = onnx.run("model", ["image_embeds"], {"src": ids, "attention_mask": keep, "pixel_values": larger})[0]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0, err_msg="positions resized")


@pytest.mark.parametrize("case", ["clip", "siglip"])
@torch.no_grad()
def test_zero_shot_scores_equal_the_transformers_pipeline(case, cli, tmp_path):
    """CLIP: a softmax over the labels per image; SigLIP: a sigmoid of each pair (padded to the
    tokenizer's length, as SigLIP was trained), from tfspec's ONNX export."""
    _save(case, tmp_path)
    ours = tmp_path / "imported"
    assert cli("import", tmp_path / "hf", "-o", ours, "--quiet")[0] == 0
    assert cli("export", ours, "--weights", ours / "model.safetensors", "-o", tmp_path / "onnx")[0] == 0
    from PIL import Image

    pipe = transformers.pipeline("zero-shot-image-classification", model=str(tmp_path / "hf"), device="cpu")
    template = "a photo of a {} ."
    padding = True if case == "clip" else "max_length"
    ids, keep = _texts(padding)
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    pixels = Preprocessing.read(ours).batch(_images())
    logits = onnx.run("model", ["logits_per_image"], {"src": ids, "attention_mask": keep, "pixel_values": pixels})[0]
    scores = torch.from_numpy(logits).softmax(-1) if case == "clip" else torch.from_numpy(logits).sigmoid()
    for image, row in zip(_images(), scores.numpy()):
        theirs = pipe(Image.fromarray(image), candidate_labels=LABELS, hypothesis_template=template)
        by_label = {r["label"]: r["score"] for r in theirs}
        np.testing.assert_allclose([by_label[label] for label in LABELS], row, atol=1e-5, rtol=0)


@pytest.mark.parametrize("config_class, architecture", [("CLIPConfig", "CLIPModel"), ("SiglipConfig", "SiglipModel")])
def test_default_config_imports_at_transformers_count(config_class, architecture, cli, tmp_path):
    config = getattr(transformers, config_class)()
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


@pytest.mark.parametrize("processor", ["CLIPImageProcessorPil", "SiglipImageProcessorPil"])
def test_preprocessing_equals_transformers_processor(processor):
    """CLIP: bicubic, the shortest edge to 224, a 224 x 224 centre crop, OpenAI's mean and std;
    SigLIP: bicubic to 224 x 224, mean and std 0.5."""
    theirs = getattr(transformers, processor)()
    ours = Preprocessing.from_config(theirs.to_dict(), processor)
    for image in _images():
        want = theirs(image, return_tensors="np")["pixel_values"][0]
        got = ours(image)
        assert got.shape == want.shape == (3, 224, 224) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_report_prints_the_dual_encoder_rows(cli, tmp_path):
    _save("siglip", tmp_path)
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    n = (SIZE // PATCH) ** 2
    rows = json.loads(cli("report", tmp_path / "ours", "--n", n, "--format", "json")[1])["layers"]
    probe = next(r for r in rows if r["layer"] == "attention_probe")
    d, d_ff = VISION["hidden_size"], VISION["intermediate_size"]
    # one query: its projection, keys and values of n patches, n scores and sums, the output, the MLP
    assert probe["forward_flops"] == 2 * d * d + 4 * n * d * d + 4 * n * d + 2 * d * d + 4 * d * d_ff
    vision_attention = next(r for r in rows if r["stack"] == "vision" and r["layer"] == "self_attention")
    text_attention = next(r for r in rows if r["stack"] == "encoder" and r["layer"] == "self_attention")
    assert vision_attention["forward_flops"] == text_attention["forward_flops"]  # both towers 32 wide here


@pytest.mark.parametrize("case, side, change, needle", [
    ("clip", "text", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("clip", "text", {"rope_theta": 10000.0}, "unknown field rope_theta"),
    ("clip", "vision", {"image_size": [32, 48]}, "image_size: [32, 48] is not supported"),
    ("clip", "vision", {"patch_size": 64}, "patch_size (64) must be 1 .. image_size (32)"),
    ("clip", "", {"text_config": "tiny"}, "text_config: \"tiny\" is not a configuration"),
    ("siglip", "vision", {"vision_use_head": False}, "vision_use_head: false is not supported"),
    ("siglip", "text", {"projection_size": 24}, "width (24) must equal d_model (32)"),
])
def test_unsupported_configs_are_refused_by_name(case, side, change, needle, cli, tmp_path):
    config_class, architecture, top, text = CASES[case]
    config = json.loads(getattr(transformers, config_class)(text_config=TEXT | text, vision_config=VISION,
                                                            **top).to_json_string())
    if side:
        config[f"{side}_config"] |= change
    else:
        config |= change
    assert_config_refused(cli, tmp_path, config | {"architectures": [architecture]}, needle)


TOWER = ("{family: encoder-only, vocab: 8, d_model: 32, heads: 4, d_ff: 64, norm: pre, positional: {kind: none}, "
         "encoder: {layers: 1, block: [self_attention, ffn]}, patches: {image_size: 32, patch_size: 8%s}, "
         "head: {kind: embedding, width: 16, pooling: %s}}")
SPEC = """family: encoder-only
vocab: 40
d_model: 32
heads: 4
d_ff: 64
norm: pre
positional: {kind: learned, max_len: 16}
encoder: {layers: 1, block: [causal_self_attention, ffn]}
"""
HEAD = "head: {kind: embedding, width: 16, pooling: eos_token}\n"


@pytest.mark.parametrize("text, needle", [
    (SPEC + HEAD + "dual: {vision: %s}\n" % (TOWER % ("", "class_token")).replace(
        ", patches: {image_size: 32, patch_size: 8}", ""), "pooling class_token reads image patches"),
    (SPEC + HEAD + "dual: {vision: %s}\n" % (TOWER % (", class_token: false", "class_token")),
     "class_token pooling reads the class token"),
    (SPEC + HEAD + "dual: {vision: %s}\n" % (TOWER % ("", "class_token, projection: none")),
     "width (16) must equal d_model (32)"),
    (SPEC + HEAD + "dual: {vision: %s}\n" % (TOWER % ("", "eos_token")), "pooling eos_token reads token ids"),
    (SPEC + "dual: {vision: %s}\n" % (TOWER % ("", "class_token")),
     "each tower of a dual encoder ends in an embedding head"),
    (SPEC + HEAD.replace("16", "24") + "dual: {vision: %s}\n" % (TOWER % ("", "class_token")),
     "the image head's width (16) must equal the text head's (24)"),
    (SPEC + HEAD.replace("eos_token", "first") + "dual: {vision: %s}\n" % (TOWER % ("", "class_token")), "pooling"),
])
def test_bad_dual_specs_are_one_error_line(text, needle, cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = cli("validate", path)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("case", ["clip", "clip-highest-id", "siglip"])
@torch.no_grad()
def test_hf_export_round_trip_gives_the_original_outputs(case, cli, tmp_path):
    ref = _save(case, tmp_path)
    _, architecture, _, _ = CASES[case]
    imported, exported = tmp_path / "imported", tmp_path / "exported"
    assert cli("import", tmp_path / "hf", "-o", imported, "--quiet")[0] == 0
    code, out, err = cli("export", imported, "--weights", imported / "model.safetensors", "--format", "hf",
                         "-o", exported)
    assert code == 0 and "parity: ok" in out, out + err
    assert json.loads((exported / "config.json").read_text())["architectures"] == [architecture]
    back = getattr(transformers, architecture).from_pretrained(exported).eval()
    ids, keep = _texts(padding=True)
    pixels = Preprocessing.read(imported).batch(_images())
    feeds = dict(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(keep),
                 pixel_values=torch.from_numpy(pixels))
    want, got = ref(**feeds), back(**feeds)
    for port in ("logits_per_image", "text_embeds", "image_embeds"):
        np.testing.assert_allclose(getattr(got, port).numpy(), getattr(want, port).numpy(), atol=1e-5, rtol=0)


TOWERS = {  # CLIP's single-tower classes: the embedding is the logits port, the last hidden states memory
    "CLIPTextModelWithProjection": ("CLIPTextConfig", TEXT | {"projection_dim": 24}, "text_embeds"),
    "CLIPTextModel": ("CLIPTextConfig", TEXT | {"hidden_act": "gelu"}, "pooler_output"),
    "CLIPVisionModelWithProjection": ("CLIPVisionConfig", VISION | {"projection_dim": 24}, "image_embeds"),
    "CLIPVisionModel": ("CLIPVisionConfig", VISION, "pooler_output"),
}


@pytest.mark.parametrize("architecture", TOWERS)
@torch.no_grad()
def test_single_tower_classes_match_transformers(architecture, cli, tmp_path):
    """Imported, exported to ONNX and back to transformers (``--format hf``), each checked."""
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.spec import load_spec

    config_class, fields, embedding = TOWERS[architecture]
    ref = save_random(architecture, getattr(transformers, config_class)(**fields), tmp_path / "hf")
    ours = tmp_path / "imported"
    assert cli("import", tmp_path / "hf", "-o", ours, "--quiet")[0] == 0
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    for form, out in (("onnx", tmp_path / "onnx"), ("hf", tmp_path / "back")):
        code, text, err = cli("export", ours, "--weights", ours / "model.safetensors", "--format", form, "-o", out)
        assert code == 0 and "parity: ok" in text, text + err
    if "Text" in architecture:
        ids, keep = _texts(padding=True)
        feeds, theirs = {"src": ids, "src_mask": keep}, dict(input_ids=ids, attention_mask=keep)
        onnx_feeds = {"src": ids, "attention_mask": keep}
    else:
        pixels = Preprocessing(size=(SIZE, SIZE), resample=3).batch(_images())
        feeds = theirs = onnx_feeds = {"pixel_values": pixels}
    want = ref(**{k: torch.from_numpy(v) for k, v in theirs.items()})
    got = model.run({k: torch.from_numpy(v) for k, v in feeds.items()}, ("logits", "memory"))
    np.testing.assert_allclose(got["logits"].numpy(), getattr(want, embedding).numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(got["memory"].numpy(), want.last_hidden_state.numpy(), atol=1e-4, rtol=0)
    logits = OnnxModel(tmp_path / "onnx", device="cpu").run("model", ["logits"], onnx_feeds)[0]
    np.testing.assert_allclose(logits, getattr(want, embedding).numpy(), atol=1e-4, rtol=0)
    assert json.loads((tmp_path / "back" / "config.json").read_text())["architectures"] == [architecture]


@pytest.mark.parametrize("config_class, architecture", [("CLIPTextConfig", "CLIPTextModelWithProjection"),
                                                        ("CLIPVisionConfig", "CLIPVisionModelWithProjection")])
def test_default_tower_configs_import_at_transformers_count(config_class, architecture, cli, tmp_path):
    config = getattr(transformers, config_class)()
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)
