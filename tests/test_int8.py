"""`export(..., int8=True)` (the in-memory route: training runs' int8 exports, `evaluate --int8`,
`tfspec export --int8 --shortlist`): quantised graphs that stay close to the float32 model they replace.

The reference is the PyTorch backend in float32: int8 logits must stay within a few percent of
its range (a saturating int8 kernel was off by 40%), and the greedy agreement the export records
is recounted here by a decoding loop of its own over the float32 and the int8 step graphs.
(`tfspec export --int8` streams: tests/test_int8_streamed.py.)
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

from tfspec import load_spec
from tfspec.backends.onnx import export
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import save_weights

pytest.importorskip("onnxruntime")


def test_export_int8(cli, tmp_path):
    torch.manual_seed(3)  # weights whose int8 greedy tokens differ in part of two sentences (76/96, 6/8)
    model = build_module(load_spec("tiny")).eval()
    save_weights(model, tmp_path / "w.safetensors")
    result = export(model, tmp_path / "m", int8=True)
    assert result.ok
    manifest = json.loads((tmp_path / "m" / "tfspec.json").read_text())
    record = manifest["int8"]
    assert record == result.int8 and record["greedy_tokens"] == 96 and 0 <= record["greedy_tokens_equal"] <= 96
    code, _, err = cli("export", "tiny", "--weights", tmp_path / "w.safetensors", "-o", tmp_path / "f", "--no-check")
    assert code == 0, err
    # the parity inputs (export.agreement): 8 random sources of 11 ids, 12 tokens each, EOS forbidden
    src = np.random.default_rng(0).integers(4, 1000, (8, 11))
    int8, fp32 = (greedy(tmp_path / d, src, steps=12) for d in ("m", "f"))
    tokens, sentences = int((int8 == fp32).sum()), int((int8 == fp32).all(1).sum())
    assert (record["greedy_tokens_equal"], record["sentences_equal"], record["sentences"]) == (tokens, sentences, 8)
    assert 0 < sentences < 8 and tokens != 12 * sentences  # some tokens differ, not whole sentences: miscounts show
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


def greedy(directory, src: np.ndarray, steps: int) -> np.ndarray:
    """(B, steps) greedy tokens of tiny (EOS=2 never chosen, BOS=1 first), decoded step by step
    with the directory's encoder and step graphs in plain onnxruntime sessions, all rows at once
    (int8 activations are quantised per tensor: the batch shares their scale)."""
    import onnxruntime as ort

    encoder, step = (ort.InferenceSession(str(directory / f"{kind}.onnx"), providers=["CPUExecutionProvider"])
                     for kind in ("encoder", "decoder"))
    inputs = {i.name: i.shape for i in step.get_inputs()}
    shared = [n for n in inputs if n.startswith("cross.") or n == "memory_bias"]
    feeds = dict(zip(shared, encoder.run(shared, {"src": src, "attention_mask": np.ones_like(src)})))
    feeds |= {n: np.zeros([len(src) if d == "past_batch" else 0 if isinstance(d, str) else d for d in shape],
                          np.float32) for n, shape in inputs.items() if n.startswith("past.")}
    presents = [n.replace("past.", "present.", 1) for n in inputs if n.startswith("past.")]
    tokens, out = np.full((len(src), 1), 1), []
    for _ in range(steps):
        log_probs, *state = step.run(["log_probs", *presents], feeds | {
            "tgt": tokens, "top_k": np.array([1]), "beam_rows": np.arange(len(src))})
        log_probs[:, 2] = -np.inf
        tokens = log_probs.argmax(1)[:, None]
        out.append(tokens[:, 0])
        feeds |= {n.replace("present.", "past.", 1): v for n, v in zip(presents, state)}
    return np.stack(out, 1)


def test_int8_and_fp16_exclude_each_other(cli, tmp_path):
    code, _, err = cli("export", "tiny", "-o", tmp_path / "m", "--int8", "--fp16")
    assert code == 2 and "--int8" in err and "--fp16" in err

