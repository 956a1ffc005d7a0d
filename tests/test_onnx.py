"""The ONNX backend against the PyTorch backend (onnxruntime) and against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec import build_graph, load_spec
from tfspec.backends.onnx import OnnxModel, emit, export
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec

from tests.conftest import SHIPPED

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

SCALE = 16  # shipped specs are checked at 1/16 of their widths: same structure, seconds not minutes
MAX_RADIUS = 64  # and restricted radii capped (Mistral's 4095), so the blocked check runs at ~200 tokens


DEPTH = 6  # and at most this many layers per uniform stack


def shrunk(name: str) -> Spec:
    """The shipped spec ``name`` with every width divided by SCALE, at most DEPTH layers per
    uniform stack, radii capped at MAX_RADIUS and a 300-token vocabulary."""
    data = load_spec(name).model_dump()
    for stack in ("encoder", "decoder"):  # published decoders repeat one block 22-32 times
        if data.get(stack) and data[stack].get("layers"):
            data[stack]["layers"] = min(data[stack]["layers"], DEPTH)
    for key in ("d_model", "d_ff", "d_k", "d_v"):
        data[key] = max(1, data[key] // SCALE)
    data["vocab"] |= {"size": 300, "target_size": None if data["vocab"]["target_size"] is None else 200}
    for stack in ("encoder", "decoder"):
        for group in (data[stack] or {}).get("groups") or [data[stack] or {}]:
            for layer in group.get("block") or []:
                if layer["kind"] == "restricted_self_attention":
                    layer["r"] = min(layer["r"], MAX_RADIUS)
    if data.get("image"):  # intensities stay below the special ids moved to 199
        data["image"]["levels"] = min(data["image"]["levels"], 190)
    for key in ("pad_id", "bos_id", "eos_id", "unk_id", "mask_id"):  # GPT-2's ids sit at 50256
        if (data["vocab"][key] or 0) >= 200:
            data["vocab"][key] = 199
    return Spec.model_validate(data)


VARIANTS = {
    "decoder-only, every causal kind": """
        name: dec
        family: decoder-only
        vocab: 300
        d_model: 32
        heads: 4
        d_ff: 64
        activation: gelu_tanh
        norm: pre
        positional: {kind: learned, max_len: 64}
        decoder:
          layers: 1
          block:
            - causal_self_attention
            - {kind: conv, kernel: 3, dilation: 2, causal: true}
            - {kind: conv, kernel: 3, causal: true, separable: true, activation: silu}
            - {kind: recurrent, cell: lstm}
            - {kind: recurrent, cell: gru}
            - {kind: recurrent, cell: rnn}
            - {kind: restricted_self_attention, r: 2, causal: true}
            - ffn
    """,
    "encoder-only, every bidirectional kind": """
        name: enc
        family: encoder-only
        vocab: 300
        d_model: 32
        heads: 4
        d_ff: 64
        activation: gelu
        encoder:
          layers: 1
          block:
            - self_attention
            - {kind: recurrent, cell: lstm, bidirectional: true}
            - {kind: recurrent, cell: gru, bidirectional: true}
            - {kind: conv, kernel: 4, dilation: 2}
            - {kind: conv, kernel: 3, separable: true}
            - {kind: restricted_self_attention, r: 2}
            - ffn
    """,
    "recurrent encoder-decoder, no biases, untied": """
        name: rnnmt
        vocab: {size: 300, target_size: 200, shared: false}
        d_model: 32
        heads: 2
        d_ff: 64
        tie_embeddings: none
        bias: false
        positional: none
        encoder: {layers: 1, block: [{kind: recurrent, cell: lstm, bidirectional: true}, {kind: conv, kernel: 3}]}
        decoder: {layers: 2, block: [{kind: recurrent, cell: lstm}, cross_attention, ffn]}
    """,
    "T5's relative bias shared by mixed kinds, set scales, untied output": """
        name: t5ish
        vocab: {size: 300, pad_id: 0, bos_id: 0, eos_id: 1, unk_id: 2}
        d_model: 32
        heads: 4
        d_k: 6
        d_v: 6
        d_ff: 64
        positional: {kind: relative_bias, buckets: 8, max_distance: 12}
        norm: pre
        norm_type: rms
        bias: false
        tie_embeddings: inputs
        output_scale: 0.2
        encoder: {layers: 2, block: [{kind: self_attention, scale: 1.0}, {kind: restricted_self_attention, r: 3}, ffn]}
        decoder:
          layers: 2
          block: [{kind: causal_self_attention, scale: 0.5}, {kind: cross_attention, scale: 1.0}, ffn]
    """,
}


def _export(spec, tmp_path, **kwargs):
    torch.manual_seed(0)
    model = build_module(spec)
    return model, export(model, tmp_path / "onnx", **kwargs)


def _assert_parity(result):
    failed = [str(c) for c in result.checks if not c.ok]
    assert result.checks and not failed, failed


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_specs_match_pytorch(name, tmp_path):
    """Full sequences, encoder, steps after pasts of 0/1/3/6 at batch 3 and 1, greedy tokens."""
    _, result = _export(shrunk(name), tmp_path)
    _assert_parity(result)


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_layer_kind_matches_pytorch(variant, opset, write_spec, tmp_path):
    _, result = _export(load_spec(write_spec(VARIANTS[variant])), tmp_path, opset=opset)
    _assert_parity(result)


def test_opset_23_uses_the_fused_attention_op(tmp_path):
    _, result = _export(load_spec("tiny"), tmp_path, opset=23)
    _assert_parity(result)
    ops = {n.op_type for n in onnx.load(str(tmp_path / "onnx" / "decoder.onnx")).graph.node}
    assert "Attention" in ops and "Softmax" not in ops


def test_onnx_reference_evaluator_agrees_with_onnxruntime():
    """A second, independent implementation of the ONNX operators."""
    from onnx.reference import ReferenceEvaluator

    spec = load_spec("tiny")
    torch.manual_seed(0)
    weights = {k: v.detach().numpy() for k, v in build_module(spec).named_parameters()}
    graph = build_graph(spec)
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(4, 1000, (2, 5)), rng.integers(4, 1000, (2, 4))
    src[1, 3:] = 0
    feeds = {"src": src, "tgt": tgt, "attention_mask": (src != 0).astype(np.int64),
             "decoder_attention_mask": np.ones_like(tgt)}
    proto = emit(graph, "model", weights)
    ours = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    reference = ReferenceEvaluator(proto).run(["logits"], feeds)[0]
    np.testing.assert_allclose(ours.run(["logits"], feeds)[0], reference, atol=1e-4)


def test_beam_search_gives_the_same_tokens_in_both_backends(tmp_path):
    model, result = _export(load_spec("tiny"), tmp_path)
    src = np.random.default_rng(2).integers(4, 1000, (4, 7))
    src[2, 4:] = 0
    options = SearchOptions(beam=4, alpha=0.6, max_extra=8)
    ours = search(OnnxModel(tmp_path / "onnx", device="cpu").decoder(), src, options)
    assert ours == search(TorchDecoder(model), src, options)
    assert all(len(out) <= 8 + (row != 0).sum() for out, row in zip(ours, src))


def test_a_decoder_whose_layers_carry_no_state_decodes_as_pytorch(write_spec, tmp_path):
    """A decoder-only stack of feed-forward layers has no pasts, so its step graph has no
    ``beam_rows`` (the runtime bound it anyway): it exports and greedy-decodes as PyTorch does."""
    spec = load_spec(write_spec("name: ffns\nfamily: decoder-only\nvocab: {size: 100}\nd_model: 32\nheads: 4\n"
                                "d_ff: 64\ndecoder: {layers: 2, block: [{kind: ffn}]}\n"))
    model, result = _export(spec, tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]
    prefix = np.random.default_rng(4).integers(4, 100, (3, 5))
    options = SearchOptions(beam=1, max_extra=6, max_length=11)
    ours = search(OnnxModel(tmp_path / "onnx", device="cpu").decoder(), None, options, prefix)
    assert ours == search(TorchDecoder(model), None, options, prefix)


def test_decoding_opens_only_the_step_graphs_and_scoring_opens_the_full_graph_when_run(tmp_path):
    """The full-sequence graph holds every weight again: loading an export for decoding opens the
    encoder and step graph alone, and the full graph opens on its first run, giving PyTorch's logits."""
    model, result = _export(load_spec("tiny"), tmp_path, parity=False)
    onnx_model = OnnxModel(tmp_path / "onnx", device="cpu")
    assert sorted(onnx_model.sessions) == ["decoder", "encoder"]
    src, tgt = np.random.default_rng(5).integers(4, 1000, (2, 6)), np.random.default_rng(6).integers(4, 1000, (2, 5))
    with torch.no_grad():
        want = model.eval()(torch.from_numpy(src), torch.from_numpy(tgt)).numpy()
    np.testing.assert_allclose(onnx_model.logits(src=src, tgt=tgt), want, atol=1e-4)
    assert "model" in onnx_model.sessions


