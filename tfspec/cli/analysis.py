"""The analysis side of the CLI: ``table1``, ``plot``, and the FLOP, path and cost part of ``report``.

The analysis modules import sympy, so they are imported inside the commands: ``tfspec
validate`` and the other commands do not pay for it.
"""

from __future__ import annotations

import json

from tfspec.cli.tables import render
from tfspec.cli.types import POSITIVE, integer, out_file
from tfspec.spec.bounds import MAX_STEPS, MAX_WIDTH

DEFAULT_N = 25
"""Sequence length reports use by default: a sentence, the paper's unit of translation; FLOPs
per token hardly depend on n while n << d (attention's n^2 terms are small)."""


def sci(x: float | None) -> str:
    """3.15e9, not 3.15e+09."""
    return "" if x is None else f"{x:.3g}".replace("e+0", "e").replace("e+", "e")


def add_report_options(c) -> None:
    c.add_argument("--n", type=POSITIVE, default=DEFAULT_N,
                   help=f"sequence length (source and target) for FLOPs and paths (default: {DEFAULT_N})")
    c.add_argument("--steps", type=integer(1, MAX_STEPS), help="training steps for the cost estimate (default: the spec's "
                   "reference.train_steps, e.g. 100000 for base)")
    c.add_argument("--tokens-per-step", type=integer(1, MAX_STEPS), default=None,
                   help="target tokens per training step (default: 25000, the paper's batches, §5.1)")


def register(command) -> None:
    """Add ``table1`` and ``plot`` through the CLI's ``command(name, fn, description)``."""
    c = command("table1", cmd_table1,
                "Derive Table 1 (complexity per layer, sequential operations, maximum path length) from the "
                "one-layer specs in specs/table1 and print each cell beside the paper's, with exact counts at "
                "--n and --d.")
    c.add_argument("--n", type=POSITIVE, default=128, help="sequence length for the exact counts (default: 128)")
    c.add_argument("--d", type=integer(1, MAX_WIDTH), help="model width d for the exact counts (default: the specs', 512)")
    c.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    c.add_argument("--measure", action="store_true",
                   help="also time one layer of each kind on this machine (GPU when present; ~1-2 min on a "
                        "laptop CPU) and fit the growth exponents of time in n and in d")
    c = command("plot", cmd_plot,
                "Draw per-layer FLOPs against n, with the n = d crossover of §4, and the measured growth of "
                "the maximum path length, for the layer kinds of SPEC or of Table 1. Needs matplotlib "
                "(pip install 'tfspec[plot]').")
    c.add_argument("spec", metavar="SPEC", nargs="?", help="a spec (default: the rows of Table 1)")
    c.add_argument("-o", "--output", required=True, type=out_file, help="file to write: .png or .svg")
    c.add_argument("--d", type=integer(1, MAX_WIDTH), help="model width (default: the specs')")
    c.add_argument("--measure", action="store_true",
                   help="add the Table 1 kinds' measured times against n beside their analytic curves")


def _layer_rows(spec, graph, n):
    """(FlopReport, per-op-kind JSON rows, per-stack path summaries) at length n."""
    from tfspec.analysis.asymptotics import big_o
    from tfspec.analysis.complexity import layer_facts
    from tfspec.analysis.flops import SYMBOLS, analyze_flops
    from tfspec.analysis.paths import path_length, sequential_ops, stack_paths

    report = analyze_flops(graph, n)
    rows = []
    for row in report.layers:
        entry = {"stack": row.stack, "layer": row.label, "count": row.count, "names": list(row.names),
                 "formula": str(row.formula), "forward_flops": row.forward, "forward_flops_needed": row.needed,
                 "complexity": big_o(row.formula, SYMBOLS)}
        if row.layer is not None:
            facts = layer_facts(row.layer)
            entry |= {"complexity": facts.complexity,
                      "sequential_ops": {"class": facts.sequential_ops, "at_n": sequential_ops(row.layer, n)},
                      "max_path_length": {"class": facts.max_path_length, "at_n": path_length(row.layer, n)}}
        rows.append(entry)
    stacks = {}
    for name, stack in spec.stacks:
        layers = [layer.resolved(spec) for _, layer in stack.sublayers()]
        paths = stack_paths(layers, n)
        stacks[name] = {"sublayers": len(layers), "sequential_ops": sum(sequential_ops(x, n) for x in layers),
                        "max_path_length": paths.longest, "reach": paths.reach, "causal": paths.causal}
    return report, rows, stacks


