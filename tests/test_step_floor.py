"""tools/bench/step_floor.py: the graph of a step's matrix products holds exactly the step's weight
matrices (the PyTorch module's decoder matrices and its tied output projection) and computes
their products."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "bench"))

from step_floor import matrices, products_graph  # noqa: E402

from tfspec import load_spec  # noqa: E402
from tfspec.backends.onnx import export  # noqa: E402
from tfspec.backends.torch import build_module  # noqa: E402


def test_the_products_graph_reads_the_step_graphs_weight_matrices(tmp_path):
    import onnxruntime as ort

    spec = load_spec("tiny")
    torch.manual_seed(0)
    model = build_module(spec).eval()
    export(model, tmp_path, parity=False)
    found = matrices(str(tmp_path / "decoder.onnx"))
    # the step reads the decoder's matrices but not the cross-attention key/value projection
    # (applied to the encoder's output once, before the steps) and the tied table as the projection
    expected = [p.detach().numpy().T for name, p in model.named_parameters()
                if name.startswith("decoder.layers.") and p.ndim == 2 and ".w_kv" not in name]
    expected.append(model.state_dict()["encoder.embed.weight"].numpy().T)
    key = lambda w: (w.shape, float(np.abs(w).sum()))  # noqa: E731
    assert sorted(map(key, found)) == sorted(map(key, expected))
    session = ort.InferenceSession(products_graph(found), providers=["CPUExecutionProvider"])
    rows = {f"x{i}": np.random.default_rng(i).standard_normal((3, w.shape[0])).astype(np.float32)
            for i, w in enumerate(found)}
    for out, (x, w) in zip(session.run(None, rows), zip(rows.values(), found)):
        np.testing.assert_allclose(out, x @ w, rtol=1e-4, atol=1e-4)


def test_mkls_matrix_vector_products_equal_numpys():
    """The MKL column computes the same products as the step (y = x @ W, W as the graph holds it)."""
    from step_floor import mkl_gemv

    bind = mkl_gemv(1)
    if bind is None:
        pytest.skip("this PyTorch build has no MKL")
    rng = np.random.default_rng(0)
    for k, n in [(256, 768), (1024, 256), (7, 3)]:
        w, x, y = rng.standard_normal((k, n)).astype(np.float32), rng.standard_normal(k).astype(np.float32), \
            np.full(n, np.nan, np.float32)
        bind(np.ascontiguousarray(w.T), x, y)()
        np.testing.assert_allclose(y, x @ w, rtol=1e-4, atol=1e-4)