def test_a_pad_started_target_keeps_its_start_token(write_spec, tmp_path):
    """T5's decoder starts from the padding id: the full-sequence graph must not hide that first
    token as padding (export's parity check feeds random targets, never the start token). Its
    log-probabilities equal the step graph's, fed one token at a time (no target padding mask
    there), and PyTorch's."""
    spec = load_spec(write_spec(VARIANTS["T5's relative bias shared by mixed kinds, set scales, untied output"]))
    assert spec.vocab.bos_id == spec.vocab.pad_id
    model, _ = _export(spec, tmp_path, parity=False)
    onnx_model = OnnxModel(tmp_path / "onnx", device="cpu")
    rng = np.random.default_rng(3)
    src, tgt = rng.integers(4, 300, (2, 6)), rng.integers(4, 300, (2, 5))
    tgt[:, 0] = spec.vocab.bos_id
    full = onnx_model.logits(src=src, tgt=tgt)
    with torch.no_grad():
        np.testing.assert_allclose(full, model.eval()(torch.from_numpy(src), torch.from_numpy(tgt)).numpy(), atol=1e-4)
    full = torch.log_softmax(torch.from_numpy(full), -1).numpy()
    decoder = onnx_model.decoder()
    state = decoder.start(src)
    for i in range(tgt.shape[1]):
        log_probs, state = decoder.run(state, tgt[:, i:i + 1], ["log_probs"])
        np.testing.assert_allclose(log_probs, full[:, i], atol=1e-4)


