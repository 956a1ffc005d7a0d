"""`tfspec import` of WavLM (issue 56) and of the speech families' sequence classification heads,
against transformers on real speech (tests/data/speech.wav, espeak-ng's "The quick brown fox jumps
over the lazy dog." at 16 kHz), a batch of the whole recording and a padded, shorter cut of it.

WavLMForCTC (post-norm with GroupNorm, and pre-norm "stable layer norm"), WavLMModel and
Wav2Vec2ForSequenceClassification, HubertForSequenceClassification, WavLMForSequenceClassification
at small random configurations (every weight perturbed) imported through the CLI give
transformers' last hidden states, CTC logits and class logits within 1e-4 in PyTorch and in the
exported ONNX graph (onnxruntime). Few buckets and a short max_bucket_distance put the recording's
distances (up to ~70 frames) in the log-spaced buckets and past the last one. The buckets equal
transformers' ``_relative_positions_bucket`` for every distance up to 3000 at WavLM's settings;
the default configurations imported config-only count what transformers counts; the FLOPs tfspec
adds for the gates are what torch's FLOP counter sees WavLM compute beyond wav2vec 2.0 on the same
configuration; and what tfspec cannot compute is one error line naming the field."""

from __future__ import annotations

import json
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
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, conv_dim=[16, 16, 24],
            conv_stride=[5, 4, 2], conv_kernel=[10, 4, 3], num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4,
            vocab_size=len(VOCAB), layer_norm_eps=1e-3, hidden_act="gelu_new")
"""Frames every 40 samples (~1100 for the recording); epsilon and activation off their defaults."""
BUCKETS = dict(num_buckets=16, max_bucket_distance=20)
"""4 exact distances per sign, log-spaced buckets to 20, beyond which every distance shares the last."""
LABELS = dict(num_labels=3, classifier_proj_size=12, id2label={0: "yes", 1: "no", 2: "maybe"})
CASES = {
    "wavlm-ctc": ("WavLMConfig", "WavLMForCTC", BUCKETS),
    "wavlm-stable-ctc": ("WavLMConfig", "WavLMForCTC", BUCKETS | dict(feat_extract_norm="layer", conv_bias=True,
                                                                      do_stable_layer_norm=True)),
    "wavlm-model": ("WavLMConfig", "WavLMModel", dict(num_buckets=32, max_bucket_distance=50, mask_time_prob=0.0)),
    "wav2vec2-classify": ("Wav2Vec2Config", "Wav2Vec2ForSequenceClassification", LABELS),
    "hubert-classify": ("HubertConfig", "HubertForSequenceClassification", LABELS | dict(feat_proj_layer_norm=False)),
    "wavlm-classify": ("WavLMConfig", "WavLMForSequenceClassification",
                       BUCKETS | LABELS | dict(feat_extract_norm="layer", do_stable_layer_norm=True)),
}


@pytest.fixture(scope="module")
def speech() -> tuple[np.ndarray, np.ndarray]:
    """(input_values, attention_mask) (2, samples): the recording, and its first 60% padded."""
    samples = read_wav(SPEECH)
    return Normalisation(return_attention_mask=True).batch([samples, samples[:int(0.6 * len(samples))]])


SLOW = {"wavlm-stable-ctc", "wavlm-model", "hubert-classify"}
"""Cases whose path the others already take (pre-norm, the base model, the classification head), run with -m slow."""


@pytest.fixture(scope="module", params=[pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name
                                        for name in CASES])
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
                 "-o", str(root / "onnx")]) == 0  # exit 0: the export's parity checks passed
    return ref, model, OnnxModel(root / "onnx", device="cpu"), root


