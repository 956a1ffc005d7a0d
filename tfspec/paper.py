"""Reproducing the paper's tables from the shipped specs."""

from __future__ import annotations

from dataclasses import dataclass

from tfspec.ir import build_graph
from tfspec.spec import load_spec, shipped_specs


def deviation(params: int, paper_millions: float | None) -> float | None:
    """(tfspec - paper) / paper, for a count the source gives in millions."""
    return None if paper_millions is None else params / 1e6 / paper_millions - 1


@dataclass(frozen=True)
class Table3Row:
    spec: str
    row: str
    fields: dict
    params: int
    paper_millions: float | None

    @property
    def deviation(self) -> float | None:
        return deviation(self.params, self.paper_millions)

    @property
    def implied_extra_vocab(self) -> float | None:
        """How many more d_model-wide embedding rows would close the gap to the paper's count."""
        if self.paper_millions is None:
            return None
        return (self.paper_millions * 1e6 - self.params) / self.fields["d_model"]


def table3() -> list[Table3Row]:
    """Every row of Table 3 (base, A-E, big), each counted from its spec's IR."""
    names = ["base"] + sorted(f"table3/{p.stem}" for p in (shipped_specs() / "table3").glob("*.yaml")) + ["big"]
    rows = []
    for name in names:
        spec = load_spec(name)
        n = spec.encoder.num_layers
        fields = {"N": n, "d_model": spec.d_model, "d_ff": spec.d_ff, "h": spec.heads, "d_k": spec.d_k,
                  "d_v": spec.d_v, "P_drop": spec.dropout, "eps_ls": spec.label_smoothing,
                  "positions": spec.positional.kind}
        rows.append(Table3Row(name, spec.reference.row, fields, build_graph(spec).num_params,
                              spec.reference.params_millions))
    return rows
