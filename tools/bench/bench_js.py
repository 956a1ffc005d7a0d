"""generate.onnx from Python, Node.js and a browser: onnxruntime, onnxruntime-node and
onnxruntime-web (WASM in headless Chromium) running the same graph on the same inputs.

The lines (the first N of a corpus split) become ids as `tfspec translate` makes them, and
every engine decodes the same batches with the same feeds: translate's batches (sorted by
length, 32 a batch), cut where the length changes only for exports made before max_extra became
a plain input (clients/lib/translator.mjs says why). Python onnxruntime uses
tfspec's session options (all cores, no spinning threads on small machines), Node.js the same
(clients/node/open-export.mjs), the page WASM with as many threads as cores (COOP/COEP served).
Each round runs every engine in a fresh process of its own (Python in a worker of
tools/bench/isolated.py, Node.js in a node process, the page in a new Chromium), which translates
twice and times the second run (the first carries one-time costs); rounds rotate which engine
goes first and medians are reported as output tokens/s (each output and its end of sentence,
as translate counts them). Node.js's outputs must equal Python's.

    python tools/bench/bench_js.py small-onnx                       # 100 sample test lines, greedy and beam 4
    python tools/bench/bench_js.py small-onnx --data corpus/en-de --lines 200 --rounds 5 --no-browser
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bandwidth import cpu_name
from isolated import Job, interleave
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checks"))  # the page's driver is the web check's
from web_check import REPO, drive, missing, serve

NODE_BENCH = REPO / "clients" / "node" / "bench.mjs"


def python_engine(model: Path, lines: list[str], beam: int, threads: int):
    """(run, decode): ``run`` translates ``lines`` once with Python onnxruntime, returning each
    line's output ids and the tokens made; ``decode`` turns ids into text."""
    import onnxruntime as ort

    from tfspec.backends.onnx.runtime import session_options
    from tfspec.cli.deploy import Codec
    from tfspec.evaluate import batches
    from tfspec.spec import spec_from_data

    manifest = json.loads((model / "tfspec.json").read_text())
    spec = spec_from_data(manifest["spec"], "tfspec.json")
    session = ort.InferenceSession(str(model / "generate.onnx"), session_options(threads),
                                   providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    rows_limited = "max_extra" in names  # older exports gave it a default, which JS could not feed
    codec, limit = Codec(model, spec), spec.positional.max_len if spec.positional.kind != "none" else None
    sources = [codec.encode(line, n, limit) for n, line in enumerate(lines, 1)]
    groups = batches([len(s) for s in sources], 32) if rows_limited else one_length([len(s) for s in sources], 32)
    cap = limit - 1 if limit else 2**40
    scalar = lambda v: np.array(v, np.int64)  # noqa: E731

    def run() -> tuple[list[list[int]], int]:
        outputs: list[list[int]] = [[] for _ in lines]
        tokens = 0
        for rows in groups:
            width = max(len(sources[i]) for i in rows)
            ids = np.full((len(rows), width), spec.vocab.pad_id, np.int64)
            for r, i in enumerate(rows):
                ids[r, :len(sources[i])] = sources[i]
            feeds = {"input_ids": ids, "max_length": scalar(cap if rows_limited else min(width + 50, cap)),
                     "num_beams": scalar(beam), "length_penalty": np.array(0.6, np.float32)}
            if rows_limited:
                feeds["max_extra"] = scalar(50)
            if "attention_mask" in names:
                real = np.array([len(sources[i]) for i in rows])
                feeds["attention_mask"] = (np.arange(width)[None, :] < real[:, None]).astype(np.int64)
            if "min_length" in names:
                feeds["min_length"] = scalar(0)
            sequences, lengths = session.run(["sequences", "sequences_lengths"], feeds)
            for r, i in enumerate(rows):
                outputs[i] = sequences[r, :lengths[r]].tolist()
                tokens += int(lengths[r]) + 1
        return outputs, tokens
    return run, codec.decode


def one_length(lengths: list[int], size: int) -> list[list[int]]:
    """translator.mjs's ``batches`` with ``oneLength``: translate's, also cut where the length changes."""
    out: list[list[int]] = []
    for i in sorted((i for i, n in enumerate(lengths) if n), key=lambda i: lengths[i]):
        if not out or len(out[-1]) >= size or lengths[out[-1][0]] != lengths[i]:
            out.append([])
        out[-1].append(i)
    return out


def timed_python(threads: int, model: str, lines: list[str], beam: int) -> tuple[float, list[str]]:
    """In a worker: output tokens/s of the second of two runs (text decoded after the clock
    stops, as in Node.js), and the text."""
    run, decode = python_engine(Path(model), lines, beam, threads)
    run()
    start = time.perf_counter()
    outputs, tokens = run()
    return tokens / (time.perf_counter() - start), [decode(ids) for ids in outputs]


def timed_node(model: Path, file: Path, beam: int) -> tuple[float, list[str]]:
    """``timed_python`` for clients/node/bench.mjs, in a node process of its own."""
    done = subprocess.run(["node", str(NODE_BENCH), str(model), str(file), str(beam), "2"], capture_output=True,
                          text=True, check=True)
    warm = json.loads(done.stdout)[-1]
    return warm["tokens"] / warm["seconds"], warm["outputs"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path, help="an export with generate.onnx (and tokenizer.json for text)")
    p.add_argument("--data", type=Path, help="a corpus directory (default: the shipped sample)")
    p.add_argument("--split", default="test")
    p.add_argument("--lines", type=int, default=100)
    p.add_argument("--beams", default="1,4")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-browser", action="store_true")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    args = p.parse_args()
    from tfspec.data import sample_dir
    from tfspec.data.corpus import load_manifest

    data = args.data or sample_dir()
    lines = (data / f"{args.split}.{load_manifest(data)['src']}").read_text(encoding="utf-8").splitlines()[:args.lines]
    browser = not args.no_browser and not missing(args.chromium)
    speeds: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as work, serve(args.model) as url:
        file = Path(work) / "lines.txt"
        file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        for beam in map(int, args.beams.split(",")):
            engines = {"Python onnxruntime": Job("bench_js", "timed_python", ("onnxruntime",),
                                                 {"model": str(args.model), "lines": lines, "beam": beam}),
                       "onnxruntime-node": lambda beam=beam: timed_node(args.model, file, beam)}
            if browser:
                engines["onnxruntime-web (Chromium)"] = lambda beam=beam: timed_page(url, lines, args.chromium, beam)
            results = interleave(engines, args.rounds, os.cpu_count())  # Python: all cores, as Node.js and the page
            if any(outputs != results["Python onnxruntime"][0][1] for _, outputs in results["onnxruntime-node"]):
                sys.exit(f"error: Node.js's outputs differ from Python's at beam {beam}")
            for name, runs in results.items():
                speeds[name, beam] = [rate for rate, _ in runs]
    report(speeds, args, len(lines))
    return 0


def timed_page(url: str, lines: list[str], chromium: str, beam: int) -> tuple[float, None]:
    """``timed_python`` for the page, in a Chromium of its own (its outputs are not compared)."""
    page = drive(url, lines, argparse.Namespace(chromium=chromium, beam=beam, timeout=1800))
    return page["runs"][-1]["tokens"] / page["runs"][-1]["seconds"], None


def report(speeds: dict, args, n: int) -> None:
    cpu = cpu_name()
    print(f"generate.onnx of {args.model.name}, {n} lines, median of {args.rounds} rounds, each engine in a fresh "
          f"process of its own every round; {cpu}")
    print("| engine | beam | tokens/s | vs Python onnxruntime |\n|---|---:|---:|---:|")
    for (engine, beam), rates in speeds.items():
        base = statistics.median(speeds[("Python onnxruntime", beam)])
        print(f"| {engine} | {beam} | {statistics.median(rates):,.0f} | {statistics.median(rates) / base:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
