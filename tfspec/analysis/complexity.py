"""Table 1's three measures for one layer kind, derived by the passes (§4 of the paper).

* Complexity per layer: the leading term of the kind's exact FLOP formula (the terms Table 1
  counts: for attention the attention itself, not the position-wise Q/K/V/O projections).
* Minimum sequential operations: the longest dependency chain of one layer unrolled over n
  positions, measured at n = 16 .. 1024 and fitted.
* Maximum path length: the longest shortest path in the position graph of the shallowest stack
  of the kind that connects all positions, measured at n = 16 .. 1024 and fitted, with each of
  the kind's sizes (kernel k, radius r) doubled to see whether the growth divides by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tfspec.analysis.asymptotics import big_o, fit_growth, growth_class, shrinks
from tfspec.analysis.flops import SYMBOLS
from tfspec.analysis.paths import path_length, sequential_ops

NS = tuple(2 ** p for p in range(4, 11))
"""Sequence lengths the growth of measured counts is fitted over: 16 .. 1024."""


@dataclass(frozen=True)
class LayerFacts:
    """One layer kind's row of Table 1, with the measurements behind it."""

    complexity: str
    sequential_ops: str
    max_path_length: str | None
    """None: the kind connects no positions (position-wise), however deep the stack."""
    sequential_measured: tuple[int, ...]
    """Sequential operations at each n of NS."""
    paths_measured: tuple[int | None, ...]
    """Maximum path length at each n of NS."""

    def to_json(self) -> dict:
        return {"complexity": self.complexity, "sequential_ops": self.sequential_ops,
                "max_path_length": self.max_path_length, "measured_at_n": list(NS),
                "sequential_ops_measured": list(self.sequential_measured),
                "max_path_length_measured": list(self.paths_measured)}


def table1_complexity(layer) -> str:
    """O(.) of the terms of the kind's FLOP formula that Table 1 counts (visible pairs only)."""
    terms = layer.flops(SYMBOLS, dense=False)
    counted = layer.table1_terms or tuple(terms)
    return big_o(sum(terms[t] for t in counted), SYMBOLS)


def _path_class(layer, measured) -> str | None:
    """The O(.) of measured path lengths; a size whose doubling shrinks the growth divides it."""
    if None in measured:
        return None
    growth, slope = fit_growth(NS, measured)
    size = None
    if growth != "1":
        for symbol, field in layer.symbols.items():
            value = getattr(layer, field)
            if isinstance(value, int):
                doubled = layer.model_copy(update={field: 2 * value})
                if shrinks(slope, fit_growth(NS, [path_length(doubled, n) for n in NS])[1]):
                    size = symbol
    return growth_class(growth, size)


@lru_cache(maxsize=256)
def layer_facts(layer) -> LayerFacts:
    """Derive the Table 1 row of ``layer`` (a validated, hashable layer-kind object)."""
    sequential = tuple(sequential_ops(layer, n) for n in NS)
    paths = tuple(path_length(layer, n) for n in NS)
    return LayerFacts(table1_complexity(layer), growth_class(fit_growth(NS, sequential)[0]),
                      _path_class(layer, paths), sequential, paths)