def _training(spec, report, args):
    from tfspec.analysis.cost import TOKENS_PER_STEP, training_cost

    steps = args.steps or (spec.reference.train_steps if spec.reference else None)
    if steps is None:
        return None
    return training_cost(report, steps, args.tokens_per_step or TOKENS_PER_STEP,
                         spec.reference.row if spec.reference else None)


def report_json(spec, graph, args) -> dict:
    """The ``flops``, ``layers``, ``paths``, ``training_cost`` and ``kv_cache`` keys of ``report --format json``."""
    report, rows, stacks = _layer_rows(spec, graph, args.n)
    cost = _training(spec, report, args)
    return {"flops": report.to_json(), "layers": rows, "paths": stacks,
            "training_cost": cost.to_json() if cost else None, "kv_cache": _cache(spec, graph, args.n, "json")}


def _cache(spec, graph, n: int, form: str):
    """The decoding cache (tfspec.analysis.kvcache) as JSON or as text lines; None/[] without a decoder."""
    from tfspec.analysis.kvcache import analyze_kv_cache

    if spec.decoder is None:
        return None if form == "json" else []
    cache = analyze_kv_cache(graph, n)
    if form == "json":
        return cache.to_json()
    limits = [layer.limit for layer in cache.layers if layer.limit is not None]
    capped = f"; {len(limits)} sliding-window layers keep at most {max(limits):,} positions" if limits else ""
    cross = f" (cross-attention: {cache.m} source positions)" if any(layer.source for layer in cache.layers) else ""
    return [f"decoding cache (attention keys and values): {cache.per_token:,} values per generated token "
            f"({_bytes(2 * cache.per_token)} in float16){capped}; after n = {n} tokens{cross}: {cache.at_n:,} values "
            f"({_bytes(2 * cache.at_n)} in float16, {_bytes(4 * cache.at_n)} in float32)"]


def _bytes(count: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:,.1f} {unit}"
    return f"{count} bytes"


def report_text(spec, graph, args) -> str:
    """The FLOP, path and training-cost sections of the text and Markdown reports (computed
    before anything is printed, so a bad option fails with nothing half-written)."""
    report, rows, stacks = _layer_rows(spec, graph, args.n)
    table = [[r["stack"], r["layer"], r["count"], sci(r["forward_flops"]), sci(r["count"] * r["forward_flops"]),
              f"{100 * r['count'] * r['forward_flops'] / report.forward:.1f}%", r["complexity"],
              r.get("sequential_ops", {}).get("class", ""), r.get("max_path_length", {}).get("class") or ""]
             for r in rows]
    lines = [f"\nforward FLOPs at n = {report.n} (matmul FLOPs, 2 per multiply-add; source and target n tokens; "
             "attention counts every score, masked ones too)\n",
             render(["stack", "layer", "count", "per layer", "total", "share", "complexity", "sequential",
                     "max path"], table, args.format),
             f"forward: {sci(report.forward)} FLOPs per sequence, {sci(report.per_token)} per token; training "
             f"(forward + backward = 3 x forward): {sci(report.training)} per sequence, "
             f"{sci(3 * report.per_token)} per token"]
    for name, s in stacks.items():
        longest = f"{s['max_path_length']} hops" if s["max_path_length"] is not None else \
            f"not all positions connected (reach {s['reach']})"
        lines.append(f"{name}: {s['sublayers']} sub-layers, {s['sequential_ops']} sequential operations, "
                     f"longest path {longest} at n = {report.n}")
    return "\n".join(lines + _cache(spec, graph, report.n, "text") + _cost_lines(_training(spec, report, args))) + "\n"


def _cost_lines(cost) -> list[str]:
    if cost is None:
        return ["training cost: pass --steps (and --tokens-per-step, default 25000) to estimate a run"]
    lines = [f"training cost: {cost.steps:,} steps x {cost.tokens_per_step:,} tokens "
             f"({cost.tokens_per_step / cost.n:,.0f} sequences of n = {cost.n}) = {sci(cost.total)} FLOPs"]
    p = cost.paper
    if p is not None:
        ratio = f"; tfspec / paper = {cost.utilisation:.2f}, the utilisation the paper's figure implies" \
            if cost.utilisation is not None else ""
        lines.append(f"paper, Table 2 ({p.row}, {p.steps:,} steps): {sci(p.flops)} FLOPs = {p.hours:g} h x {p.gpus} "
                     f"GPUs x {p.tflops_per_gpu:g} TFLOPS. The paper multiplies training time by the GPUs' sustained "
                     "rate (their capacity, idle and non-matmul time included); tfspec counts the matmuls the model "
                     f"needs{ratio}.")
    return lines


