"""`tfspec import` of Whisper against transformers, on real speech (tests/data/speech.wav: espeak-ng's
"The quick brown fox jumps over the lazy dog.", resampled from 22,050 to 16,000 Hz by
``tfspec.data.audio.resample``): tfspec's numpy log-mel features equal ``WhisperFeatureExtractor``'s;
a small random WhisperForConditionalGeneration (every weight perturbed) imported through the CLI
gives transformers' encoder hidden states and decoder logits within 1e-4 in PyTorch and in the
exported ONNX graphs; greedy decoding with the KV cache in both backends gives the tokens of
transformers' ``generate`` (with and without forced and suppressed tokens); WhisperConfig()
imported config-only counts what transformers counts; ``export --format hf`` gives back the
original logits; and what tfspec cannot compute is one error line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_checkpoints import assert_config_imports_at_count, assert_config_refused, perturb
from tfspec.data.audio import FrontEnd, log_mel, mel_filters, read_wav, resample

transformers = pytest.importorskip("transformers")

SPEECH = Path(__file__).parent / "data" / "speech.wav"
START, END = 94, 95
"""decoder_start_token_id, and the id that is pad, bos and eos at once (as Whisper's <|endoftext|>)."""
TINY = dict(vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=40, max_source_positions=1500,
            max_target_positions=32, num_mel_bins=80, pad_token_id=END, bos_token_id=END, eos_token_id=END,
            decoder_start_token_id=START, begin_suppress_tokens=None)
"""The decoder's d_ff apart from the encoder's; 3000 frames (30 s), as transformers insists on."""


@pytest.fixture(scope="module")
def features() -> np.ndarray:
    return log_mel(read_wav(SPEECH))[None]  # (1, 80, 3000)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(transformers' model, tfspec's PyTorch model, its ONNX export, the imported directory)."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.cli import main
    from tfspec.spec import load_spec

    root = tmp_path_factory.mktemp("whisper")
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    ref = perturb(transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**TINY)).eval(),
                  embed_positions=1.0, encoder_attn=0.1)  # greedy outputs that vary (not one token repeated)
    ref.save_pretrained(root / "hf")
    assert main(["import", str(root / "hf"), "-o", str(root / "ours"), "--quiet"]) == 0
    model = build_module(load_spec(root / "ours")).eval()
    load_weights(model, root / "ours" / "model.safetensors")
    assert main(["export", str(root / "ours"), "--weights", str(root / "ours" / "model.safetensors"),
                 "-o", str(root / "onnx")]) == 0  # exit 0: every parity check of backends/parity/audio.py passed
    return ref, model, OnnxModel(root / "onnx", device="cpu"), root


def test_features_equal_whisper_feature_extractor(features):
    samples = read_wav(SPEECH)
    assert 2 * 16000 < len(samples) < 4 * 16000
    for mels in (80, 128):  # whisper-tiny .. large-v2; large-v3
        theirs = transformers.WhisperFeatureExtractor(feature_size=mels)
        front = FrontEnd(feature_size=mels)
        np.testing.assert_array_equal(mel_filters(front), theirs.mel_filters)
        ours = log_mel(samples, front)
        padded = np.pad(samples, (0, front.samples - len(samples)))[None].astype(np.float32)
        assert ours.shape == (mels, 3000) and ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs._np_extract_fbank_features(padded, "cpu")[0], atol=1e-5, rtol=0)
        # its default (torch) path computes the STFT in float32: 3e-5 from its own numpy path on this speech
        called = theirs(samples, sampling_rate=16000, return_tensors="np").input_features[0]
        np.testing.assert_allclose(ours, called, atol=1e-4, rtol=0)
    np.testing.assert_allclose(features[0], log_mel(samples), atol=0)


def test_resampling_equals_scipy_resample_poly():
    signal = pytest.importorskip("scipy.signal")
    x = np.random.default_rng(0).standard_normal(4000)
    for rate, target in ((22050, 16000), (44100, 16000), (8000, 16000), (48000, 16000)):
        np.testing.assert_allclose(resample(x, rate, target), signal.resample_poly(x, target, rate), atol=1e-12)


