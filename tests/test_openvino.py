"""Exported graphs are portable: OpenVINO (CPU) compiles every graph tfspec writes (the static
step graph included) and computes what onnxruntime computes, on the same inputs.

A second runtime catches what one runtime tolerates: graphs that only onnxruntime accepts
(an empty name for an omitted trailing input once made OpenVINO refuse the step graphs).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tfspec.backends.onnx import export
from tfspec.backends.torch import build_module

from tests.test_onnx import shrunk

ov = pytest.importorskip("openvino")
ort = pytest.importorskip("onnxruntime")

SPECS = ["tiny", "zoo/lstm-attention", "zoo/convs2s", "zoo/transformer-relative", "zoo/transformer-rotary",
         "zoo/universal", "zoo/gpt2", "zoo/bert-base", "table3/E1"]
SIZES = {"batch": 2, "src_len": 5, "tgt_len": 4, "new_len": 2, "past_len": 3, "total_len": 5, "max_len": 6, "src_batch": 1}


def feeds(session, rng, vocab: int) -> dict[str, np.ndarray]:
    """Inputs for every input of ``session``: random ids, random past states, no masking."""
    out = {}
    for i in session.get_inputs():
        shape = [SIZES.get(d, 3) if isinstance(d, str) or d is None else d for d in i.shape]
        if i.name in ("src", "tgt", "segments"):
            out[i.name] = rng.integers(4 if i.name != "segments" else 0, vocab if i.name != "segments" else 2,
                                       shape).astype(np.int64)
        elif i.name == "cross_rows":  # rows of src_batch: one source shared by the batch
            out[i.name] = np.zeros(shape, np.int64)
        elif i.type == "tensor(int64)" and len(shape) == 1 and i.shape[0] == "batch":  # rows to gather
            out[i.name] = np.arange(shape[0])[::-1].copy()
        elif i.type == "tensor(int64)":  # top_k, offset
            out[i.name] = np.full(shape, 2, np.int64) if shape else np.array(3, np.int64)
        elif i.name == "memory_bias":
            out[i.name] = np.zeros(shape, np.float32)
        else:
            out[i.name] = (0.5 * rng.standard_normal(shape)).astype(np.float32)
    return out


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
@pytest.mark.parametrize("name", SPECS)
def test_openvino_compiles_and_matches_onnxruntime(name, int8, tmp_path):
    torch.manual_seed(0)
    spec = shrunk(name)
    export(build_module(spec), tmp_path, parity=False, int8=int8, static_cache=True)
    manifest = json.loads((tmp_path / "tfspec.json").read_text())
    core, rng = ov.Core(), np.random.default_rng(0)
    for kind, file in manifest["graphs"].items():
        session = ort.InferenceSession(str(tmp_path / file), providers=["CPUExecutionProvider"])
        # float32 asked for: on CPUs with AVX512-BF16 OpenVINO otherwise runs matrix products in bf16
        compiled = core.compile_model(core.read_model(str(tmp_path / file)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        inputs = feeds(session, rng, min(spec.vocab.size, spec.vocab.tgt_size))
        names = [o.name for o in session.get_outputs() if o.type != "tensor(int64)"]  # ids: ties may break apart
        expected = dict(zip(names, session.run(names, inputs)))
        got = compiled(inputs)
        for output in compiled.outputs:
            if output.get_any_name() in expected:
                ref = expected[output.get_any_name()]
                # int8: both quantise activations at run time, and a rounding step apart early on grows
                # through the layers (a saturating kernel was off by 40% of the range, not 2%)
                tolerance = 1e-4 if not int8 else 2e-2 * max(1.0, float(np.abs(ref).max()))
                assert np.abs(got[output] - ref).max() <= tolerance, (kind, output.get_any_name())