def cmd_table1(args) -> int:
    from tfspec.analysis.table1 import MEASURES, table1

    rows = table1(args.n, args.d)
    measured = _measure(args.format != "json") if args.measure else None
    if args.format == "json":
        out = [r.to_json() for r in rows]
        if measured:
            for row, m in zip(out, measured[1]):
                row["timed"] = m.to_json() | {"device": measured[0]}
        print(json.dumps(out, indent=2))
        return 0
    mark = {True: " ✓", False: " ✗", None: ""}
    table = [[r.paper.label] + [x for m in MEASURES for x in (f"{r.derived(m) or 'none'}{mark[r.match(m)]}",
                                                                getattr(r.paper, m) or "—")] for r in rows]
    heads = ["layer type", "complexity", "paper", "sequential ops", "paper", "max path length", "paper"]
    print(render(heads, table, args.format), end="")
    matched = sum(bool(r.match(m)) for r in rows for m in MEASURES)
    compared = sum(r.match(m) is not None for r in rows for m in MEASURES)
    print(f"\n{matched}/{compared} cells match the paper. Each tfspec cell is derived from specs/table1/*.yaml: "
          "the leading term of the layer's FLOP formula, and sequential operations and path lengths measured "
          "on position graphs at n = 16..1024 and fitted.\n")
    counts = [[r.paper.label, sci(r.flops), sci(r.layer_flops), r.sequential, r.path if r.path is not None else "none"]
              for r in rows]
    print(f"exact counts at n = {rows[0].n}, d = {rows[0].d}:\n")
    print(render(["layer type", "FLOPs (Table 1 terms)", "FLOPs (whole layer)", "sequential ops",
                  "max path length"], counts, args.format), end="")
    if measured:
        _print_measured(*measured, args.format)
    return 0


def _measure(verbose: bool):
    """(machine, rows) of ``tfspec.analysis.measure``, with a line per kind as it finishes."""
    import sys

    import torch

    from tfspec.backends.torch.measure import device_name, measure
    from tfspec.paper import TABLE1

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    machine = device_name(device)
    if verbose:
        print(f"timing one layer of each kind on {machine} ...", file=sys.stderr)
    rows = measure(TABLE1, device, progress=(lambda m: print(f"  {m.label}: done", file=sys.stderr))
                   if verbose else None)
    return machine, rows


def _print_measured(machine: str, rows, fmt: str) -> None:
    from tfspec.analysis.measure import AGREE, BATCH_D, BATCH_N, D_FOR_N, FITTED, N_FOR_D

    table = []
    for m in rows:
        table.append([m.label, m.complexity, m.expected_n, f"{m.in_n.exponent:.2f}", m.expected_d,
                      f"{m.in_d.exponent:.2f}", "✓" if m.agrees else "✗"] + [f"{t * 1e3:.3g}" for t in m.in_n.seconds])
    sizes = rows[0].in_n.sizes
    print(f"\nmeasured on {machine}: forward time of one layer (attention: the attention itself, as Table 1 "
          f"counts it), the fastest of interleaved rounds; exponents fitted over the {FITTED} largest sizes, in n "
          f"at d = {D_FOR_N}, batch {BATCH_N} ({', '.join(map(str, sizes))}) and in d at n = {N_FOR_D}, batch "
          f"{BATCH_D} ({', '.join(map(str, rows[0].in_d.sizes))}):\n")
    print(render(["layer type", "complexity", "n: O()", "n: measured", "d: O()", "d: measured", "agree"]
                 + [f"ms at n={n}" for n in sizes], table, fmt), end="")
    agreeing = sum(m.agrees for m in rows)
    print(f"\n{agreeing}/{len(rows)} kinds grow as their class says (fitted exponents within {AGREE} of the "
          "analytic ones).")


def cmd_plot(args) -> int:
    from tfspec.analysis.flops import describe
    from tfspec.analysis.plot import plot_layers
    from tfspec.analysis.table1 import single_layer, with_width
    from tfspec.paper import TABLE1
    from tfspec.cli.models import load_model_spec
    from tfspec.spec import load_spec

    if args.spec is None:
        layers = []
        for row in TABLE1:
            spec = with_width(load_spec(row.spec), args.d)
            layers.append((row.label, single_layer(spec), spec))
        title = "Table 1 layer kinds"
    else:
        spec = with_width(load_model_spec(args.spec), args.d)
        kinds = {describe(layer): layer for _, stack in spec.stacks
                 for layer in (entry.resolved(spec) for _, entry in stack.sublayers())}
        layers = [(label, layer, spec) for label, layer in kinds.items()]
        title = f"{spec.name}: layer kinds"
    measured = _measure(True) if args.measure else None
    print(f"wrote {plot_layers(layers, args.output, title, measured)}")
    return 0
