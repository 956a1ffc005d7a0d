"""The memory limit of a decoding step, for the benchmarks' tables.

At batch 1 a decoder step multiplies one row by every weight matrix: it reads each weight
once and does two FLOPs per weight read, so on a CPU it runs at the machine's read bandwidth,
not its arithmetic. There only fewer bytes per step go faster, and a cell is judged by the
fraction of the bandwidth it reaches: bytes of weights read per step x steps per second /
bytes per second the machine reads. Both numbers are measured here, in the benchmark's run.

Which bytes per second depends on where the weights lie. A model larger than the caches streams
from memory; a small one (`small`'s 19 MB step on a CPU with a large L3) stays in the last-level
cache between steps and is read 2-3x as fast. So the bound of a cell is the read of a buffer of
its step's size, summed again and again as steps read their weights (``read_bandwidth`` with
``size``); the read of a buffer four times the cache is the memory bandwidth.

    python tools/bench/bandwidth.py            # this machine's read bandwidth, 1 and 2 threads
    python tools/bench/bandwidth.py 19 164     # also over buffers of 19 and 164 MB
"""

from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path


def last_level_cache() -> int:
    """Bytes of the largest CPU cache Linux reports (0 where it reports none)."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = index.read_text().strip()
        sizes.append(int(text[:-1]) * {"K": 2**10, "M": 2**20}[text[-1]] if text[-1] in "KM" else int(text))
    return max(sizes, default=0)


BUFFER_BYTES = max(512 * 2**20, 4 * last_level_cache())
"""Four times the last-level cache (and at least 512 MiB), so the sum streams from memory:
some server CPUs have an L3 of 480 MiB, where a 512 MiB buffer mostly stayed in it."""


def cpu_name() -> str:
    """The CPU's model name and its widest vector extension, which the benchmarks name beside
    every table: which engine's kernels suit a CPU moves the ratios."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    pairs = (line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in pairs}
    name = " ".join(fields.get("model name", platform.processor() or platform.machine()).split())
    flags = set(fields.get("flags", "").split())
    for flag, isa in [("amx_int8", "AMX, AVX-512 VNNI"), ("avx512_vnni", "AVX-512 VNNI"), ("avx512f", "AVX-512"),
                      ("avx2", "AVX2")]:
        if flag in flags:
            return f"{name} ({isa}, L3 {last_level_cache() / 2**20:.0f} MiB)"
    return name


def read_bandwidth(threads: int, rounds: int = 7, size: int = BUFFER_BYTES) -> float:
    """Bytes per second that ``threads`` threads read: the median time to sum a float32 buffer
    of ``size`` bytes (what a matrix-vector product over that many bytes of weights must
    stream), summed back to back as often as a ``BUFFER_BYTES`` one is read once, so that a
    buffer the caches hold is timed as a decoder's steps re-read theirs. The default streams
    from memory. torch is imported here only: a benchmark reads the bandwidth in a process of
    its own."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        buffer = torch.ones(max(size // 4, 1), dtype=torch.float32)
        repeat = max(BUFFER_BYTES // size, 1)
        buffer.sum()  # pages touched before timing
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(repeat):
                buffer.sum()
            times.append((time.perf_counter() - start) / repeat)
        return buffer.numel() * 4 / statistics.median(times)
    finally:
        torch.set_num_threads(previous)


def read_bandwidths(threads: int, sizes: dict[str, int], rounds: int = 3) -> dict[str, float]:
    """``read_bandwidth`` from memory (key "memory") and over a buffer of each of ``sizes``
    (name -> bytes, e.g. each precision's step), in one process."""
    return {"memory": read_bandwidth(threads, rounds)} | {
        name: read_bandwidth(threads, rounds, size) for name, size in sizes.items()}


ROW_READERS = {"Gather", "RotaryEmbedding", "GroupQueryAttention"}
"""Operators that read a few rows of a constant table a step (the token embedding; the cos and
sin caches that RotaryEmbedding and GroupQueryAttention index by position), not the whole."""
FOUR_BITS = (21, 22, 23)
"""ONNX's UINT4, INT4 and FLOAT4E2M1 tensor types: two values a byte."""


def weights_read_per_step(step_graph: str | Path) -> int:
    """Bytes of weights one step of ``step_graph`` (an exported ``decoder.onnx``) reads: every
    initializer that a node other than ROW_READERS consumes. An embedding table only Gather
    reads gives up a few rows a step; a table tied to the output projection is read whole by it.
    Sizes come from each tensor's shape and type: external data is not loaded."""
    import math

    import onnx

    model = onnx.load(str(step_graph), load_external_data=False)
    readers: dict[str, set[str]] = {}

    def visit(graph) -> None:
        for node in graph.node:
            for name in node.input:
                readers.setdefault(name, set()).add(node.op_type)
            for attribute in node.attribute:
                for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                    visit(sub)

    visit(model.graph)
    total = 0
    for tensor in model.graph.initializer:
        if readers.get(tensor.name, set()) - ROW_READERS:
            bits = 4 if tensor.data_type in FOUR_BITS else 8 * onnx.helper.tensor_dtype_to_np_dtype(
                tensor.data_type).itemsize
            total += math.prod(tensor.dims) * bits // 8
    return total


def fraction(bytes_per_step: int, steps_per_second: float, bandwidth: float) -> float:
    """The share of ``bandwidth`` a decoder reading ``bytes_per_step`` weights reaches."""
    return bytes_per_step * steps_per_second / bandwidth


if __name__ == "__main__":
    import sys

    for n in (1, 2):
        for size in [BUFFER_BYTES] + [int(float(mb) * 1e6) for mb in sys.argv[1:]]:
            print(f"{n} thread{'s' * (n > 1)}: {read_bandwidth(n, size=size) / 1e9:.1f} GB/s read "
                  f"(sums over {size / 1e6:.0f} MB, median of 7)")
    print(cpu_name())
