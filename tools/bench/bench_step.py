"""One decoding step, two exports side by side: how much a change to the emitted graphs moves
the step time, with nothing else (search, host copies, encoder) in the measurement.

Each export directory's ``decoder.onnx`` runs the same step (one new token per row, ``past``
positions already cached, random pasts and cross-attention keys/values) at batch 1, 16 and 64;
each directory runs in a fresh process of its own every round (tools/bench/isolated.py: two
sessions in one process compete for its cores), the two alternating which goes first, and
medians are compared, so the ratio is a same-run ratio even on a shared machine.

    tfspec export small -o before        # on the old commit
    tfspec export small -o after         # on the new one
    python tools/bench/bench_step.py before after
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from bandwidth import cpu_name
from isolated import Job, interleave
from peer_bare import timed

BATCHES = (1, 16, 64)


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


def steps(threads: int, directory: str, past: int) -> list[float]:
    """In a worker: ms per step of ``directory``'s step graph at each batch (20 steps back to
    back, after one), with the session options `tfspec translate` runs with."""
    import onnxruntime as ort

    from tfspec.backends.onnx.runtime import session_options

    session = ort.InferenceSession(f"{directory}/decoder.onnx", session_options(threads))
    calls = [lambda i=feeds(session, batch, past): session.run(["top_ids"], i) for batch in BATCHES]
    return [1e3 * t for t in timed(calls, calls, repeat=20)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("exports", nargs=2, help="two `tfspec export` directories: before, after")
    p.add_argument("--past", type=int, default=20, help="cached positions (default 20)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    jobs = {name: Job("bench_step", "steps", ("onnxruntime",), {"directory": d, "past": args.past})
            for name, d in zip(("before", "after"), args.exports)}
    results = interleave(jobs, args.rounds, args.threads)
    print(f"step time (ms, median of {args.rounds} rounds of 20 steps, each export in a fresh process of its own "
          f"every round), past {args.past}; {cpu_name()}:")
    for i, batch in enumerate(BATCHES):
        before, after = (statistics.median(r[i] for r in results[name]) for name in ("before", "after"))
        print(f"  batch {batch:3d}: {before:8.3f} -> {after:8.3f}   before/after {before / after:.2f}x")


if __name__ == "__main__":
    main()
