"""The memory limit of a decoding step, for the benchmarks' tables.

At batch 1 a decoder step multiplies one row by every weight matrix: it reads each weight
once and does two FLOPs per weight read, so on a CPU it runs at the machine's read bandwidth,
not its arithmetic. There only fewer bytes per step go faster, and a cell is judged by the
fraction of the bandwidth it reaches: bytes of weights read per step x steps per second /
bytes per second the machine reads. Both numbers are measured here, in the benchmark's run.

    python tools/bandwidth.py            # this machine's read bandwidth, 1 and 2 threads
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

BUFFER_BYTES = 512 * 2**20
"""Far larger than any cache, so the sum streams from memory."""


def read_bandwidth(threads: int, rounds: int = 7) -> float:
    """Bytes per second that ``threads`` threads read: the median time to sum a 512 MiB
    float32 buffer (what a matrix-vector product over 512 MiB of weights must stream)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        buffer = torch.ones(BUFFER_BYTES // 4, dtype=torch.float32)
        buffer.sum()  # pages touched before timing
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            buffer.sum()
            times.append(time.perf_counter() - start)
        return BUFFER_BYTES / statistics.median(times)
    finally:
        torch.set_num_threads(previous)


def weights_read_per_step(step_graph: str | Path) -> int:
    """Bytes of weights one step of ``step_graph`` (an exported ``decoder.onnx``) reads: every
    initializer that a node other than Gather consumes. An embedding table only Gather reads
    gives up a few rows a step; a table tied to the output projection is read whole by it."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(step_graph))
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
        if readers.get(tensor.name, set()) - {"Gather"}:
            total += numpy_helper.to_array(tensor).nbytes
    return total


def fraction(bytes_per_step: int, steps_per_second: float, bandwidth: float) -> float:
    """The share of ``bandwidth`` a decoder reading ``bytes_per_step`` weights reaches."""
    return bytes_per_step * steps_per_second / bandwidth


if __name__ == "__main__":
    for n in (1, 2):
        print(f"{n} thread{'s' * (n > 1)}: {read_bandwidth(n) / 1e9:.1f} GB/s read (sum over 512 MiB, median of 7)")
