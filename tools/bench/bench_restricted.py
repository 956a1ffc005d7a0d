"""Restricted attention at linear cost: time and peak memory against n, in one run.

Three ways to compute one attention layer's attention (queries, keys and values given: the
part Table 1 counts), forward and backward, batch 1, 8 heads of 64 (d = 512):

  blocked     tfspec's restricted attention, r = 64: blocks of 64 queries against the 192 keys
              of their neighbouring blocks (``banded_attention``)
  band mask   the same attention as most toolkits write it: SDPA over all n x n scores with a
              boolean band mask (what tfspec does below three blocks)
  full        unrestricted self-attention (SDPA, no mask)

Each point runs in a fresh process: time is the median of 3 calls after a warm-up, peak
memory is the process's peak RSS minus its RSS once the inputs exist. The growth exponents are
least-squares slopes of log(time) and log(memory) against log(n). Then onnxruntime runs a
6-layer restricted-attention encoder (r = 64, d = 512) exported by tfspec, at n up to 16k,
again with time and peak memory per point (and the same encoder with full attention, as far
as memory allows).

    python tools/bench/bench_restricted.py                 # ~6 minutes on 2 cores
    python tools/bench/bench_restricted.py --quick         # n <= 4k: a smoke test
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TAKES = "~6 minutes on 2 cores"
"""How long a run takes (tools/README.md lists it)."""
HEADS, D_HEAD, R = 8, 64, 64
METHODS = {"blocked": "blocked, r = 64", "mask": "band mask (n x n), r = 64", "full": "full attention"}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def attention_point(method: str, n: int, threads: int) -> dict:
    """Forward + backward of one attention at length n (run in a fresh process)."""
    import torch
    import torch.nn.functional as F

    from tfspec.backends.torch.attention import banded_attention
    from tfspec.backends.torch.model import RunContext
    from tfspec.layers.restricted import RestrictedSelfAttention

    torch.set_num_threads(threads)
    layer = RestrictedSelfAttention(r=R)
    q, k, v = (torch.randn(1, n, HEADS, D_HEAD, requires_grad=True) for _ in range(3))

    def call():
        if method == "blocked":
            y = banded_attention(RunContext(True, {}), layer, "S", q, k, v, 0.0)
        else:
            mask = None
            if method == "mask":
                i = torch.arange(n)
                mask = layer.visible(i[:, None], i[None, :])
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               attn_mask=mask)
        y.sum().backward()

    return measured(call, repeats=3)


def onnx_point(directory: str, n: int, threads: int) -> dict:
    """One onnxruntime forward pass of the exported encoder at length n (fresh process)."""
    from tfspec.backends.onnx import OnnxModel

    model = OnnxModel(directory, device="cpu", threads=threads)
    tokens = np.random.default_rng(0).integers(4, 1000, (1, n))
    return measured(lambda: model.logits(src=tokens), repeats=2)


def measured(call, repeats: int) -> dict:
    """Median seconds of ``repeats`` calls after a warm-up one, and the peak memory (MB) the
    calls took above what the process held before them."""
    base = rss_mb()
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"seconds": float(np.median(times)), "peak_mb": peak_mb() - base}


def in_subprocess(*args, script: str = __file__) -> dict | None:
    """Run ``script --point args`` (one point) in a fresh interpreter; None when it fails (out
    of memory, killed). The last argument is the thread count, left out of the message."""
    done = subprocess.run([sys.executable, script, "--point", json.dumps(args)], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"    {list(args[:-1])}: failed ({done.stderr.strip().splitlines()[-1:] or done.returncode})")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def exponent(ns, ys) -> float:
    return float(np.polyfit(np.log(ns), np.log(ys), 1)[0])


def fit(points: list[tuple[int, dict]]) -> tuple[float, float, list[int]] | None:
    """Time and peak-memory exponents of measured (size, result) points and their sizes; None
    with fewer than three points."""
    if len(points) < 3:
        return None
    ns = [n for n, _ in points]
    return (exponent(ns, [r["seconds"] for _, r in points]),
            exponent(ns, [max(r["peak_mb"], 1.0) for _, r in points]), ns)


def export_encoder(kind: str, directory: Path, max_len: int) -> None:
    import torch

    from tfspec.backends.onnx import export
    from tfspec.backends.torch import build_module
    from tfspec.spec import Spec

    block = [{"kind": "restricted_self_attention", "r": R} if kind == "blocked" else "self_attention", "ffn"]
    spec = Spec.model_validate({"name": f"encoder-{kind}", "family": "encoder-only", "vocab": 1000, "d_model": 512,
                                "heads": HEADS, "positional": {"kind": "sinusoidal", "max_len": max_len},
                                "encoder": {"layers": 6, "block": block}})
    torch.manual_seed(0)
    result = export(build_module(spec), directory)
    if not result.ok:
        raise SystemExit(f"export failed: {result}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="n <= 4096 only")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--point", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.point:
        kind, *rest = json.loads(args.point)
        print(json.dumps(attention_point(*rest) if kind == "attention" else onnx_point(*rest)))
        return
    top = 4096 if args.quick else 32768
    sizes = {"blocked": [n for n in (1024, 2048, 4096, 8192, 16384, 32768) if n <= top],
             "mask": [n for n in (1024, 2048, 4096, 8192) if n <= top],
             "full": [n for n in (1024, 2048, 4096, 8192) if n <= top]}
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads; "
          f"batch 1, {HEADS} heads x {D_HEAD}, forward + backward\n")
    print("| attention | n | time (s) | peak memory (MB) |\n|---|---:|---:|---:|")
    fits = {}
    for method, ns in sizes.items():
        points = [(n, in_subprocess("attention", method, n, args.threads)) for n in ns]
        points = [(n, r) for n, r in points if r is not None]
        for n, r in points:
            print(f"| {METHODS[method]} | {n:,} | {r['seconds']:.3f} | {r['peak_mb']:.0f} |", flush=True)
        if measured_fit := fit(points):
            fits[method] = measured_fit
    print("\n| attention | n range | time exponent | memory exponent |\n|---|---|---:|---:|")
    for method, (t, m, ns) in fits.items():
        print(f"| {METHODS[method]} | {ns[0]:,}-{ns[-1]:,} | {t:.2f} | {m:.2f} |")

    print("\nonnxruntime, 6-layer encoder (d = 512, 8 heads, d_ff 2048), batch 1, forward:\n")
    print("| encoder | n | time (s) | peak memory (MB) |\n|---|---:|---:|---:|")
    onnx_sizes = {"blocked": [n for n in (1024, 4096, 16384) if n <= top], "full": [n for n in (1024, 4096) if n <= top]}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, ns in onnx_sizes.items():
            directory = Path(tmp) / kind
            export_encoder(kind, directory, max(ns))
            points = [(n, in_subprocess("onnx", str(directory), n, args.threads)) for n in ns]
            for n, r in points:
                if r is not None:
                    label = "restricted r = 64 (blocked)" if kind == "blocked" else "full attention"
                    print(f"| {label} | {n:,} | {r['seconds']:.3f} | {r['peak_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
