"""Rotary angles at long-context positions (~128k): PyTorch and onnxruntime must turn queries
and keys alike. A float32 product position x frequency is off by up to half a unit in the last
place of the angle (2^-7 at 131,000 rad), which moved cos by 2e-3 and the logits by 8e-4.

Reference: the PyTorch backend, which computes the angles in float64; the ONNX side is the
genai graph, the one export fed positions as data (``position_ids``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec.backends.onnx.variants.genai import export_genai
from tfspec.backends.torch import DecodeState, build_module
from tfspec.spec import Spec

START, NEW = 131_064, 8
"""The last 8 positions of a 131,072-position context (Llama 3.1's 128k)."""
SCALINGS = {"plain": None,
            "dynamic": {"type": "dynamic", "factor": 32.0, "original_max_position_embeddings": 4096}}


def spec(scaling) -> Spec:
    positional = {"kind": "rotary", "max_len": 131_072, "base": 500_000.0}
    return Spec.model_validate({
        "name": "m", "family": "decoder-only", "vocab": 50, "d_model": 32, "heads": 2, "d_ff": 32, "dropout": 0.0,
        "norm": "pre", "norm_type": "rms", "positional": positional | ({"scaling": scaling} if scaling else {}),
        "decoder": {"layers": 1, "block": ["causal_self_attention", "ffn"]}})


@pytest.mark.parametrize("case", SCALINGS)
@torch.no_grad()
def test_logits_at_128k_positions_agree_between_backends(case, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = build_module(spec(SCALINGS[case])).eval()
    for p in model.parameters():
        p.normal_(0, 0.5)
    export_genai(model, tmp_path, parity=False)
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    tokens = np.arange(3, 3 + NEW)[None]
    feeds = {"input_ids": tokens, "attention_mask": np.ones((1, NEW), np.int64),
             "position_ids": START + np.arange(NEW)[None]}  # empty caches: positions alone place the tokens
    for past in (i for i in session.get_inputs() if i.name.startswith("past_key_values")):
        feeds[past.name] = np.zeros((1, past.shape[1], 0, past.shape[3]), np.float32)
    theirs = session.run(["logits"], feeds)[0]
    ours = model.run({"tgt": torch.from_numpy(tokens)}, state=DecodeState(offset=START))["logits"].numpy()
    np.testing.assert_allclose(theirs, ours, atol=2e-5, rtol=0)
