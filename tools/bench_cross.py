"""Beam search with cross-attention rows per source (now) vs per hypothesis (before), same run.

Since export format 3 the step graph reads each source's cross-attention keys/values once for
all of its beams (one matrix product of `beam` queries). The layout before it, one row of
per-source values per hypothesis, still runs on the same graph: a decoder whose ``select``
gathers a row per hypothesis (groups of one). Both decode the same sources of one export
(base, random weights, exactly 64 tokens), interleaved, after a warm-up; tokens/s are medians.

    python tools/bench_cross.py                 # fp32 and int8, batch 1 and 16, beam 4; ~3 minutes
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from tfspec import load_spec
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.decoding import DeviceState, OnnxDecoder
from tfspec.backends.torch import build_module
from tfspec.search import SearchOptions, search


class PerHypothesis(OnnxDecoder):
    """The layout before format 3: per-source values gathered to one row per hypothesis."""

    def select(self, state, rows, cross):
        rows = np.ascontiguousarray(rows, np.int64)
        values = state.values
        if cross and self.shared:
            values = values | self._take({n: values[n] for n in self.shared}, state.sources[rows])
        return DeviceState(values, np.ascontiguousarray(state.rows[rows]), np.arange(len(rows)), state.offset)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="base")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam", type=int, default=4)
    args = p.parse_args()
    spec = load_spec(args.spec)
    torch.manual_seed(0)
    model = build_module(spec).eval()
    rng = np.random.default_rng(0)
    options = SearchOptions(beam=args.beam, min_length=64, max_length=64)
    print("| precision | batch | per source (tok/s) | per hypothesis (tok/s) | ratio | same sentences |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for precision in ("fp32", "int8"):
            export(model, Path(tmp) / precision, parity=False, int8=precision == "int8")
            onnx_model = OnnxModel(Path(tmp) / precision, device="cpu", threads=args.threads)
            decoders = {"source": onnx_model.decoder(), "hypothesis": PerHypothesis(onnx_model)}
            for batch in (1, 16):
                src = rng.integers(4, spec.vocab.size, (batch, 32))
                outputs = {k: search(d, src, options) for k, d in decoders.items()}  # also the warm-up
                times = {k: [] for k in decoders}
                for _ in range(args.rounds):
                    for k, d in decoders.items():
                        start = time.perf_counter()
                        search(d, src, options)
                        times[k].append(time.perf_counter() - start)
                speed = {k: batch * 64 / statistics.median(t) for k, t in times.items()}
                same = sum(a == b for a, b in zip(outputs["source"], outputs["hypothesis"]))
                print(f"| {precision} | {batch} | {speed['source']:.0f} | {speed['hypothesis']:.0f} | "
                      f"{speed['source'] / speed['hypothesis']:.2f} | {same}/{batch} |")


if __name__ == "__main__":
    main()
