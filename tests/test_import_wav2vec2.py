"""`tfspec import` of wav2vec 2.0 and HuBERT against transformers, on real speech (tests/data/speech.wav,
espeak-ng's "The quick brown fox jumps over the lazy dog." at 16 kHz, read by
``tfspec.data.audio.read_wav``) normalised by ``tfspec.data.waveform``: small random Wav2Vec2ForCTC
(GroupNorm post-norm and LayerNorm "stable" pre-norm), HubertForCTC and Wav2Vec2Model (every weight
perturbed) imported through the CLI give transformers' last hidden states and CTC logits within
1e-4 in PyTorch and in the exported ONNX graph, on a batch of the whole recording and a padded,
shorter cut of it (its attention_mask); best-path decoding gives transformers' argmax with repeats
merged and blanks dropped, and ``tfspec transcribe`` prints it; the numpy normalisation equals
Wav2Vec2FeatureExtractor's within 1e-5; each default configuration imported config-only counts
what transformers counts; and what tfspec cannot compute is one error line naming the field."""

from __future__ import annotations

import json
from itertools import groupby
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_checkpoints import assert_config_imports_at_count, assert_config_refused, save_random
from tfspec.data.audio import read_wav
from tfspec.data.waveform import Normalisation

transformers = pytest.importorskip("transformers")

SPEECH = Path(__file__).parent / "data" / "speech.wav"
VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "|", *"ETAONIHSRDLUMWC"]
"""A CTC vocabulary as wav2vec2-base-960h's begins: the blank (pad) at 0, specials, the word delimiter, letters."""
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, conv_dim=[16, 16, 24],
            conv_stride=[5, 4, 2], conv_kernel=[10, 4, 3], num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4,
            vocab_size=len(VOCAB), layer_norm_eps=1e-3, hidden_act="gelu_new")
"""Frames every 40 samples; an even position kernel (its last output dropped); epsilon and activation off
their defaults, so that an importer ignoring them computes otherwise."""
CASES = {
    "wav2vec2-group": ("Wav2Vec2Config", "Wav2Vec2ForCTC", {}),
    "wav2vec2-stable": ("Wav2Vec2Config", "Wav2Vec2ForCTC", dict(feat_extract_norm="layer", do_stable_layer_norm=True,
                                                                 conv_bias=True, num_conv_pos_embeddings=7)),
    "hubert": ("HubertConfig", "HubertForCTC", dict(feat_proj_layer_norm=False)),
    "wav2vec2-model": ("Wav2Vec2Config", "Wav2Vec2Model", dict(feat_extract_norm="layer", mask_time_prob=0.0)),
}


@pytest.fixture(scope="module")
def speech() -> tuple[np.ndarray, np.ndarray]:
    """(input_values, attention_mask) (2, samples): the recording, and its first 60% padded."""
    samples = read_wav(SPEECH)
    return Normalisation(return_attention_mask=True).batch([samples, samples[:int(0.6 * len(samples))]])