def test_large_models_keep_their_weights_once_in_one_external_file(tmp_path, monkeypatch):
    """Every graph of a large export refers to one data file (issue 53): the weights are on disk
    once, not once per graph."""
    import importlib

    monkeypatch.setattr(importlib.import_module("tfspec.backends.onnx.exporter"), "EXTERNAL_DATA_BYTES", 1 << 16)
    model, result = _export(load_spec("tiny"), tmp_path, parity=False)
    assert [name for name in result.files if name.endswith(".data")] == ["model.onnx.data"]
    weights = sum(p.numel() * 4 for p in model.parameters())
    assert weights <= result.files["model.onnx.data"] < 1.05 * weights
    assert sum(result.files.values()) < 1.3 * weights  # three graphs, the weights once (before: three times)
    src, tgt = np.arange(5, 8)[None], np.arange(9, 11)[None]
    logits = OnnxModel(tmp_path / "onnx", device="cpu").logits(src=src, tgt=tgt)
    with torch.no_grad():
        ref = model.eval()(torch.from_numpy(src), torch.from_numpy(tgt)).numpy()
    np.testing.assert_allclose(logits, ref, atol=1e-4)  # the weights were read back from the side files


def test_metadata_carries_spec_vocab_and_version(tmp_path):
    import json

    from tfspec import __version__

    _export(load_spec("tiny"), tmp_path, parity=False)
    meta = {p.key: p.value for p in onnx.load(str(tmp_path / "onnx" / "encoder.onnx")).metadata_props}
    assert meta["tfspec.version"] == __version__ and meta["tfspec.graph"] == "encoder"
    assert Spec.model_validate(json.loads(meta["tfspec.spec"])) == load_spec("tiny")
    assert json.loads(meta["tfspec.vocab"])["size"] == 1000


