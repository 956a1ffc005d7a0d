"""`tfspec export --int8`: quantised graphs that stay close to the float32 model they replace.

The reference is the PyTorch backend in float32: int8 logits must stay within a few percent of
its range (a saturating int8 kernel was off by 40%), and the export reports greedy agreement.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

from tfspec import load_spec
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import save_weights

pytest.importorskip("onnxruntime")


def test_export_int8(cli, tmp_path):
    torch.manual_seed(0)
    model = build_module(load_spec("tiny")).eval()
    save_weights(model, tmp_path / "w.safetensors")
    code, out, err = cli("export", "tiny", "--weights", tmp_path / "w.safetensors", "-o", tmp_path / "m", "--int8")
    assert code == 0, err
    assert "parity: ok" in out and "greedy tokens equal to float32" in out
    manifest = json.loads((tmp_path / "m" / "tfspec.json").read_text())
    record = manifest["int8"]
    assert record["greedy_tokens"] == 96 and 0 <= record["greedy_tokens_equal"] <= 96
    for file in manifest["graphs"].values():
        ops = [n.op_type for n in onnx.load(str(tmp_path / "m" / file)).graph.node]
        assert "MatMulInteger" in ops and "Gemm" not in ops  # every weight matrix quantised
    from tfspec.backends.onnx import OnnxModel

    rng = np.random.default_rng(1)
    src, tgt = rng.integers(4, 1000, (3, 9)), rng.integers(4, 1000, (3, 7))
    with torch.no_grad():
        ref = model(torch.from_numpy(src), torch.from_numpy(tgt)).numpy()
    ours = OnnxModel(tmp_path / "m").logits(src=src, tgt=tgt)
    assert np.abs(ours - ref).max() < 0.05 * np.abs(ref).max()


def test_int8_and_fp16_exclude_each_other(cli, tmp_path):
    code, _, err = cli("export", "tiny", "-o", tmp_path / "m", "--int8", "--fp16")
    assert code == 2 and "--int8" in err and "--fp16" in err

