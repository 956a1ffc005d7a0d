"""The checks an ``--int4`` export runs: the graphs against the PyTorch model holding exactly
the weights the graphs hold (dequantised from the written bytes: a tight tolerance, since only
onnxruntime's int8 activations in the products differ; with accuracy_level 0 they agree to
1e-6), and against the float model (the quantisation error itself, within a stated tolerance
per block size). Greedy decoding is not compared token for token: the int8 activations flip
near-ties of random weights' logits; the step graph's logits are compared at every step."""

from __future__ import annotations

import re

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from tfspec.checks import Check

from .int4 import dequantize
from .parity import check_parity
from .runtime import OnnxModel

SAME_WEIGHTS = 8e-2
"""Largest |diff| against the dequantised model, relative to the largest |logit|: onnxruntime's
accuracy_level 4 quantises activations to int8 per block inside MatMulNBits, an error that grows
with a trained model's activation outliers (measured: 1.4% on tiny random models, 1.8% on
Llama-2-7B's first layer, 6.1% at one step of a 3M-parameter Llama trained here). A wrong packing
or scale errs by the logits' own size, so it still fails; the quantisation's cost is the check
against float32 and, on text, tools/quant_quality.py."""
FLOAT_RMS = {32: 0.35, 64: 0.4, 128: 0.45}
"""Largest RMS difference of the logits from float32's, relative to their RMS, per block size:
the 4-bit error of random weights (trained models' perplexity tells more: BENCHMARKS.md)."""
QUANTISED = re.compile(r"^(?P<weight>.+)\.q(?P<bits>[48])b\d+(?P<zero>z?)(?P<aware>a?)$")


def check_int4(onnx_model: OnnxModel, model, block: int, seed: int = 0) -> list[Check]:
    """Both checks of the module docstring, on the parity inputs (``parity.check_parity``).
    ``model`` is changed in place to hold the graphs' weights (no second copy in memory)."""
    feeds = _tokens(model, seed)
    with torch.no_grad():
        want = model.eval()(*map(torch.from_numpy, feeds.values())).numpy()
    got = onnx_model.logits(**feeds)
    rms = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    same = dequantised(model, onnx_model.directory / onnx_model.manifest["graphs"]["model"])
    tolerance = SAME_WEIGHTS * logit_scale(same, seed)
    checks = [Check(f"{c.name} (the graphs' int4 weights, in PyTorch)", c.diff, c.tolerance)
              for c in check_parity(onnx_model, same, tolerance=tolerance, seed=seed)
              if not c.name.startswith("greedy")]  # int8 activations flip a random model's near-ties
    checks.append(Check("full-sequence logits vs float32, RMS relative to theirs", rms, FLOAT_RMS[block]))
    return checks


def dequantised(model, path) -> torch.nn.Module:
    """``model``, its quantised weights replaced (in place) by those of graph ``path``, dequantised."""
    proto = onnx.load(str(path))
    values = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    same = model
    params = dict(same.named_parameters())
    with torch.no_grad():
        for name, value in values.items():
            found = QUANTISED.match(name)
            if found is None or found["weight"] not in params:
                continue
            weight = found["weight"]
            w = dequantize(value, values[f"{name}.scales"], values.get(f"{name}.zero_points"), int(found["bits"]),
                           params[weight].shape[1])
            if found["aware"]:  # the columns were scaled by the activation-aware factors
                w = w / values[f"{weight}.awq"]
            params[weight].copy_(torch.from_numpy(w))
    return same


def logit_scale(model, seed: int = 0) -> float:
    """The largest |logit| of ``model`` on random tokens: what SAME_WEIGHTS is relative to."""
    with torch.no_grad():
        return float(model(*map(torch.from_numpy, _tokens(model, seed).values())).abs().max())


def _tokens(model, seed: int) -> dict[str, np.ndarray]:
    """Random unpadded token inputs for the model's ports (src and/or tgt), in that order."""
    rng, vocab, ports = np.random.default_rng(seed), model.graph.spec.vocab, model.graph.ports
    sizes = {"src": vocab.size, "tgt": vocab.tgt_size}
    return {port: rng.integers(4, size, (3, 9)) for port, size in sizes.items() if port in ports}
