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


@dataclass(frozen=True)
class Table1Row:
    """A row of Table 1 (or of §4's text about it) and the single-layer spec tfspec derives it from."""

    label: str
    spec: str
    complexity: str | None
    sequential_ops: str | None
    max_path_length: str | None
    source: str


# Table 1 of Vaswani et al. 2017 as printed, and the two rows §4 describes in words. The printed
# convolutional row's O(log_k(n)) holds for dilated kernels (§4), so its spec is a dilated one.
TABLE1 = (
    Table1Row("Self-Attention", "table1/self_attention", "O(n²·d)", "O(1)", "O(1)", "Table 1"),
    Table1Row("Recurrent", "table1/recurrent", "O(n·d²)", "O(n)", "O(n)", "Table 1"),
    Table1Row("Convolutional", "table1/conv_dilated", "O(k·n·d²)", "O(1)", "O(log_k(n))", "Table 1"),
    Table1Row("Self-Attention (restricted)", "table1/restricted", "O(r·n·d)", "O(1)", "O(n/r)", "Table 1"),
    Table1Row("Convolutional (contiguous)", "table1/conv_contiguous", "O(k·n·d²)", "O(1)", "O(n/k)",
              "§4: contiguous kernels need O(n/k) layers"),
    Table1Row("Convolutional (separable)", "table1/conv_separable", "O(k·n·d + n·d²)", None, None,
              "§4: separable convolutions cost O(k·n·d + n·d²)"),
)


@dataclass(frozen=True)
class Table2Cost:
    """A training cost of Table 2 and how the paper obtained it: training time x number of GPUs
    x sustained single-precision TFLOPS per GPU (P100: 9.5), its footnote's method (§5.2)."""

    row: str
    flops: float
    steps: int
    gpus: int
    hours: float
    tflops_per_gpu: float

    @property
    def recomputed(self) -> float:
        return self.hours * 3600 * self.gpus * self.tflops_per_gpu * 1e12


TABLE2 = {
    "base": Table2Cost("base", 3.3e18, 100_000, 8, 12, 9.5),
    "big": Table2Cost("big", 2.3e19, 300_000, 8, 3.5 * 24, 9.5),
}
"""Transformer rows of Table 2, keyed by the Table 3 row name specs carry in ``reference.row``."""
