"""Local 2D attention at linear cost: time and peak memory against the number of pixels.

One attention layer's attention (queries, keys and values given: the part Table 1 counts),
forward, batch 1, 8 heads of 64 (d = 512), over square grey images of side 16 .. 128 in raster
order (n = 256 .. 16,384 positions), with the Image Transformer's 2D setting scaled to one
channel: causal, query blocks of 8 x 16 pixels, memory flange 8 rows up and 16 columns each side.

  local 2D    tfspec's ``local_2d_self_attention``: each query block against its gathered
              8+8 x 16+32 memory block (``backends/torch/local2d.py``)
  mask        the same attention as an n x n boolean mask over all scores (SDPA), up to 64 x 64

Each point runs in a fresh process: time is the median of 3 calls after a warm-up, peak memory
is the process's peak RSS minus its RSS once the inputs exist. The growth exponents are
least-squares slopes of log(time) and log(memory) against log(pixels).

    python tools/bench/bench_local2d.py                 # ~2 minutes on 2 cores
    python tools/bench/bench_local2d.py --quick         # sides <= 64: a smoke test
"""

from __future__ import annotations

import argparse
import json
import platform

from bench_restricted import fit, in_subprocess, measured

TAKES = "~2 minutes on 2 cores"
"""How long a run takes (tools/README.md lists it)."""
HEADS, D_HEAD = 8, 64
LAYER = {"block": (8, 16), "memory": (8, 16), "causal": True}
METHODS = {"local": "local 2D, blocks 8x16, flange 8/16", "mask": "n x n mask, same attention"}


def attention_point(method: str, side: int, threads: int) -> dict:
    """Forward of one attention over a side x side image (run in a fresh process)."""
    import torch
    import torch.nn.functional as F

    from tfspec.backends.torch.attention import self_attention
    from tfspec.backends.torch.model import RunContext
    from tfspec.layers.local2d import Local2dSelfAttention

    torch.set_num_threads(threads)
    n = side * side
    layer = Local2dSelfAttention(width=side, **LAYER)
    q, k, v = (torch.randn(1, n, HEADS, D_HEAD) for _ in range(3))

    def call():
        with torch.no_grad():
            if method == "local":
                return self_attention(RunContext(False, {}), layer, "S", q, k, v, 0.0)
            i = torch.arange(n)
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  attn_mask=layer.visible(i[:, None], i[None, :]))

    return measured(call, repeats=3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sides <= 64 only")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--point", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.point:
        print(json.dumps(attention_point(*json.loads(args.point))))
        return
    top = 64 if args.quick else 128
    sides = {"local": [s for s in (16, 32, 48, 64, 96, 128) if s <= top], "mask": [16, 32, 48, 64]}
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads; "
          f"batch 1, {HEADS} heads x {D_HEAD}, forward\n")
    print("| attention | image | pixels | time (s) | peak memory (MB) |\n|---|---|---:|---:|---:|")
    fits = {}
    for method, ss in sides.items():
        points = [(s, in_subprocess(method, s, args.threads, script=__file__)) for s in ss]
        points = [(s * s, r) for s, r in points if r is not None]
        for n, r in points:
            side = int(n ** 0.5)
            print(f"| {METHODS[method]} | {side}x{side} | {n:,} | {r['seconds']:.4f} | {r['peak_mb']:.0f} |", flush=True)
        if measured_fit := fit(points):
            fits[method] = measured_fit
    print("\n| attention | pixels | time exponent | memory exponent |\n|---|---|---:|---:|")
    for method, (t, m, ns) in fits.items():
        print(f"| {METHODS[method]} | {ns[0]:,}-{ns[-1]:,} | {t:.2f} | {m:.2f} |")


if __name__ == "__main__":
    main()