@torch.no_grad()
def test_import_matches_transformers_in_pytorch_and_onnx(imported, features):
    ref, model, onnx, _ = imported
    tgt = np.array([[START, 5, 17, 33, 8, 60, 71, 2]])
    want = ref(input_features=torch.from_numpy(features), decoder_input_ids=torch.from_numpy(tgt))
    got = model.run({"input_features": torch.from_numpy(features), "tgt": torch.from_numpy(tgt)}, ("logits", "memory"))
    memory, logits = want.encoder_last_hidden_state.numpy(), want.logits.numpy()
    np.testing.assert_allclose(got["memory"].numpy(), memory, atol=1e-4, rtol=0)
    np.testing.assert_allclose(got["logits"].numpy(), logits, atol=1e-4, rtol=0)
    np.testing.assert_allclose(onnx.run("encoder", ["memory"], {"input_features": features})[0], memory, atol=1e-4,
                               rtol=0)
    np.testing.assert_allclose(onnx.run("model", ["logits"], {"input_features": features, "tgt": tgt})[0], logits,
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("forced, suppress, begin", [(None, None, None), ([[1, 7], [2, 9]], [3, 11, 40], [12, END])])
@torch.no_grad()
def test_greedy_decoding_equals_generate(imported, features, forced, suppress, begin):
    from tfspec.backends.torch import TorchDecoder
    from tfspec.transcription import Prompt, transcribe

    ref, model, onnx, root = imported
    config = ref.generation_config
    config.forced_decoder_ids, config.suppress_tokens, config.begin_suppress_tokens = forced, suppress, begin
    want = ref.generate(input_features=torch.from_numpy(features), generation_config=config, max_new_tokens=12,
                        do_sample=False, num_beams=1)[0].tolist()
    assert want[:1] != [START]  # Whisper's generate returns the tokens after the prompt alone
    want = want[:want.index(END)] if END in want else want
    assert len(set(want)) > 2  # not one token repeated: the comparison can tell decoders apart
    prompt = Prompt((START, *(token for _, token in forced or [])), tuple(suppress or ()), tuple(begin or ()))
    for decoder in (TorchDecoder(model), onnx.decoder()):
        assert transcribe(decoder, features, prompt, len(want)) == [want]


def test_generation_config_gives_the_prompt(tmp_path):
    from tfspec.errors import TfspecError
    from tfspec.transcription import Prompt

    config = {"decoder_start_token_id": 50258, "forced_decoder_ids": [[2, 50359], [1, 50259], [3, 50363]],
              "suppress_tokens": [1, 2], "begin_suppress_tokens": [220, 50257]}
    (tmp_path / "generation_config.json").write_text(json.dumps(config))
    assert Prompt.read(tmp_path, 0) == Prompt((50258, 50259, 50359, 50363), (1, 2), (220, 50257))
    (tmp_path / "generation_config.json").write_text(json.dumps(config | {"forced_decoder_ids": [[2, 7]]}))
    with pytest.raises(TfspecError, match="forced_decoder_ids"):
        Prompt.read(tmp_path, 0)
    (tmp_path / "generation_config.json").write_text(json.dumps(config | {"return_timestamps": True}))
    with pytest.raises(TfspecError, match="return_timestamps"):
        Prompt.read(tmp_path, 0)


@torch.no_grad()
def test_hf_export_round_trip_gives_the_original_logits(imported, features, cli):
    ref, _, _, root = imported
    code, out, err = cli("export", root / "ours", "--weights", root / "ours" / "model.safetensors", "--format", "hf",
                         "-o", root / "back")
    assert code == 0 and "parity: ok" in out, out + err
    back = transformers.WhisperForConditionalGeneration.from_pretrained(root / "back").eval()
    tgt = torch.tensor([[START, 5, 17, 33]])
    f = torch.from_numpy(features)
    np.testing.assert_allclose(back(input_features=f, decoder_input_ids=tgt).logits.numpy(),
                               ref(input_features=f, decoder_input_ids=tgt).logits.numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("architecture", ["WhisperForConditionalGeneration", "WhisperModel"])
def test_default_config_imports_at_transformers_count(architecture, cli, tmp_path):
    config = transformers.WhisperConfig()
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


@pytest.mark.parametrize("change, needle", [
    ({"decoder_attention_heads": 2}, "decoder_attention_heads: 2 is not supported"),
    ({"activation_function": "gelu_fast"}, "activation_function: \"gelu_fast\" is not supported"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings: false is not supported"),
    ({"num_hidden_layers": 3}, "num_hidden_layers (3) differs from encoder_layers (2)"),
    ({"scale_embedding": "no"}, "scale_embedding must be true or false"),
    ({"conv_stride": 3}, "unknown field conv_stride"),
    ({"d_model": 33, "encoder_attention_heads": 3, "decoder_attention_heads": 3}, "d_model (33)"),
])
def test_unsupported_configs_are_refused_by_name(change, needle, cli, tmp_path):
    config = json.loads(transformers.WhisperConfig(**TINY).to_json_string()) | change
    config = {k: v for k, v in config.items() if v is not None}
    assert_config_refused(cli, tmp_path, config | {"architectures": ["WhisperForConditionalGeneration"]}, needle)


SPEC = """family: encoder-decoder
vocab: 64
d_model: 32
heads: 4
d_ff: 64
norm: pre
tie_embeddings: output
positional: {kind: learned, max_len: 20}
encoder: {layers: 1, block: [self_attention, ffn]}
decoder: {layers: 1, block: [causal_self_attention, cross_attention, ffn]}
"""


@pytest.mark.parametrize("text, needle", [
    (SPEC + "spectrogram: {mels: 8, positions: 16, kernel_size: 4}\n", "kernel_size (4) must be odd"),
    (SPEC.replace("output", "all") + "spectrogram: {mels: 8, positions: 16}\n", "no source embedding to tie"),
    (SPEC.replace("{kind: learned, max_len: 20}", "{kind: rotary, max_len: 20}")
     + "spectrogram: {mels: 8, positions: 16}\n", "positions must be added to its embeddings"),
    (SPEC + "spectrogram: {mels: 0, positions: 16}\n", "spectrogram.mels"),
    (SPEC + "spectrogram: {mels: 8, positions: 16}\nsegments: 2\n", "a spectrogram replaces the source tokens"),
])
def test_bad_spec_fields_are_one_error_line(text, needle, cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = cli("validate", path)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err


def test_report_prints_the_conv_stem_row(cli, tmp_path):
    path = tmp_path / "audio.yaml"
    path.write_text(SPEC + "spectrogram: {mels: 8, positions: 16}\n")
    rows = json.loads(cli("report", path, "--n", 10, "--format", "json")[1])["layers"]
    stem = next(r for r in rows if r["layer"] == "conv_stem")
    assert stem["forward_flops"] == 2 * 20 * 32 * 8 * 3 + 2 * 10 * 32 * 32 * 3  # 20 frames -> 10 positions, k 3


def test_transcribe_reads_a_wav_file_with_the_checkpoints_prompt(imported, features, cli, tmp_path):
    """`tfspec export CHECKPOINT` keeps its generation_config.json (forced and suppressed tokens), and
    `tfspec transcribe EXPORT speech.wav` prints the tokens transformers' `generate` gives for it."""
    ref, _, _, root = imported
    config = ref.generation_config
    config.forced_decoder_ids, config.suppress_tokens, config.begin_suppress_tokens = [[1, 7]], [3, 40], [12]
    checkpoint = tmp_path / "hf"
    ref.save_pretrained(checkpoint)  # the generation config beside it
    code, out, err = cli("export", checkpoint, "-o", tmp_path / "onnx")
    assert code == 0 and (tmp_path / "onnx" / "generation_config.json").is_file(), err
    with torch.no_grad():
        want = ref.generate(input_features=torch.from_numpy(features), generation_config=config, max_new_tokens=10,
                            do_sample=False, num_beams=1)[0].tolist()
    want = want[:want.index(END)] if END in want else want
    code, out, err = cli("transcribe", tmp_path / "onnx", SPEECH, "--max-new", len(want))
    assert code == 0, err
    assert [int(t) for t in out.split()] == want
