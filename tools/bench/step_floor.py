"""Where a decoding step's time goes: the whole step graph against its matrix products alone.

A step at batch 1 multiplies one row by every weight matrix, so its floor on a CPU is the time
onnxruntime's matrix-product kernels (MLAS) take to read those matrices; everything else in the
step (attention, norms, the softmax and top-k, the runtime's dispatch) comes on top. This tool
times, each in a fresh process of its own every round (tools/bench/isolated.py), the export's step
graph (``decoder.onnx``, one new token per row after ``--past`` cached positions) and a graph
holding only its weight matrices' products (every Gemm and MatMul whose weight is an
initializer, each fed a row of its own: the same bytes through the same kernels, none of the
rest), at batch 1, 16 and 64, with the session options `tfspec translate` runs with; and the
read bandwidth over a buffer of the step's weight bytes (tools/bench/bandwidth.py), the bound of a
batch-1 step that reads each weight once. Beside them, where PyTorch's x86 wheel carries Intel
MKL, the same batch-1 products through MKL's ``sgemv`` (another library's kernels, in a process of
its own): whether a better matrix-vector kernel than MLAS's would lower the floor, and by how much.

    tfspec export small -o small --fused
    python tools/bench/step_floor.py small
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from bandwidth import cpu_name, weights_read_per_step
from bench_step import BATCHES
from isolated import Job, interleave
from peer_bare import timed


def matrices(step_graph: str) -> list[np.ndarray]:
    """The (K, N) weight of every Gemm and MatMul of ``step_graph`` whose weight is an
    initializer, as the product reads it (a Gemm's ``transB`` undone)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(step_graph)
    weights = {t.name: t for t in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type in ("Gemm", "MatMul") and node.input[1] in weights:
            w = numpy_helper.to_array(weights[node.input[1]])
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            found.append(w.T if attrs.get("transB", 0) else w)
    return [w for w in found if w.ndim == 2 and w.dtype == np.float32]


def products_graph(weights: list[np.ndarray]) -> bytes:
    """An ONNX graph of one MatMul per weight, each on an input row (batch, K) of its own."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inputs, outputs, inits = [], [], [], []
    for i, w in enumerate(weights):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(w), f"w{i}"))
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, ["batch", w.shape[0]]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, ["batch", w.shape[1]]))
        nodes.append(helper.make_node("MatMul", [f"x{i}", f"w{i}"], [f"y{i}"]))
    graph = helper.make_graph(nodes, "products", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


def products(threads: int, directory: str) -> list[float]:
    """In a worker: ms per run of the step graph's matrix products alone at each batch (20 runs
    back to back, after one)."""
    import onnxruntime as ort

    from tfspec.backends.onnx.runtime import session_options

    weights = matrices(f"{directory}/decoder.onnx")
    session = ort.InferenceSession(products_graph(weights), session_options(threads))
    rng = np.random.default_rng(0)
    calls = [lambda f={f"x{i}": rng.standard_normal((batch, w.shape[0])).astype(np.float32)
                       for i, w in enumerate(weights)}: session.run(None, f) for batch in BATCHES]
    return [1e3 * t for t in timed(calls, calls, repeat=20)]


def mkl_gemv(threads: int):
    """``bind(w_t, x, y)`` -> a call that computes y = w_t @ x through Intel MKL's Fortran
    ``sgemv``, for a float32 (N, K) C-ordered ``w_t`` (a (K, N) matrix in column order); None
    where PyTorch's CPU library exports no ``sgemv_`` (a build without MKL). A bound call costs
    ~1 us of its own: ctypes with its arguments made once, no PyTorch dispatch."""
    import ctypes

    import torch

    torch.set_num_threads(threads)  # MKL runs on PyTorch's OpenMP pool
    gemv = getattr(ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")), "sgemv_", None)
    if gemv is None:
        return None
    f32, ref = ctypes.c_float, ctypes.byref
    ptr = lambda a: a.ctypes.data_as(ctypes.POINTER(f32))  # noqa: E731  (holds the array)

    def bind(w_t: np.ndarray, x: np.ndarray, y: np.ndarray):
        n, k = (ctypes.c_int(d) for d in w_t.shape)
        args = (ref(ctypes.c_char(b"T")), ref(k), ref(n), ref(f32(1.0)), ptr(w_t), ref(k), ptr(x),
                ref(ctypes.c_int(1)), ref(f32(0.0)), ptr(y), ref(ctypes.c_int(1)))
        return lambda: gemv(*args)
    return bind


def products_mkl(threads: int, directory: str) -> list[float]:
    """In a worker: ms per pass of the step graph's batch-1 matrix products through MKL's
    sgemv (20 passes back to back, after one), or [] without MKL."""
    bind = mkl_gemv(threads)
    if bind is None:
        return []
    rng = np.random.default_rng(0)
    calls = [bind(np.ascontiguousarray(w.T), rng.standard_normal(w.shape[0]).astype(np.float32),
                  np.empty(w.shape[1], np.float32)) for w in matrices(f"{directory}/decoder.onnx")]

    def products():
        for call in calls:
            call()
    return [1e3 * t for t in timed([products], [products], repeat=20)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export", type=Path, help="a `tfspec export` directory (float32)")
    p.add_argument("--past", type=int, default=20, help="cached positions (default 20)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    if not (args.export / "decoder.onnx").is_file():
        sys.exit(f"step_floor: {args.export} has no decoder.onnx (a `tfspec export` directory of an encoder-decoder "
                 f"or decoder-only model)")
    step_bytes = weights_read_per_step(args.export / "decoder.onnx")
    jobs = {"step": Job("bench_step", "steps", ("onnxruntime",), {"directory": str(args.export), "past": args.past}),
            "products": Job("step_floor", "products", ("onnxruntime",), {"directory": str(args.export)}),
            "mkl": Job("step_floor", "products_mkl", ("torch",), {"directory": str(args.export)})}
    reads = []
    read = Job("bandwidth", "read_bandwidth", ("torch",), {"rounds": 3, "size": step_bytes})
    results = interleave(jobs, args.rounds, args.threads, lambda: reads.append(read.run(args.threads)[0]))
    bandwidth = statistics.median(reads)
    print(f"{args.export}: {step_bytes / 1e6:.1f} MB of weights a step; read bandwidth over that many bytes "
          f"{bandwidth / 1e9:.1f} GB/s ({args.threads} threads), so a batch-1 step reads them in "
          f"{1e3 * step_bytes / bandwidth:.3f} ms at best; median of {args.rounds} rounds, each graph in a fresh "
          f"process of its own every round, past {args.past}; {cpu_name()}")
    mkl = statistics.median(r[0] for r in results["mkl"]) if all(results["mkl"]) else None
    print("| batch | step (ms) | matrix products alone (ms) | the rest (ms) | products' read (GB/s) "
          "| products through MKL's sgemv (ms) |\n|---|---|---|---|---|---|")
    for i, batch in enumerate(BATCHES):
        step, alone = (statistics.median(r[i] for r in results[name]) for name in ("step", "products"))
        other = f"{mkl:.3f} ({step_bytes / mkl / 1e6:.1f} GB/s)" if mkl and batch == 1 else \
            "no MKL in this PyTorch" if batch == 1 else "-"
        print(f"| {batch} | {step:.3f} | {alone:.3f} | {step - alone:.3f} | {step_bytes / alone / 1e6:.1f} | {other} |")


if __name__ == "__main__":
    main()
