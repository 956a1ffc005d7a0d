"""Activation-aware int4 scales (``export --int4-calibrate FILE``), after AWQ (Lin et al. 2024,
§3.2): a projection's input channels that carry large activations matter most, so its weight
columns are multiplied by s = mean|x|^alpha before rounding and its input divided by s
(``int4.matmul_nbits``). alpha is searched per projection on a grid, minimising the error of
the quantised product on calibration activations (alpha 0 is plain rounding, so the search
never does worse than it on those activations).

The activations come from the float32 full-sequence graph run by onnxruntime on the
calibration text, every projection's input exposed as an extra output: the same computation
the export writes, for every family. This needs the float32 model in memory once; the
quantisation itself still streams.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .int4 import dequantize, quantize, tables

ALPHAS = np.linspace(0, 1, 11)
ROWS = 512
"""Activation rows kept per projection (a random sample) for the search."""


def channel_scales(graph, weights, sequences: list[list[int]], block: int, symmetric: bool,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """Projection weight name -> its (K,) scales, for those where a scaling beats rounding."""
    from ..graphs import emit

    proto = emit(graph, "model", weights)
    inputs = _projection_inputs(proto, set(graph.params), tables(graph))
    for name in sorted(set(inputs.values())):
        proto.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    rows = _activations(proto, sorted(set(inputs.values())), sequences, seed)
    del proto
    scales = {}
    for weight, source in inputs.items():
        best = _search(np.asarray(weights[weight], np.float32), rows[source], block, symmetric)
        if best is not None:
            scales[weight] = best
    return scales


def _projection_inputs(proto: onnx.ModelProto, params: set[str], tables: set[str]) -> dict[str, str]:
    """Weight -> the tensor its Gemm multiplies (``Builder.linear``'s flat rows)."""
    return {node.input[1]: node.input[0] for node in proto.graph.node
            if node.op_type == "Gemm" and node.input[1] in params and node.input[1] not in tables}


def _activations(proto, names: list[str], sequences: list[list[int]], seed: int) -> dict[str, np.ndarray]:
    """Each exposed tensor's rows over all sequences (one at a time: no padding), sampled."""
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name for i in session.get_inputs()}
    collected: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for ids in sequences:
        tokens = np.array([ids], np.int64)
        feed = {"tgt": tokens} | ({"attention_mask": np.ones_like(tokens)} if "attention_mask" in feeds else {})
        for name, value in zip(names, session.run(names, feed)):
            collected[name].append(value.reshape(-1, value.shape[-1]))
    rng = np.random.default_rng(seed)
    rows = {}
    for name, parts in collected.items():
        x = np.concatenate(parts)
        rows[name] = x[rng.choice(len(x), ROWS, replace=False)] if len(x) > ROWS else x
    return rows


def _search(w: np.ndarray, x: np.ndarray, block: int, symmetric: bool) -> np.ndarray | None:
    """The scales of the best alpha for ``w`` on activations ``x``, or None where alpha 0 wins."""
    want = x @ w.T
    mean = np.maximum(np.abs(x).mean(0), 1e-8)
    best, best_error = None, np.inf
    for alpha in ALPHAS:
        s = mean ** alpha
        s = (s / np.sqrt(s.max() * s.min())).astype(np.float32)
        packed, scales, zero = quantize(w * s, 4, block, symmetric)
        error = float(np.square(x @ (dequantize(packed, scales, zero, 4, w.shape[1]) / s).T - want).sum())
        if error < best_error:
            best, best_error = (None if alpha == 0 else s), error
    return best
