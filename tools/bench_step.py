"""One decoding step, two exports side by side: how much a change to the emitted graphs moves
the step time, with nothing else (search, host copies, encoder) in the measurement.

Each export directory's ``decoder.onnx`` runs the same step (one new token per row, ``past``
positions already cached, random pasts and cross-attention keys/values) at batch 1, 16 and 64;
the directories take turns within each round and medians are compared, so the ratio is a
same-run ratio even on a shared machine.

    tfspec export small -o before        # on the old commit
    tfspec export small -o after         # on the new one
    python tools/bench_step.py before after
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort

from tfspec.backends.onnx.runtime import session_options


def feeds(session, batch: int, past: int, src: int = 32) -> dict[str, np.ndarray]:
    """Inputs for one step of ``session``'s step graph."""
    sizes = {"batch": batch, "past_batch": batch, "src_batch": batch, "new_len": 1, "past_len": past, "src_len": src,
             "total_len": past + 1}
    rng, out = np.random.default_rng(0), {}
    for i in session.get_inputs():
        shape = [sizes.get(d, d) if isinstance(d, str) else d for d in i.shape]
        if i.name == "top_k":
            out[i.name] = np.array([4], np.int64)
        elif i.name == "beam_rows":
            out[i.name] = np.arange(batch, dtype=np.int64)
        elif i.name == "offset":
            out[i.name] = np.array(past, np.int64)
        elif i.type == "tensor(int64)":
            out[i.name] = np.full(shape, 5, np.int64)
        elif i.name == "memory_bias":
            out[i.name] = np.zeros(shape, np.float32)
        else:
            out[i.name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("exports", nargs=2, help="two `tfspec export` directories: before, after")
    p.add_argument("--past", type=int, default=20, help="cached positions (default 20)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    options = session_options(args.threads)  # what `tfspec translate` runs with
    sessions = [ort.InferenceSession(f"{d}/decoder.onnx", options) for d in args.exports]
    print(f"step time (ms, median of {args.rounds} rounds of 20 steps), past {args.past}:")
    for batch in (1, 16, 64):
        inputs = [feeds(s, batch, args.past) for s in sessions]
        times: list[list[float]] = [[], []]
        for _ in range(args.rounds):
            for i, session in enumerate(sessions):
                start = time.perf_counter()
                for _ in range(20):
                    session.run(["top_ids"], inputs[i])
                times[i].append((time.perf_counter() - start) / 20 * 1e3)
        before, after = (statistics.median(t) for t in times)
        print(f"  batch {batch:3d}: {before:8.3f} -> {after:8.3f}   before/after {before / after:.2f}x")


if __name__ == "__main__":
    main()
