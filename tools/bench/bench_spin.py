"""How onnxruntime's idle threads wait between operators: spinning off, a bounded spin (what
tfspec sets on machines of 4 cores or fewer), or onnxruntime's default, measured on whole
decodes (the host work between steps included), side by side in one run.

Each setting gets its own sessions over the same export, in a fresh process of its own every
round (tools/bench/isolated.py: one setting's spinning threads would take the cores of another's),
the settings taking turns in rotated order; medians are compared. ``--busy`` runs one
CPU-bound process beside them, as on a shared machine, where a spinning thread takes a core
the caller needs.

    tfspec export base -o base-int8 --int8
    python tools/bench/bench_spin.py base-int8
    python tools/bench/bench_spin.py base-int8 --busy
"""

from __future__ import annotations

import argparse
import importlib.metadata
import multiprocessing
import statistics

import numpy as np

from bandwidth import cpu_name
from isolated import Job, interleave
from peer_bare import timed
from tfspec.backends.onnx import runtime

SHIPPED = f"{runtime.SPIN_US} us"
SETTINGS = {
    "off": {"session.intra_op.allow_spinning": "0"},
    SHIPPED: dict(runtime.spinning(importlib.metadata.version("onnxruntime"))),
    "default": {"session.intra_op.allow_spinning": "1"},
}
CELLS = [(1, 1), (1, 4), (16, 1)]  # (batch, beam)


def decoder(directory: str, threads: int, entries: dict[str, str]):
    """The export's ONNX decoder with sessions made under ``entries``."""
    import onnxruntime as ort

    from tfspec.backends.onnx import OnnxModel

    def options(threads=None):
        made = ort.SessionOptions()
        made.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        made.intra_op_num_threads = threads
        for key, value in entries.items():
            made.add_session_config_entry(key, value)
        return made

    shipped, runtime.session_options = runtime.session_options, options
    try:
        return OnnxModel(directory, device="cpu", threads=threads).decoder()
    finally:
        runtime.session_options = shipped


def decodes(threads: int, export: str, setting: str) -> list[float]:
    """In a worker: seconds per decode (32 source tokens -> exactly 64) at each cell under one
    setting, after a decode at each."""
    from tfspec.search import SearchOptions, search

    dec, rng = decoder(export, threads, SETTINGS[setting]), np.random.default_rng(0)
    calls = [lambda src=rng.integers(4, 1000, (batch, 32)).astype(np.int64), beam=beam: search(
        dec, src, SearchOptions(beam=beam, alpha=0.6, min_length=64, max_length=64)) for batch, beam in CELLS]
    return timed(calls, calls)


def _spin_forever() -> None:
    while True:
        pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export", help="a `tfspec export` directory")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--busy", action="store_true", help="one CPU-bound process runs beside the decodes")
    args = p.parse_args()
    busy = multiprocessing.Process(target=_spin_forever, daemon=True) if args.busy else None
    if busy:
        busy.start()
    print(f"{args.export}: 32 source tokens -> exactly 64, {args.threads} threads, median of {args.rounds} rounds, "
          f"each setting in a fresh process of its own every round; onnxruntime "
          f"{importlib.metadata.version('onnxruntime')}, {cpu_name()}"
          f"{', one busy process beside' if busy else ''}")
    print("| setting | " + " | ".join(f"{name} (tok/s)" for name in SETTINGS) + f" | {SHIPPED} / off | default / off |")
    print("|---" * (len(SETTINGS) + 3) + "|")
    try:
        results = interleave({name: Job("bench_spin", "decodes", ("onnxruntime",), {"export": args.export,
                                                                                      "setting": name})
                              for name in SETTINGS}, args.rounds, args.threads)
        for i, (batch, beam) in enumerate(CELLS):
            speed = {name: batch * 64 / statistics.median(r[i] for r in runs) for name, runs in results.items()}
            print(f"| batch {batch}, {'greedy' if beam == 1 else f'beam {beam}'} | "
                  + " | ".join(f"{speed[name]:.0f}" for name in SETTINGS)
                  + f" | {speed[SHIPPED] / speed['off']:.2f} | {speed['default'] / speed['off']:.2f} |")
    finally:
        if busy:
            busy.terminate()


if __name__ == "__main__":
    main()
