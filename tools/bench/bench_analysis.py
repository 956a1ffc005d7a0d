"""Time the analysis passes: FLOPs/paths/cost of big and of a 48-layer spec, Table 1, and
path-length searches up to n = 1024 (fast layer-by-layer search vs networkx on the explicit graph).

    python tools/bench/bench_analysis.py

Runs without torch; prints Markdown rows for BENCHMARKS.md. Each timing is the best of 3 runs,
after one untimed warm-up where caching would otherwise flatter the first call.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

started = time.perf_counter()
from tfspec import build_graph, load_spec  # noqa: E402
from tfspec.analysis import complexity, cost, flops, paths, table1  # noqa: E402

IMPORTS = time.perf_counter() - started
XL = """family: decoder-only
vocab: 50257
d_model: 1600
heads: 25
d_ff: 6400
norm: pre
tie_embeddings: output
decoder: {layers: 48, block: [causal_self_attention, ffn]}
"""


def best(fn, repeat=3, clear=()):
    times = []
    for _ in range(repeat):
        for cache in clear:
            cache.cache_clear()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def analyse(ref, n=128):
    """What `tfspec report` computes beyond parameters."""
    spec = load_spec(ref)
    report = flops.analyze_flops(build_graph(spec), n)
    for row in report.layers:
        if row.layer is not None:
            complexity.layer_facts(row.layer)
            paths.path_length(row.layer, n)
    for _, stack in spec.stacks:
        paths.stack_paths([x for _, x in stack.sublayers()], n)
    cost.training_cost(report, 1000)


def layer(kind, **options):
    from tfspec.layers import SUBLAYERS

    return SUBLAYERS[kind](kind=kind, **options)


def main():
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    caches = (complexity.layer_facts, paths.reads_mask)
    with tempfile.TemporaryDirectory() as tmp:
        xl = Path(tmp) / "xl.yaml"
        xl.write_text(XL)
        print(f"| imports (tfspec, sympy, networkx, numpy) | {IMPORTS * 1000:.0f} ms |")
        for name, ref in (("big (6+6 layers), n = 128", "big"), ("48-layer decoder (GPT-2 XL shape), n = 128", xl)):
            print(f"| analysis of {name}, cold caches | {best(lambda: analyse(ref), clear=caches) * 1000:.0f} ms |")
    print(f"| `tfspec table1` rows (derive all cells), cold caches | "
          f"{best(lambda: table1.table1(128), clear=caches) * 1000:.0f} ms |")
    for label, kind in (("self-attention", layer("self_attention")), ("LSTM", layer("recurrent")),
                        ("restricted r = 4 (256 layers)", layer("restricted_self_attention", r=4)),
                        ("contiguous conv k = 3 (1023 layers)", layer("conv", kernel=3)),
                        ("dilated causal conv k = 3 (7 layers)", layer("conv", kernel=3, dilation=3, causal=True))):
        t = best(lambda: paths.path_length(kind, 1024), clear=caches)
        print(f"| path length at n = 1024, {label} | {t * 1000:.1f} ms |")
    stack = [layer("causal_self_attention"), layer("cross_attention"), layer("ffn")] * 6
    print(f"| path lengths of the base decoder (18 sub-layers) at n = 1024 | "
          f"{best(lambda: paths.stack_paths(stack, 1024), clear=caches) * 1000:.0f} ms |")
    encoder = [layer("self_attention"), layer("ffn")] * 6
    for n in (64, 128, 256):
        graph_time = best(lambda: paths.graph_distances(paths.position_graph(encoder, n), len(encoder), n), repeat=1)
        fast_time = best(lambda: paths.hop_distances(encoder, n), clear=caches)
        print(f"| base encoder (12 sub-layers) at n = {n}: networkx BFS on the explicit position graph vs "
              f"layer-by-layer search | {graph_time * 1000:.0f} ms vs {fast_time * 1000:.1f} ms |")
    assert "torch" not in sys.modules


if __name__ == "__main__":
    main()