def test_fp16_graphs_stay_close(tmp_path):
    _, result = _export(load_spec("tiny"), tmp_path, fp16=True)
    _assert_parity(result)
    init = onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph.initializer
    assert {t.data_type for t in init if t.dims and len(t.dims) == 2} == {onnx.TensorProto.FLOAT16}


def test_torch_onnx_export_cross_check(tmp_path):
    """torch's own exporter, tracing the same module, agrees with the emitted graph (on
    unpadded inputs: tracing bakes in the example's no-padding branch, which is why tfspec
    emits its graphs from the IR instead)."""
    import warnings

    model, _ = _export(load_spec("tiny"), tmp_path, parity=False)
    example = (torch.randint(4, 1000, (2, 5)), torch.randint(4, 1000, (2, 4)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), example, str(tmp_path / "traced.onnx"), dynamo=False, opset_version=18,
                          input_names=["src", "tgt"], output_names=["logits"],
                          dynamic_axes={"src": {0: "batch", 1: "src_len"}, "tgt": {0: "batch", 1: "tgt_len"}})
    feeds = {"src": np.random.default_rng(4).integers(4, 1000, (3, 9)),
             "tgt": np.random.default_rng(5).integers(4, 1000, (3, 7))}
    traced = ort.InferenceSession(str(tmp_path / "traced.onnx"), providers=["CPUExecutionProvider"])
    ours = OnnxModel(tmp_path / "onnx", device="cpu")
    np.testing.assert_allclose(ours.logits(**feeds), traced.run(["logits"], feeds)[0], atol=1e-4)


def test_wide_windows_are_masked_not_blocked(tmp_path):
    """Mistral's 4096-token window (r = 4095) at a small width: the graphs mask instead of
    computing 4095 x 8190 blocks for every input, so export and its parity check stay small."""
    data = shrunk("zoo/mistral-7b").model_dump()
    data["decoder"] = data["decoder"] | {"layers": 2, "block": [{"kind": "restricted_self_attention", "r": 4095,
                                                                  "causal": True}, "ffn"]}
    model, result = _export(Spec.model_validate(data), tmp_path)
    _assert_parity(result)
    assert not any("blocked" in c.name for c in result.checks)


@pytest.mark.parametrize("version, spins", [("1.26.3", "0"), ("1.27.0", "1"), ("1.32.0", "1"), ("2.0.1", "1")])
def test_small_machines_spin_only_where_onnxruntime_bounds_the_spin(version, spins, monkeypatch):
    """On 4 cores or fewer a step's threads spin between operators, but only for a bounded
    time: an onnxruntime without ``spin_duration_us`` (before 1.27) would spin unbounded and
    take the cores from the caller, so there spinning stays off."""
    from tfspec.backends.onnx import runtime

    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(ort, "__version__", version)
    options = runtime.session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == spins
    if spins == "1":
        assert 0 < int(options.get_session_config_entry("session.intra_op.spin_duration_us")) <= 1000
    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 16)  # many cores: onnxruntime's own default
    with pytest.raises(Exception, match="does not have configuration"):
        runtime.session_options().get_session_config_entry("session.intra_op.allow_spinning")
