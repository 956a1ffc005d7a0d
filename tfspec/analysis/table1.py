"""Table 1 of the paper, rederived: each row's cells come from the passes run on a one-layer spec.

Nothing here restates a result: the complexity is the leading term of the layer kind's FLOP
formula, the sequential operations and path lengths are measured on position graphs and
fitted (``tfspec.analysis.complexity``). The paper's entries (``tfspec.paper.TABLE1``) are only
printed beside them, with a match mark.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from tfspec.analysis.complexity import LayerFacts, layer_facts
from tfspec.analysis.flops import SYMBOLS, at, layer_values
from tfspec.analysis.paths import MAX_N, path_length, sequential_ops
from tfspec.errors import TfspecError
from tfspec.paper import TABLE1, Table1Row
from tfspec.spec import Spec, load_spec

MEASURES = ("complexity", "sequential_ops", "max_path_length")


@dataclass(frozen=True)
class Table1Result:
    """One row: the paper's entries, tfspec's derived facts, and exact counts at (n, d)."""

    paper: Table1Row
    facts: LayerFacts
    n: int
    d: int
    flops: int
    """Forward FLOPs of the terms Table 1 counts, at n and d."""
    layer_flops: int
    """Forward FLOPs of the whole layer (attention: with its projections), at n and d."""
    sequential: int
    path: int | None

    def derived(self, measure: str) -> str | None:
        return getattr(self.facts, measure)

    def match(self, measure: str) -> bool | None:
        """Whether tfspec's cell equals the paper's; None where the paper gives none."""
        expected = getattr(self.paper, measure)
        return None if expected is None else self.derived(measure) == expected

    def to_json(self) -> dict:
        cells = {m: {"tfspec": self.derived(m), "paper": getattr(self.paper, m), "match": self.match(m)}
                 for m in MEASURES}
        return {"layer_type": self.paper.label, "spec": self.paper.spec, "source": self.paper.source, **cells,
                "at": {"n": self.n, "d": self.d, "flops": self.flops, "layer_flops": self.layer_flops,
                       "sequential_ops": self.sequential, "max_path_length": self.path},
                "measured": self.facts.to_json()}


def single_layer(spec: Spec):
    """The one layer of a Table 1 spec (an encoder or decoder of one sub-layer)."""
    layers = [layer for _, stack in spec.stacks for _, layer in stack.sublayers()]
    if len(layers) != 1:
        raise TfspecError(f"{spec.name}: a Table 1 spec has exactly one layer of one kind, this one has "
                          f"{len(layers)}; use one stack with layers: 1 and a one-entry block")
    return layers[0]


def with_width(spec: Spec, d: int | None) -> Spec:
    """``spec`` with d_model = d (per-head sizes d / heads), validated like any spec."""
    if d is None:
        return spec
    data = spec.model_dump(exclude={"d_k", "d_v"}) | {"d_model": d}
    try:
        return Spec.model_validate(data)
    except ValidationError as e:
        raise TfspecError(f"--d {d}: {e.errors()[0]['msg']}") from None


def table1(n: int = 128, d: int | None = None) -> list[Table1Result]:
    """Every row of ``TABLE1``, derived from its spec; exact counts at length n and width d."""
    if not 2 <= n <= MAX_N:
        raise TfspecError(f"--n must be 2..{MAX_N}: paths are measured on n x n matrices (got {n})")
    rows = []
    for row in TABLE1:
        spec = with_width(load_spec(row.spec), d)
        layer = single_layer(spec)
        terms = layer.flops(SYMBOLS, dense=False)
        counted = layer.table1_terms or tuple(terms)
        values = layer_values(spec, layer)
        rows.append(Table1Result(row, layer_facts(layer), n, spec.d_model,
                                 at(sum(terms[t] for t in counted), n, values), at(sum(terms.values()), n, values),
                                 sequential_ops(layer, n), path_length(layer, n)))
    return rows
