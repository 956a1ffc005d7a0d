"""`tfspec import` of TrOCR (transformers' VisionEncoderDecoderModel: a ViT or DeiT encoder and a
TrOCRForCausalLM decoder) against transformers, on a real image of text (scikit-image's ``text``
photograph) prepared by both sides' ViTImageProcessor: small random checkpoints (every weight
perturbed) imported through the CLI give transformers' encoder hidden states and decoder logits
within 1e-4 in PyTorch and in the exported ONNX graphs, transformers' parameter count, and the
tokens of transformers' greedy and beam ``generate`` from tfspec's search in both backends with the
KV cache; `tfspec transcribe` reads the image; what tfspec cannot compute is one error line naming
the field. Two checkpoints: ViT with learned positions, a LayerNorm on the embeddings and the
output tied, widths alike; DeiT of another width than the decoder (``enc_to_dec_proj``) with
sinusoidal positions, scaled embeddings, no embedding norm and an output projection of its own."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hf_checkpoints import assert_config_refused, perturb

transformers = pytest.importorskip("transformers")

START, PAD, END = 2, 1, 3
"""decoder_start_token_id (TrOCR's </s>, as published), pad and eos: apart, so that each is read."""
DECODER = dict(vocab_size=80, d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=40,
               max_position_embeddings=24, pad_token_id=PAD, bos_token_id=0, eos_token_id=END,
               decoder_start_token_id=START, activation_function="relu")
ENCODER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, image_size=32,
               patch_size=8, layer_norm_eps=1e-6)
CHECKPOINTS = {
    "vit": (transformers.ViTConfig, ENCODER, {}),
    "deit-projected": (transformers.DeiTConfig, ENCODER | {"hidden_size": 48, "num_attention_heads": 6},
                       {"use_learned_position_embeddings": False, "scale_embedding": True,
                        "layernorm_embedding": False, "tie_word_embeddings": False}),
}


def _config(name: str, **decoder):
    kind, encoder, changes = CHECKPOINTS[name]
    return transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(
        kind(**encoder), transformers.TrOCRConfig(**DECODER | changes | decoder))


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    """scikit-image's photograph of printed text, as an RGB PNG file."""
    from PIL import Image
    from skimage import data

    path = tmp_path_factory.mktemp("photo") / "text.png"
    Image.fromarray(data.text()).convert("RGB").save(path)
    return path


@pytest.fixture(scope="module", params=list(CHECKPOINTS))
def imported(request, tmp_path_factory, photo):
    """(transformers' model, tfspec's PyTorch model, its ONNX export, transformers' pixel values of
    ``photo``, the directory)."""
    from PIL import Image

    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.cli import main
    from tfspec.spec import load_spec

    root = tmp_path_factory.mktemp(request.param)
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    ref = perturb(transformers.VisionEncoderDecoderModel(_config(request.param)).eval(), 0.4, embed_tokens=0.1,
                  embed_positions=0.5, attn=0.2, **{"norm.bias": 0.0})  # searches that do not repeat one token
    ref.save_pretrained(root / "hf")
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32}, resample=3)
    processor.save_pretrained(root / "hf")
    assert main(["import", str(root / "hf"), "-o", str(root / "ours"), "--quiet"]) == 0
    model = build_module(load_spec(root / "ours")).eval()
    load_weights(model, root / "ours" / "model.safetensors")
    assert main(["export", str(root / "ours"), "--weights", str(root / "ours" / "model.safetensors"),
                 "-o", str(root / "onnx")]) == 0  # exit 0: every check of backends/parity/ocr.py passed
    pixels = processor(images=Image.open(photo).convert("RGB"), return_tensors="np").pixel_values
    return ref, model, OnnxModel(root / "onnx", device="cpu", threads=2), pixels, root


@torch.no_grad()
def test_import_matches_transformers_in_pytorch_and_onnx(imported):
    ref, model, onnx, pixels, _ = imported
    tgt = np.array([[START, 5, 17, 33, 8, 60, 71, 4]])
    want = ref(pixel_values=torch.from_numpy(pixels), decoder_input_ids=torch.from_numpy(tgt))
    hidden, logits = want.encoder_last_hidden_state, want.logits.numpy()
    projected = hasattr(ref, "enc_to_dec_proj")
    assert projected == (ref.config.encoder.hidden_size != ref.config.decoder.hidden_size)
    memory = (ref.enc_to_dec_proj(hidden) if projected else hidden).numpy()
    ports = ("logits", "memory") + (("encoder_hidden",) if projected else ())
    got = model.run({"pixel_values": torch.from_numpy(pixels), "tgt": torch.from_numpy(tgt)}, ports)
    np.testing.assert_allclose(got["encoder_hidden" if projected else "memory"].numpy(), hidden.numpy(), atol=1e-4,
                               rtol=0)
    np.testing.assert_allclose(got["memory"].numpy(), memory, atol=1e-4, rtol=0)
    np.testing.assert_allclose(got["logits"].numpy(), logits, atol=1e-4, rtol=0)
    np.testing.assert_allclose(onnx.run("encoder", ["memory"], {"pixel_values": pixels})[0], memory, atol=1e-4,
                               rtol=0)
    np.testing.assert_allclose(onnx.run("model", ["logits"], {"pixel_values": pixels, "tgt": tgt})[0], logits,
                               atol=1e-4, rtol=0)
    assert sum(p.numel() for p in model.parameters()) == ref.num_parameters()