@torch.no_grad()
def _theirs(ref, values: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    inputs = {"input_values": torch.from_numpy(values), "attention_mask": torch.from_numpy(mask)}
    base = getattr(ref, ref.base_model_prefix, ref)
    out = {"memory": base(**inputs).last_hidden_state.numpy()}
    return out | ({"logits": ref(**inputs).logits.numpy()} if base is not ref else {})


def _real(ref, mask: np.ndarray, frames: int) -> np.ndarray:
    """bool (B, frames): the frames transformers counts as real."""
    lengths = ref._get_feat_extract_output_lengths(torch.from_numpy(mask.sum(1))).numpy()
    return np.arange(frames)[None, :] < lengths[:, None]


@torch.no_grad()
def test_states_and_logits_match_transformers_in_pytorch_and_onnx(imported, speech):
    ref, model, onnx, _ = imported
    values, mask = speech
    want = _theirs(ref, values, mask)
    real = _real(ref, mask, want["memory"].shape[1])
    assert real.shape[1] > 1000 and not real[1].all()
    got = model.run({"input_values": torch.from_numpy(values), "attention_mask": torch.from_numpy(mask)}, tuple(want))
    outputs = [p for p in want if p != "memory"] or ["memory"]  # model.onnx: a head's logits, else memory
    from_onnx = dict(zip(outputs, onnx.run("model", outputs, {"input_values": values, "attention_mask": mask})))
    for port, value in want.items():
        rows = real if value.ndim == 3 else slice(None)  # class logits: one row per recording
        np.testing.assert_allclose(got[port].numpy()[rows], value[rows], atol=1e-4, rtol=0, err_msg=port)
        if port in from_onnx:
            np.testing.assert_allclose(from_onnx[port][rows], value[rows], atol=1e-4, rtol=0, err_msg=f"onnx {port}")
    if want.get("logits") is not None and want["logits"].ndim == 2:  # the labels come along
        assert onnx.spec.head.labels == ["yes", "no", "maybe"] and abs(want["logits"][0] - want["logits"][1]).max() > 1e-3


def test_report_counts_the_checkpoints_parameters(imported, cli):
    ref, _, _, root = imported
    code, out, err = cli("report", root / "ours", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["params"]["total"] == sum(p.numel() for p in ref.parameters())


def test_buckets_equal_transformers_at_wavlm_settings():
    from tfspec.layers.relative_bias import bucket_table

    attention = transformers.models.wavlm.modeling_wavlm.WavLMAttention(32, 4, num_buckets=320, max_distance=800)
    distance = torch.arange(-3000, 3001)
    want = attention._relative_positions_bucket(distance).numpy()
    table = bucket_table({"buckets": 320, "max_distance": 800}, bidirectional=True)
    np.testing.assert_array_equal(table[np.clip(distance.numpy(), -800, 800) + 800], want)


def test_gate_flops_are_what_wavlm_computes_beyond_wav2vec2():
    """Same configuration, same recording: what torch's FLOP counter sees WavLMModel compute beyond
    Wav2Vec2Model (the gate projections; the lookup and gating are elementwise) is what tfspec adds."""
    from torch.utils.flop_counter import FlopCounterMode

    from tfspec import build_graph
    from tfspec.analysis.complexity import table1_complexity
    from tfspec.analysis.flops import analyze_flops
    from tfspec.interop.hf.family import FAMILIES, Source

    values = torch.from_numpy(read_wav(SPEECH)[None, :16000].astype(np.float32))
    counted, graphs = {}, {}
    for model_type, name in (("wavlm", "WavLM"), ("wav2vec2", "Wav2Vec2")):
        config = getattr(transformers, f"{name}Config")(**TINY, mask_time_prob=0.0)
        config._attn_implementation = "eager"  # WavLM's own attention is eager: count both alike
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            frames = getattr(transformers, f"{name}Model")(config).eval()(values).last_hidden_state.shape[1]
        counted[model_type] = counter.get_total_flops()
        data = FAMILIES[model_type]().spec_data(Source(config.to_dict(), "config.json", f"{name}Model"))
        graphs[model_type] = build_graph(_spec(data))
    added = analyze_flops(graphs["wavlm"], frames).forward - analyze_flops(graphs["wav2vec2"], frames).forward
    assert added == counted["wavlm"] - counted["wav2vec2"] == TINY["num_hidden_layers"] * 16 * frames * 32
    attention = [x for x in graphs["wavlm"].nodes() if x.op == "attention"]
    assert all(table1_complexity(x.layer) == "O(n²·d)" for x in attention)


def _spec(data: dict):
    from tfspec.spec import Spec

    return Spec.model_validate({"name": "wavlm-flops"} | data)


@pytest.mark.parametrize("config_class, fields, architecture", [
    ("WavLMConfig", {}, "WavLMModel"),  # wavlm-base: masked_spec_embed counted
    ("WavLMConfig", {}, "WavLMForCTC"),
    ("WavLMConfig", {"feat_extract_norm": "layer", "do_stable_layer_norm": True, "conv_bias": True,
                     "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                     "intermediate_size": 4096}, "WavLMForCTC"),  # wavlm-large's shape
    ("WavLMConfig", {"num_labels": 7}, "WavLMForSequenceClassification"),
    ("Wav2Vec2Config", {}, "Wav2Vec2ForSequenceClassification"),
    ("HubertConfig", {"classifier_proj_size": 64}, "HubertForSequenceClassification"),
])
def test_config_only_import_counts_as_transformers(config_class, fields, architecture, cli, tmp_path):
    config = getattr(transformers, config_class)(**fields)
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


@pytest.mark.parametrize("model_type, architecture, fields, needle", [
    ("wavlm", "WavLMForSequenceClassification", {"use_weighted_layer_sum": True}, "use_weighted_layer_sum"),
    ("wav2vec2", "Wav2Vec2ForSequenceClassification", {"use_weighted_layer_sum": True}, "use_weighted_layer_sum"),
    ("wavlm", "WavLMModel", {"num_buckets": 320, "max_bucket_distance": 40}, "max_distance"),
    ("wavlm", "WavLMModel", {"num_buckets": "many"}, "num_buckets"),
    ("wavlm", "WavLMModel", {"add_adapter": True}, "add_adapter"),
])
def test_configs_tfspec_cannot_compute_are_refused_by_name(model_type, architecture, fields, needle, cli, tmp_path):
    assert_config_refused(cli, tmp_path, {"model_type": model_type, "architectures": [architecture]} | fields, needle)


def test_gated_bias_is_refused_outside_bidirectional_self_attention():
    from pydantic import ValidationError

    from tfspec.spec import Spec

    with pytest.raises(ValidationError, match="gated_relative_bias positions are WavLM's encoder bias"):
        Spec.model_validate({"name": "x", "family": "decoder-only", "d_model": 32, "heads": 4, "d_ff": 64,
                             "vocab": {"size": 50}, "positional": {"kind": "gated_relative_bias", "buckets": 16},
                             "decoder": {"layers": 1, "block": ["causal_self_attention", "ffn"]}})
