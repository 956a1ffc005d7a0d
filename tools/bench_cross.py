"""Beam search with cross-attention rows per source (now) vs per hypothesis (before), same run.

Since export format 3 the step graph reads each source's cross-attention keys/values once for
all of its beams (one matrix product of `beam` queries). The layout before it, one row of
per-source values per hypothesis, still runs on the same graph: a decoder whose ``select``
gathers a row per hypothesis (groups of one). Both decode the same sources of one export
(base, random weights, exactly 64 tokens), each in a fresh process of its own every round
(tools/isolated.py), the two alternating which goes first, after a warm-up; tokens/s are
medians.

    python tools/bench_cross.py                 # fp32 and int8, batch 1 and 16, beam 4; ~3 minutes
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from bandwidth import cpu_name
from isolated import Job, interleave
from peer_bare import timed
from tfspec import load_spec
from tfspec.backends.onnx import export
from tfspec.backends.onnx.runtime.decoding import DeviceState, OnnxDecoder


BATCHES = (1, 16)


class PerHypothesis(OnnxDecoder):
    """The layout before format 3: per-source values gathered to one row per hypothesis."""

    def select(self, state, rows, cross):
        rows = np.ascontiguousarray(rows, np.int64)
        values = state.values
        if cross and self.shared:
            values = values | self._take({n: values[n] for n in self.shared}, state.sources[rows])
        return DeviceState(values, np.ascontiguousarray(state.rows[rows]), np.arange(len(rows)), state.offset)


def decodes(threads: int, directory: str, layout: str, sources: list[str], beam: int) -> dict:
    """In a worker: seconds to decode each .npy of ``sources`` (exactly 64 tokens) with one
    layout, after a warm-up decode of each, and the warm-up's outputs."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.search import SearchOptions, search

    model = OnnxModel(directory, device="cpu", threads=threads)
    decoder = model.decoder() if layout == "source" else PerHypothesis(model)
    options, outputs = SearchOptions(beam=beam, min_length=64, max_length=64), []
    rows = [np.load(path) for path in sources]
    warm = [lambda src=src: outputs.append([[int(t) for t in o] for o in search(decoder, src, options)])
            for src in rows]
    return {"seconds": timed([lambda src=src: search(decoder, src, options) for src in rows], warm),
            "outputs": outputs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="base")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam", type=int, default=4)
    args = p.parse_args()
    import torch

    from tfspec.backends.torch import build_module

    spec = load_spec(args.spec)
    torch.manual_seed(0)
    model = build_module(spec).eval()
    rng = np.random.default_rng(0)
    print(f"each layout in a fresh process of its own every round; {cpu_name()}")
    print("| precision | batch | per source (tok/s) | per hypothesis (tok/s) | ratio | same sentences |\n"
          "|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        sources = []
        for batch in BATCHES:
            np.save(Path(tmp) / f"src-{batch}.npy", rng.integers(4, spec.vocab.size, (batch, 32)))
            sources.append(str(Path(tmp) / f"src-{batch}.npy"))
        for precision in ("fp32", "int8"):
            export(model, Path(tmp) / precision, parity=False, int8=precision == "int8")
            jobs = {layout: Job("bench_cross", "decodes", ("onnxruntime",), {
                "directory": str(Path(tmp) / precision), "layout": layout, "sources": sources, "beam": args.beam})
                for layout in ("source", "hypothesis")}
            results = interleave(jobs, args.rounds, args.threads)
            for i, batch in enumerate(BATCHES):
                speed = {k: batch * 64 / statistics.median(r["seconds"][i] for r in runs)
                         for k, runs in results.items()}
                same = sum(a == b for a, b in zip(*(results[k][0]["outputs"][i] for k in ("source", "hypothesis"))))
                print(f"| {precision} | {batch} | {speed['source']:.0f} | {speed['hypothesis']:.0f} | "
                      f"{speed['source'] / speed['hypothesis']:.2f} | {same}/{batch} |")


if __name__ == "__main__":
    main()
