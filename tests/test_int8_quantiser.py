"""`export --int8` quantises tensor by tensor as it emits (``backends/onnx/passes/int8.py``), and what it
writes is what onnxruntime's ``quantize_dynamic`` wrote over the float32 graphs with the settings
the export used before (QInt8, per channel, reduce_range, MatMul and Gemm): the same nodes, the
same int8 weights and scales bit for bit, the same outputs. The reference held the whole float32
graph and its quantised copy at once; the quantiser holds one tensor's temporaries."""

from __future__ import annotations

import json
import logging
import tracemalloc
from collections import Counter

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from tfspec import load_spec
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.passes.int8 import quantize
from tfspec.backends.torch import build_module
from tfspec.spec import spec_from_data

quantization = pytest.importorskip("onnxruntime.quantization")

MOE = {"name": "m", "family": "decoder-only", "vocab": 96, "d_model": 32, "heads": 4, "d_ff": 48, "dropout": 0.0,
       "norm": "pre", "norm_type": "rms", "gated": True, "activation": "silu", "bias": True,
       "positional": {"kind": "rotary", "max_len": 64}, "embed_projection": {"width": 16, "out": "tied"},
       "decoder": {"layers": 2, "block": ["causal_self_attention",
                                          {"kind": "moe", "experts": 4, "top_k": 2, "shared": 1, "bias": True}]}}
"""Routed experts with biases, a shared expert, and the transposed tied projection (a Gemm without transB)."""
ENCODER = {"name": "e", "family": "encoder-only", "vocab": {"size": 60}, "d_model": 16, "heads": 2, "d_ff": 32,
           "positional": {"kind": "learned", "max_len": 32}, "segments": 2, "pooler": True,
           "head": {"kind": "sequence_classification", "classes": 3, "pooling": "first"},
           "encoder": {"layers": 2, "block": ["self_attention", "ffn"]}}
"""The pooler and a task head: products outside ``Builder.linear``."""
SPECS = {"tiny": lambda: load_spec("tiny"), "moe": lambda: spec_from_data(MOE, "test"),
         "encoder-head": lambda: spec_from_data(ENCODER, "test")}


def reference(float_dir, out_dir) -> None:
    """onnxruntime's quantize_dynamic over the float32 export, as `export --int8` ran it before."""
    out_dir.mkdir()
    manifest = json.loads((float_dir / "tfspec.json").read_text())
    logging.disable(logging.WARNING)
    try:
        for file in manifest["graphs"].values():
            quantization.quantize_dynamic(float_dir / file, out_dir / file, weight_type=quantization.QuantType.QInt8,
                                          per_channel=True, reduce_range=True, op_types_to_quantize=["MatMul", "Gemm"],
                                          extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        logging.disable(logging.NOTSET)
    (out_dir / "tfspec.json").write_text(json.dumps(manifest | {"int8": {}}))


def int8_tensors(path, suffixes: tuple[str, ...]) -> dict[str, dict[str, np.ndarray]]:
    """Matrix (W or W.T) -> {"q": int8 (K, N), "scale": (N,), "zero": (N,)} of a quantised graph, by the
    initializer names ours (``W[.T].int8...``) or quantize_dynamic's (``W[_Transposed]_quantized``) use."""
    found: dict[str, dict[str, np.ndarray]] = {}
    for t in onnx.load(str(path)).graph.initializer:
        for part, suffix in zip(("q", "scale", "zero"), suffixes):
            if t.name.endswith(suffix):
                weight = t.name[:-len(suffix)]  # W^T as theirs name it, as ours: W.T
                weight = weight.removesuffix("_Transposed") + ".T" if weight.endswith("_Transposed") else weight
                found.setdefault(weight, {})[part] = numpy_helper.to_array(t)
    return found


def feeds(spec, rng) -> dict[str, np.ndarray]:
    size = spec.vocab.tgt_size if spec.family == "decoder-only" else spec.vocab.size
    tokens = rng.integers(4, size, (3, 9))
    if spec.family == "encoder-decoder":
        return {"src": tokens, "tgt": rng.integers(4, spec.vocab.tgt_size, (3, 7))}
    return {"tgt" if spec.family == "decoder-only" else "src": tokens}


@pytest.mark.parametrize("name,fused", [("tiny", False), ("tiny", True), ("moe", False), ("encoder-head", False)],
                         ids=["tiny", "tiny-fused", "moe", "encoder-head"])
def test_int8_export_is_quantize_dynamic_of_the_float32_graphs(name, fused, tmp_path):
    """Standard and --fused (quantize_dynamic ran over the fused graphs, past onnxruntime's ops)."""
    spec = SPECS[name]()
    torch.manual_seed(0)
    model = build_module(spec).eval()
    with torch.no_grad():  # weights of different ranges per channel, and one all-zero row (scale 1)
        for p in model.parameters():
            p.mul_(torch.rand(p.shape[0], *[1] * (p.dim() - 1)) * 4)
        next(p for p in model.parameters() if p.dim() == 2)[0].zero_()
    export(model, tmp_path / "float", parity=False, fused=fused)
    export(model, tmp_path / "ours", parity=False, int8=True, fused=fused)
    reference(tmp_path / "float", tmp_path / "theirs")
    graphs = json.loads((tmp_path / "ours" / "tfspec.json").read_text())["graphs"]
    for file in graphs.values():
        ours = int8_tensors(tmp_path / "ours" / file, (".int8", ".int8.scales", ".int8.zero_points"))
        theirs = int8_tensors(tmp_path / "theirs" / file, ("_quantized", "_scale", "_zero_point"))
        assert ours.keys() == theirs.keys() and ours, file  # the same products quantised
        for weight, parts in theirs.items():
            for part, value in parts.items():
                np.testing.assert_array_equal(ours[weight][part], value, err_msg=f"{file}: {weight} {part}")
        ops = [Counter(n.op_type for n in onnx.load(str(tmp_path / d / file)).graph.node)
               for d in ("ours", "theirs")]
        assert ops[0] == ops[1], file
    inputs = feeds(spec, np.random.default_rng(1))
    ours, theirs = (OnnxModel(tmp_path / d, device="cpu").logits(**inputs) for d in ("ours", "theirs"))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6 * max(1.0, float(np.abs(theirs).max())))


def test_quantiser_holds_no_float32_copy_of_a_tensor():
    """One (16384, 512) float32 tensor (32 MiB) quantised: the quantiser's own allocations stay
    below half of it (its int8 result is a quarter; the rest are row-chunk temporaries), where
    any full float32 temporary (a transposed copy, w / scale in one go) would be as large."""
    w = np.random.default_rng(0).standard_normal((16384, 512), dtype=np.float32)
    tracemalloc.start()
    try:
        q, scales = quantize(w)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert q.shape == (512, 16384) and scales.shape == (16384,)
    assert peak < w.nbytes / 2, f"peak {peak / 2**20:.1f} MiB for a {w.nbytes / 2**20:.0f} MiB tensor"

