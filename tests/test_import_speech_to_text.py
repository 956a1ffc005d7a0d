"""`tfspec import` of Speech2Text against transformers, on real speech (tests/data/speech.wav): tfspec's
numpy filterbank frames equal ``Speech2TextFeatureExtractor``'s (its numpy path, which it takes
without torchaudio); a small random Speech2TextForConditionalGeneration (every weight perturbed)
imported through the CLI gives transformers' parameter count, encoder hidden states and logits
within 1e-4 in PyTorch and in the exported ONNX graphs; greedy and beam-3 decoding with the KV
cache in both backends give the tokens of transformers' ``generate``; `tfspec transcribe` of the
export prints them; Speech2TextConfig() imported config-only counts what transformers counts; the
report's subsampler row is the convolutions' products; and what tfspec cannot compute is one error
line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from hf_checkpoints import assert_config_imports_at_count, assert_config_refused, perturb
from tfspec.data.audio import read_wav
from tfspec.data.fbank import FilterBank, filterbank, kaldi_filters, log_filterbank

transformers = pytest.importorskip("transformers")

SPEECH = Path(__file__).parent / "data" / "speech.wav"
PAD, END = 1, 2
"""pad_token_id and eos_token_id (also decoder_start_token_id), Speech2TextConfig's."""
TINY = dict(vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=40, max_source_positions=100,
            max_target_positions=40, num_conv_layers=2, conv_kernel_sizes=[5, 3], conv_channels=24,
            input_feat_per_channel=80)
"""Kernels apart, the decoder's d_ff apart from the encoder's; 100 positions hold the 276 frames
(69 positions) of the speech."""


@pytest.fixture(scope="module")
def features() -> np.ndarray:
    return filterbank(read_wav(SPEECH))[None]  # (1, 276, 80)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(transformers' model, tfspec's PyTorch model, its ONNX export, the imported directory)."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.cli import main
    from tfspec.spec import load_spec

    root = tmp_path_factory.mktemp("speech_to_text")
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    ref = perturb(transformers.Speech2TextForConditionalGeneration(transformers.Speech2TextConfig(**TINY)).eval(),
                  encoder_attn=0.7, embed_tokens=0.05)  # outputs that vary, logits of ~1
    ref.save_pretrained(root / "hf")
    transformers.Speech2TextFeatureExtractor().save_pretrained(root / "hf")
    assert main(["import", str(root / "hf"), "-o", str(root / "ours"), "--quiet"]) == 0
    model = build_module(load_spec(root / "ours")).eval()
    load_weights(model, root / "ours" / "model.safetensors")
    assert main(["export", str(root / "ours"), "--weights", str(root / "ours" / "model.safetensors"),
                 "-o", str(root / "onnx")]) == 0  # exit 0: every parity check of backends/parity/audio.py passed
    return ref, model, OnnxModel(root / "onnx", device="cpu"), root


