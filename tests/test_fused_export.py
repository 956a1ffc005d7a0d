"""`export --fused`: onnxruntime's fused operators compute what the standard-op graphs compute.

The reference is the portable export of the same weights (itself checked against PyTorch by
`export`'s parity check): full-sequence logits and step log-probabilities within 1e-5, greedy
and beam-4 tokens equal; onnxruntime's own optimiser is shown not to make these fusions.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from tfspec import load_spec
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import build_module
from tfspec.search import SearchOptions, search

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

ROTARY_DECODER = """
    name: rotary-decoder
    family: decoder-only
    vocab: 300
    d_model: 32
    heads: 4
    kv_heads: 2
    d_ff: 64
    activation: silu
    norm: pre
    norm_type: rms
    bias: false
    positional: {kind: rotary}
    decoder: {layers: 2, block: [causal_self_attention, ffn]}
"""
FUSED = {"MultiHeadAttention", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}


def exports(spec, root, **kwargs):
    """The standard and the fused export of one model (same weights)."""
    torch.manual_seed(0)
    model = build_module(spec)
    for name, fused in (("standard", False), ("fused", True)):
        export(model, root / name, parity=False, fused=fused, **kwargs)
    return OnnxModel(root / "standard", device="cpu"), OnnxModel(root / "fused", device="cpu")


def ops(directory, graph: str) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(directory / f"{graph}.onnx")).graph.node)


def inputs(spec, rng, batch: int, length: int) -> dict[str, np.ndarray]:
    size = spec.vocab.tgt_size
    tokens = {"tgt": rng.integers(4, size, (batch, length))}
    return tokens | ({"src": rng.integers(4, spec.vocab.size, (batch, length + 2))}
                     if spec.family == "encoder-decoder" else {})


def step_log_probs(model, spec, src, prefix, steps: int) -> list[np.ndarray]:
    """log_probs of ``steps`` greedy steps of the step graph, fed its own choices."""
    dec = model.decoder()
    state = dec.start(src)
    if src is None:  # decoder-only: one empty state per row, as search makes it
        state = dec.select(state, np.zeros(len(prefix), np.int64), cross=True)
    tokens, out = prefix, []
    for _ in range(steps):
        log_probs, state = dec.run(state, tokens, ["log_probs"])
        out.append(log_probs)
        tokens = log_probs.argmax(-1)[:, None]
    return out


@pytest.mark.parametrize("name", ["tiny", "small", "rotary"])
def test_fused_export_equals_the_standard_one(name, tmp_path, write_spec):
    spec = load_spec(write_spec(ROTARY_DECODER) if name == "rotary" else name)
    if name == "small":  # its shape at a tenth of the vocabulary: seconds, not a minute
        spec = spec.model_copy(update={"vocab": spec.vocab.model_copy(update={"size": 800})})
    standard, fused = exports(spec, tmp_path)
    made = ops(tmp_path / "fused", "decoder")
    layers = spec.decoder.layers
    assert made["MultiHeadAttention"] == layers * (1 if name == "rotary" else 2)  # self (+ cross) per layer
    if name == "rotary":  # the residual sums read by the next RMSNorm
        assert made["SkipSimplifiedLayerNormalization"] >= layers
    else:  # LayerNorms keep their Add (onnxruntime's SkipLayerNormalization is the slower: ``fused``)
        assert made["LayerNormalization"] >= 2 * layers and not made["SkipLayerNormalization"]
    rng = np.random.default_rng(1)
    feeds = inputs(spec, rng, 3, 5)
    want, got = standard.logits(**feeds), fused.logits(**feeds)
    assert np.abs(want - got).max() < 1e-5
    src = feeds.get("src")
    prefix = np.full((3, 1), spec.vocab.bos_id) if src is not None else feeds["tgt"][:, :3]
    for a, b in zip(step_log_probs(standard, spec, src, prefix, 6), step_log_probs(fused, spec, src, prefix, 6)):
        assert np.abs(a - b).max() < 1e-5
    for beam in (1, 4):
        options = SearchOptions(beam=beam, max_extra=10, max_length=10, min_length=10 if beam == 1 else 0)
        args = (src, options) if src is not None else (None, options, prefix)
        assert search(fused.decoder(), *args) == search(standard.decoder(), *args)


def test_onnxruntime_does_not_fuse_them_itself(tmp_path):
    """What --fused adds: onnxruntime's full optimisation of the standard step graph (what a
    session runs) has none of the fused operators, and more nodes than the fused graph."""
    torch.manual_seed(0)
    export(build_module(load_spec("tiny")), tmp_path / "standard", parity=False)
    counts = {}
    for name in ("standard", "fused"):
        if name == "fused":
            export(build_module(load_spec("tiny")), tmp_path / name, parity=False, fused=True)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(tmp_path / f"{name}-optimised.onnx")
        ort.InferenceSession(str(tmp_path / name / "decoder.onnx"), options, providers=["CPUExecutionProvider"])
        counts[name] = ops(tmp_path, f"{name}-optimised")
    assert not FUSED & set(counts["standard"])
    assert sum(counts["fused"].values()) < sum(counts["standard"].values())


def test_fused_int8_quantises_the_same_products(tmp_path):
    """--fused --int8: the same matrix products quantised (the fused operators stay float32),
    greedy tokens those of the standard int8 export."""
    standard, fused = exports(load_spec("tiny"), tmp_path, int8=True)
    a, b = ops(tmp_path / "standard", "decoder"), ops(tmp_path / "fused", "decoder")
    assert a["DynamicQuantizeMatMul"] + a["MatMulInteger"] == b["DynamicQuantizeMatMul"] + b["MatMulInteger"] > 0
    assert b["MultiHeadAttention"] == 4
    src = np.random.default_rng(2).integers(4, 1000, (4, 9))
    options = SearchOptions(beam=1, max_extra=8, max_length=8, min_length=8)
    assert search(fused.decoder(), src, options) == search(standard.decoder(), src, options)


def test_cli_fused_translates_as_the_standard_export(cli, tmp_path):
    for flags in ([], ["--fused"]):
        code, out, _ = cli("export", "tiny", "-o", tmp_path / ("fused" if flags else "standard"), *flags)
        assert code == 0 and "parity: ok" in out
    lines = tmp_path / "in.txt"
    lines.write_text("5 6 7 8 9\n10 11 12\n", encoding="utf-8")
    outs = [cli("translate", tmp_path / d, lines, "--beam", "4")[1] for d in ("standard", "fused")]
    assert outs[0] == outs[1] and outs[0].strip()


@pytest.mark.parametrize("flags", [["--fp16"], ["--generate"], ["--format", "hf"]])
def test_cli_refuses_fused_with_what_it_cannot_serve(cli, tmp_path, flags):
    code, out, err = cli("export", "tiny", "-o", tmp_path / "out", "--fused", *flags, "--no-check")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "--fused" in errors[0] and "Traceback" not in err