@pytest.fixture(scope="module", params=CASES)
def imported(request, tmp_path_factory):
    """(transformers' model, tfspec's PyTorch model, its ONNX export, the imported directory)."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.cli import main
    from tfspec.spec import load_spec

    config_class, architecture, fields = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    ref = save_random(architecture, getattr(transformers, config_class)(**TINY | fields), root / "hf")
    (root / "hf" / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(VOCAB)}))
    assert main(["import", str(root / "hf"), "-o", str(root / "ours"), "--quiet"]) == 0
    model = build_module(load_spec(root / "ours")).eval()
    load_weights(model, root / "ours" / "model.safetensors")
    assert main(["export", str(root / "ours"), "--weights", str(root / "ours" / "model.safetensors"),
                 "-o", str(root / "onnx")]) == 0  # exit 0: backends/parity/waveform.py's checks passed
    return ref, model, OnnxModel(root / "onnx", device="cpu"), root


@torch.no_grad()
def _theirs(ref, values: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    inputs = {"input_values": torch.from_numpy(values), "attention_mask": torch.from_numpy(mask)}
    base = getattr(ref, "wav2vec2", getattr(ref, "hubert", ref))
    out = {"memory": base(**inputs).last_hidden_state.numpy()}
    return out | ({"logits": ref(**inputs).logits.numpy()} if hasattr(ref, "lm_head") else {})


def _real(ref, mask: np.ndarray) -> np.ndarray:
    """bool (B, frames): the frames transformers counts as real."""
    lengths = ref._get_feat_extract_output_lengths(torch.from_numpy(mask.sum(1))).numpy()
    return np.arange(lengths.max())[None, :] < lengths[:, None]


@torch.no_grad()
def test_hidden_states_and_logits_match_transformers_in_pytorch_and_onnx(imported, speech):
    ref, model, onnx, _ = imported
    values, mask = speech
    want = _theirs(ref, values, mask)
    real = _real(ref, mask)
    assert real.shape[1] == want["memory"].shape[1] > 50 and not real[1].all()
    got = model.run({"input_values": torch.from_numpy(values), "attention_mask": torch.from_numpy(mask)}, tuple(want))
    outputs = [p for p in want if p != "memory"] or ["memory"]  # model.onnx: logits of a CTC model, else memory
    from_onnx = dict(zip(outputs, onnx.run("model", outputs, {"input_values": values, "attention_mask": mask})))
    for port, value in want.items():
        np.testing.assert_allclose(got[port].numpy()[real], value[real], atol=1e-4, rtol=0, err_msg=port)
        if port in from_onnx:
            np.testing.assert_allclose(from_onnx[port][real], value[real], atol=1e-4, rtol=0, err_msg=f"onnx {port}")


def test_best_path_decoding_and_transcribe_equal_transformers_argmax(imported, speech, cli):
    from tfspec.ctc import greedy

    ref, _, onnx, root = imported
    if not hasattr(ref, "lm_head"):
        pytest.skip("a base model has no CTC head")
    values, mask = speech
    log_probs = onnx.run("model", ["log_probs"], {"input_values": values, "attention_mask": mask})[0]
    argmax = _theirs(ref, values, mask)["logits"].argmax(-1)
    for row, length in enumerate(_real(ref, mask).sum(1)):
        theirs = [int(k) for k, _ in groupby(argmax[row, :length]) if k != ref.config.pad_token_id]
        assert greedy(log_probs[row, :length], onnx.spec.head.blank) == theirs and len(theirs) > 3
    code, out, err = cli("transcribe", root / "onnx", SPEECH)
    assert code == 0, err
    text = out.rstrip("\n")
    full = [int(k) for k, _ in groupby(argmax[0]) if k != ref.config.pad_token_id]
    assert text == "".join(" " if VOCAB[i] == "|" else VOCAB[i] if len(VOCAB[i]) == 1 else chr(0xE000 + i)
                           for i in full)


@pytest.mark.parametrize("fields", [{}, {"return_attention_mask": True}, {"do_normalize": False, "padding_value": 0.5}])
def test_normalisation_equals_wav2vec2_feature_extractor(fields):
    samples = read_wav(SPEECH)
    recordings = [samples, samples[:20000], 0.3 * samples[5000:9000]]
    theirs = transformers.Wav2Vec2FeatureExtractor(**fields)
    want = theirs(recordings, sampling_rate=16000, padding=True, return_tensors="np")
    values, mask = Normalisation(**fields).batch(recordings)
    assert values.dtype == np.float32 and values.shape == want["input_values"].shape
    np.testing.assert_allclose(values, want["input_values"], atol=1e-5, rtol=0)
    if "attention_mask" in want:
        np.testing.assert_array_equal(mask, want["attention_mask"])
    else:
        assert mask.all()  # no mask: every sample is real to the model


@pytest.mark.parametrize("config_class, fields, architecture", [
    ("Wav2Vec2Config", {}, "Wav2Vec2Model"),  # wav2vec2-base: masked_spec_embed counted
    ("Wav2Vec2Config", {}, "Wav2Vec2ForCTC"),
    ("Wav2Vec2Config", {"feat_extract_norm": "layer", "do_stable_layer_norm": True, "conv_bias": True,
                        "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                        "intermediate_size": 4096}, "Wav2Vec2ForCTC"),  # wav2vec2-large-960h-lv60-self's shape
    ("HubertConfig", {}, "HubertModel"),
    ("HubertConfig", {"feat_proj_layer_norm": False, "mask_time_prob": 0.0}, "HubertForCTC"),
])
def test_config_only_import_counts_as_transformers(config_class, fields, architecture, cli, tmp_path):
    config = getattr(transformers, config_class)(**fields)
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


@pytest.mark.parametrize("model_type, fields, needle", [
    ("wav2vec2", {"feat_extract_norm": "batch"}, "feat_extract_norm"),
    ("wav2vec2", {"add_adapter": True}, "add_adapter"),
    ("wav2vec2", {"conv_kernel": [10, 3]}, "conv_kernel"),
    ("wav2vec2", {"conv_dim": [512, "x"]}, "conv_dim"),
    ("wav2vec2", {"num_conv_pos_embedding_groups": 5}, "position_groups"),
    ("wav2vec2", {"spec_augment_mode": "new"}, "spec_augment_mode"),
    ("hubert", {"conv_pos_batch_norm": True}, "conv_pos_batch_norm"),
])
def test_configs_tfspec_cannot_compute_are_refused_by_name(model_type, fields, needle, cli, tmp_path):
    assert_config_refused(cli, tmp_path, {"model_type": model_type, "architectures": ["Wav2Vec2Model" if model_type
                                                                                      == "wav2vec2" else "HubertModel"]}
                          | fields, needle)


def test_report_prints_the_waveform_rows(imported, cli):
    _, _, _, root = imported
    code, out, err = cli("report", root / "ours", "--n", 50)
    assert code == 0, err
    rows = {line.split()[1]: line for line in out.splitlines() if len(line.split()) > 1}
    assert "feature_encoder" in rows and "conv_positions" in rows