def test_features_equal_speech2text_feature_extractor(features):
    samples = read_wav(SPEECH)
    theirs = transformers.Speech2TextFeatureExtractor()
    np.testing.assert_array_equal(kaldi_filters(FilterBank()), theirs.mel_filters)
    np.testing.assert_array_equal(log_filterbank(samples), theirs._extract_fbank_features(samples.astype(np.float32)))
    called = theirs(samples, sampling_rate=16000, return_tensors="np").input_features
    assert features.shape == called.shape == (1, 1 + (len(samples) - 400) // 160, 80) and features.dtype == np.float32
    np.testing.assert_allclose(features, called, atol=1e-5, rtol=0)
    for means, variances in ((True, False), (False, True)):
        bank = FilterBank(normalize_means=means, normalize_vars=variances)
        theirs = transformers.Speech2TextFeatureExtractor(normalize_means=means, normalize_vars=variances)
        np.testing.assert_allclose(filterbank(samples, bank), theirs(samples, sampling_rate=16000).input_features[0],
                                   atol=1e-5, rtol=0)


def test_feature_settings_are_read_and_refused_by_name(tmp_path):
    from tfspec.errors import TfspecError

    transformers.Speech2TextFeatureExtractor(num_mel_bins=40, feature_size=40).save_pretrained(tmp_path)
    assert FilterBank.read(tmp_path) == FilterBank(num_mel_bins=40)
    for change, needle in (({"dither": 1.0}, "dither: 1.0"), ({"center": True}, "unknown field center"),
                           ({"normalize_vars": 1}, "normalize_vars must be true or false")):
        config = json.loads((tmp_path / "preprocessor_config.json").read_text()) | change
        (tmp_path / "bad").mkdir(exist_ok=True)
        (tmp_path / "bad" / "preprocessor_config.json").write_text(json.dumps(config))
        with pytest.raises(TfspecError, match=needle):
            FilterBank.read(tmp_path / "bad")


@torch.no_grad()
def test_import_matches_transformers_in_pytorch_and_onnx(imported, features):
    ref, model, onnx, _ = imported
    tgt = np.array([[END, 5, 17, 33, 8, 60, 71, 3]])
    want = ref(input_features=torch.from_numpy(features), decoder_input_ids=torch.from_numpy(tgt))
    got = model.run({"input_features": torch.from_numpy(features), "tgt": torch.from_numpy(tgt)}, ("logits", "memory"))
    memory, logits = want.encoder_last_hidden_state.numpy(), want.logits.numpy()
    assert memory.shape == (1, 69, 32)  # 276 frames, two convolutions of stride 2
    np.testing.assert_allclose(got["memory"].numpy(), memory, atol=1e-4, rtol=0)
    np.testing.assert_allclose(got["logits"].numpy(), logits, atol=1e-4, rtol=0)
    np.testing.assert_allclose(onnx.run("encoder", ["memory"], {"input_features": features})[0], memory, atol=1e-4,
                               rtol=0)
    np.testing.assert_allclose(onnx.run("model", ["logits"], {"input_features": features, "tgt": tgt})[0], logits,
                               atol=1e-4, rtol=0)
    assert sum(p.numel() for p in model.parameters()) == ref.num_parameters()


@pytest.mark.parametrize("beam", [1, 3])
@torch.no_grad()
def test_search_equals_generate(imported, features, beam):
    """tfspec's beam search ranks by summed log-probability at alpha 0 and stops a sentence at
    `beam` finished hypotheses: generate's length_penalty 0 and early_stopping."""
    from tfspec.backends.torch import TorchDecoder
    from tfspec.search import SearchOptions, search

    ref, model, onnx, _ = imported
    want = ref.generate(input_features=torch.from_numpy(features), max_new_tokens=20, do_sample=False,
                        num_beams=beam, length_penalty=0.0, early_stopping=True)[0].tolist()
    assert want[0] == END  # decoder_start_token_id first
    want = want[1:want.index(END, 1)] if END in want[1:] else want[1:]
    assert len(set(want)) > 2 and PAD not in want  # the comparison can tell decoders apart; no pad positions
    options = SearchOptions(beam=beam, alpha=0.0, max_extra=20, max_length=20)
    for decoder in (TorchDecoder(model), onnx.decoder()):
        assert search(decoder, features, options) == [want]


def test_transcribe_reads_a_wav_file(imported, features, cli):
    """`tfspec transcribe EXPORT speech.wav` computes the filterbank frames the checkpoint's
    preprocessor_config.json asks for and prints the tokens of transformers' greedy `generate`
    (token ids: the tiny checkpoint has no sentencepiece model)."""
    ref, _, _, root = imported
    assert (root / "onnx" / "preprocessor_config.json").is_file()
    with torch.no_grad():
        want = ref.generate(input_features=torch.from_numpy(features), max_new_tokens=10, do_sample=False,
                            num_beams=1)[0].tolist()[1:]
    want = want[:want.index(END)] if END in want else want
    code, out, err = cli("transcribe", root / "onnx", SPEECH, "--max-new", len(want))
    assert code == 0, err
    assert [int(t) for t in out.split()] == want


@torch.no_grad()
def test_hf_export_round_trip_gives_the_original_logits(imported, features, cli):
    ref, _, _, root = imported
    code, out, err = cli("export", root / "ours", "--weights", root / "ours" / "model.safetensors", "--format", "hf",
                         "-o", root / "back")
    assert code == 0 and "parity: ok" in out, out + err
    back = transformers.Speech2TextForConditionalGeneration.from_pretrained(root / "back").eval()
    tgt, f = torch.tensor([[END, 5, 17, 33]]), torch.from_numpy(features)
    np.testing.assert_allclose(back(input_features=f, decoder_input_ids=tgt).logits.numpy(),
                               ref(input_features=f, decoder_input_ids=tgt).logits.numpy(), atol=1e-4, rtol=0)


@torch.no_grad()
def test_base_model_gives_the_encoder_states(imported, features, tmp_path):
    """Speech2TextModel (no lm_head, no prefix) imports too; its output is the encoder's memory."""
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.cli import main
    from tfspec.spec import load_spec

    ref = imported[0]
    base = transformers.Speech2TextModel(ref.config).eval()
    base.load_state_dict(ref.model.state_dict())
    base.save_pretrained(tmp_path / "hf")
    assert main(["import", str(tmp_path / "hf"), "-o", str(tmp_path / "ours"), "--quiet"]) == 0
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    f = torch.from_numpy(features)
    want = base(input_features=f, decoder_input_ids=torch.tensor([[END]])).encoder_last_hidden_state
    np.testing.assert_allclose(model.run({"input_features": f}, ("memory",))["memory"].numpy(), want.numpy(),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("architecture", ["Speech2TextForConditionalGeneration", "Speech2TextModel"])
def test_default_config_imports_at_transformers_count(architecture, cli, tmp_path):
    config = transformers.Speech2TextConfig()
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


@pytest.mark.parametrize("change, needle", [
    ({"decoder_attention_heads": 2}, "decoder_attention_heads: 2 is not supported"),
    ({"conv_kernel_sizes": [5, 5, 5]}, "holds 3 sizes but num_conv_layers is 2"),
    ({"conv_kernel_sizes": [5, 4]}, "kernel_sizes [5, 4] hold even [4]"),
    ({"conv_channels": 25}, "channels (25) must be even"),
    ({"input_channels": 2}, "input_channels: 2 is not supported"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings: false is not supported"),
    ({"conv_stride": 3}, "unknown field conv_stride"),
])
def test_unsupported_configs_are_refused_by_name(change, needle, cli, tmp_path):
    config = json.loads(transformers.Speech2TextConfig(**TINY).to_json_string()) | change
    config = {k: v for k, v in config.items() if v is not None}
    assert_config_refused(cli, tmp_path, config | {"architectures": ["Speech2TextForConditionalGeneration"]}, needle)


SPEC = """family: encoder-decoder
vocab: 64
d_model: 32
heads: 4
d_ff: 64
norm: pre
embed_scale: true
tie_embeddings: output
positional: {kind: sinusoidal, max_len: 20, offset: 2}
encoder: {layers: 1, block: [self_attention, ffn]}
decoder: {layers: 1, block: [causal_self_attention, cross_attention, ffn]}
"""


@pytest.mark.parametrize("text, needle", [
    (SPEC + "spectrogram: {mels: 8, positions: 16, subsampler: {kernel_sizes: [5, 4], channels: 8}}\n",
     "spectrogram.subsampler.kernel_sizes"),
    (SPEC + "spectrogram: {mels: 8, positions: 16, subsampler: {kernel_sizes: [5], channels: 7}}\n",
     "channels (7) must be even"),
    (SPEC + "spectrogram: {mels: 8, positions: 16, stride: 3, subsampler: {kernel_sizes: [5], channels: 8}}\n",
     "spectrogram.stride: stride (3) is Whisper's stem's"),
    (SPEC + "spectrogram: {mels: 8, positions: 16, subsampler: {kernel_sizes: [], channels: 8}}\n",
     "spectrogram.subsampler.kernel_sizes"),
])
def test_bad_spec_fields_are_one_error_line(text, needle, cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = cli("validate", path)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err


def test_report_prints_the_subsampler_row(cli, tmp_path):
    """n = 10 positions read 40 frames: 8 mels -> 12 channels over 5 frames at 20 outputs, then
    6 -> 2 x 32 over 3 frames at 10 (2 F o c k per convolution, written out, and as torch's FLOP
    counter counts transformers' Conv1dSubsampler); the embedding's
    parameters are the decoder's table and transformers' Conv1dSubsampler's."""
    path = tmp_path / "audio.yaml"
    path.write_text(SPEC + "spectrogram: {mels: 8, positions: 16, subsampler: {kernel_sizes: [5, 3], channels: 12}}\n")
    report = json.loads(cli("report", path, "--n", 10, "--format", "json")[1])
    row = next(r for r in report["layers"] if r["layer"] == "conv_subsampler")
    assert row["forward_flops"] == 2 * 20 * 12 * 8 * 5 + 2 * 10 * 64 * 6 * 3
    subsampler = _reference_subsampler(8, 12, 32, (5, 3))
    with FlopCounterMode(display=False) as counter:
        subsampler(torch.zeros(1, 40, 8))  # (batch, frames, mels)
    assert row["forward_flops"] == counter.get_total_flops()
    assert report["params"]["embeddings"]["embedding"] == sum(p.numel() for p in subsampler.parameters()) + 64 * 32


def _reference_subsampler(mels: int, channels: int, d_model: int, kernels: tuple[int, ...]) -> torch.nn.Module:
    """transformers' Conv1dSubsampler of these sizes."""
    from transformers.models.speech_to_text.modeling_speech_to_text import Conv1dSubsampler

    config = transformers.Speech2TextConfig(input_feat_per_channel=mels, conv_channels=channels, d_model=d_model,
                                            conv_kernel_sizes=list(kernels), num_conv_layers=len(kernels))
    return Conv1dSubsampler(config)
