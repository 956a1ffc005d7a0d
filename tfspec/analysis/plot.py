"""Pictures of Table 1's trade-offs: per-layer cost against n, and path-length growth (§4).

Left: forward FLOPs of the terms Table 1 counts, per layer kind, against the sequence length
n, with the line n = d where §4 says self-attention stops being cheaper than recurrence (in
O(.) terms; the exact crossing of two curves depends on their constants, which the plot
shows). Middle: the measured maximum path length of the shallowest connecting stack. With
measured times (``tfspec plot --measure``), right: each Table 1 kind's time on this machine
against n, beside its analytic curve scaled to meet the measurement at the middle n, so only
the shapes are compared. matplotlib is an optional extra (``pip install 'tfspec[plot]'``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tfspec.analysis.complexity import NS, layer_facts
from tfspec.analysis.flops import SYMBOLS, at, layer_values
from tfspec.errors import TfspecError

FORMATS = (".png", ".svg")


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise TfspecError("tfspec plot needs matplotlib: pip install 'tfspec[plot]'") from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_layers(layers: list[tuple[str, object, object]], path: str | Path, title: str, measured=None) -> Path:
    """Draw (label, layer, spec) kinds into ``path`` (.png or .svg) and return it; ``measured``
    is (machine, rows of ``tfspec.analysis.measure``)."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise TfspecError(f"{path}: plot files end in {' or '.join(FORMATS)}")
    plt = _pyplot()
    widths = sorted({spec.d_model for _, _, spec in layers})
    ns = np.unique(np.geomspace(8, 16 * max(widths), 40).astype(int))
    fig, axes = plt.subplots(1, 3 if measured else 2, figsize=(18 if measured else 12, 4.8))
    cost, paths = axes[:2]
    for index, (label, layer, spec) in enumerate(layers):
        style = {"linestyle": ("-", "--", "-.", ":")[index % 4]}  # curves that coincide stay visible
        terms = layer.flops(SYMBOLS, dense=False)
        counted = sum(terms[t] for t in (layer.table1_terms or tuple(terms)))
        values = layer_values(spec, layer)
        cost.plot(ns, [at(counted, int(n), values) for n in ns], label=label, **style)
        hops = layer_facts(layer).paths_measured
        if None not in hops:
            paths.plot(NS, hops, marker="o", label=f"{label}: {layer_facts(layer).max_path_length}", **style)
    for d in widths:
        cost.axvline(d, color="grey", linestyle=":")
        cost.annotate(f"n = d = {d}", (d, 0.02), xycoords=("data", "axes fraction"), rotation=90,
                      fontsize=8, color="grey")
    cost.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel="forward FLOPs per layer",
             title="complexity per layer (Table 1 terms)")
    paths.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel="hops",
              title="maximum path length (shallowest connecting stack)")
    if measured:
        _plot_measured(axes[2], *measured)
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _plot_measured(ax, machine: str, rows) -> None:
    from tfspec.analysis.measure import D_FOR_N
    from tfspec.analysis.table1 import single_layer, with_width
    from tfspec.paper import TABLE1
    from tfspec.spec import load_spec

    specs = {row.label: row.spec for row in TABLE1}
    for index, m in enumerate(rows):
        spec = with_width(load_spec(specs[m.label]), D_FOR_N)
        layer = single_layer(spec)
        terms = layer.flops(SYMBOLS, dense=False)
        counted, values = sum(terms[t] for t in (layer.table1_terms or tuple(terms))), layer_values(spec, layer)
        ns, seconds = np.array(m.in_n.sizes), np.array(m.in_n.seconds)
        analytic = np.array([float(at(counted, int(n), values)) for n in ns])
        middle = len(ns) // 2
        line = ax.plot(ns, seconds, marker="o", label=f"{m.label} {m.complexity}: n^{m.in_n.exponent:.2f}")[0]
        ax.plot(ns, analytic * seconds[middle] / analytic[middle], linestyle="--", color=line.get_color(),
                label="analytic, scaled to the middle n" if index == 0 else None)
    ax.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel="seconds (forward, one layer)",
           title=f"measured, d = {D_FOR_N} ({machine}); dashed: analytic")