def test_preprocessing_equals_vit_image_processor(imported, photo):
    from tfspec.data.pixels import Preprocessing, read_image

    *_, pixels, root = imported
    ours = Preprocessing.read(root / "onnx").batch([read_image(photo)])
    np.testing.assert_allclose(ours, pixels, atol=1e-5, rtol=0)


def _generate(ref, pixels, beam: int, new: int = 16) -> list[int]:
    """transformers' tokens after the start token, up to eos: ranked by summed log-probability and
    stopped at ``beam`` finished hypotheses (length_penalty 0, early_stopping), as tfspec's search."""
    with torch.no_grad():
        out = ref.generate(pixel_values=torch.from_numpy(pixels), max_new_tokens=new, do_sample=False,
                           num_beams=beam, length_penalty=0.0, early_stopping=True)[0].tolist()
    assert out[0] == START
    return out[1:out.index(END, 1)] if END in out[1:] else out[1:]


@pytest.mark.parametrize("beam", [1, 3])
def test_search_equals_generate(imported, beam):
    from tfspec.backends.torch import TorchDecoder
    from tfspec.search import SearchOptions, search

    ref, model, onnx, pixels, _ = imported
    want = _generate(ref, pixels, beam)
    assert len(set(want)) > 2 and PAD not in want  # the comparison can tell decoders apart
    options = SearchOptions(beam=beam, alpha=0.0, max_extra=16, max_length=16)
    for decoder in (TorchDecoder(model), onnx.decoder()):
        assert search(decoder, pixels, options) == [want]


def test_transcribe_reads_an_image_file(imported, photo, cli):
    """`tfspec transcribe EXPORT text.png` prepares the image as the export's preprocessor_config.json
    says and prints generate's tokens (token ids: the tiny checkpoint has no tokenizer)."""
    ref, _, _, pixels, root = imported
    for beam in (1, 3):
        code, out, err = cli("transcribe", root / "onnx", photo, "--max-new", 12, "--beam", beam)
        assert code == 0, err
        assert [int(t) for t in out.split()] == _generate(ref, pixels, beam, 12)


def test_report_counts_transformers_parameters(imported, cli):
    ref, *_, root = imported
    code, out, err = cli("report", root / "ours", "--n", 17, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["params"]["total"] == ref.num_parameters()


@pytest.mark.parametrize("change, needle", [
    ({"decoder": {"model_type": "bart"}}, 'decoder.model_type: "bart" is not supported'),
    ({"encoder": {"model_type": "swin"}}, 'encoder.model_type: "swin" is not supported'),
    ({"decoder": {"cross_attention_hidden_size": 48}}, "cross_attention_hidden_size (48) differs from d_model (32)"),
    ({"decoder": {"activation_function": "gelu_fast"}}, 'activation_function: "gelu_fast" is not supported'),
    ({"decoder": {"use_learned_position_embeddings": "yes"}}, "use_learned_position_embeddings must be true or false"),
    ({"decoder": {"window": 4}}, "unknown field window"),
    ({"encoder": {"qkv_bias": 1}}, "qkv_bias must be true or false"),
    ({"tie_word_embeddings": True}, "tie_word_embeddings: true is not supported"),
])
def test_unsupported_configs_are_refused_by_name(change, needle, cli, tmp_path):
    config = _config("vit").to_dict()
    for key, value in change.items():
        config[key] = config[key] | value if isinstance(value, dict) else value
    assert_config_refused(cli, tmp_path, config | {"architectures": ["VisionEncoderDecoderModel"]}, needle)


SPEC = """family: encoder-decoder
vocab: 64
d_model: 32
heads: 4
d_ff: 64
positional: {kind: learned, max_len: 20}
decoder: {layers: 1, block: [causal_self_attention, cross_attention, ffn]}
image_encoder:
  vision:
    family: encoder-only
    vocab: 4
    d_model: 48
    heads: 4
    d_ff: 64
    norm: pre
    positional: {kind: none}
    patches: {image_size: 16, patch_size: 8}
    encoder: {layers: 1, block: [self_attention, ffn]}
"""


@pytest.mark.parametrize("text, needle", [
    (SPEC + "encoder: {layers: 1, block: [self_attention, ffn]}\n", "no encoder stack"),
    (SPEC.replace("family: encoder-only", "family: encoder-only\n    head: {kind: image_classification, classes: 3}"),
     "without a head"),
    (SPEC.replace("    patches: {image_size: 16, patch_size: 8}\n", "").replace("vocab: 4", "vocab: 8"),
     "reading patches"),
    (SPEC.replace("decoder: {", "spectrogram: {mels: 8, positions: 16}\ndecoder: {"), "drop the decoder spec's"),
])
def test_bad_spec_fields_are_one_error_line(text, needle, cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = cli("validate", path)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err


def test_report_counts_the_projection(cli, tmp_path):
    """A 48-wide encoder under a 32-wide decoder: the projection's 48 x 32 + 32 parameters and
    2 n 48 32 FLOPs, besides the encoder's own rows at its width."""
    path = tmp_path / "ocr.yaml"
    path.write_text(SPEC)
    code, out, err = cli("report", path, "--n", 5, "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    row = next(r for r in report["layers"] if "embed_projection" in r["layer"])
    assert row["forward_flops"] == 2 * 5 * 48 * 32
