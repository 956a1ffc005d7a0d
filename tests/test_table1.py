"""Table 1 of the paper, every cell derived by the passes from specs/table1, against the paper."""

from __future__ import annotations

import json
import math

import pytest

from tfspec.analysis.table1 import MEASURES, table1
from tfspec.paper import TABLE1

# Vaswani et al. 2017, Table 1, as printed (complexity per layer, sequential operations, maximum
# path length), and the two conv variants §4 describes in words.
PAPER = {
    "Self-Attention": ("O(n²·d)", "O(1)", "O(1)"),
    "Recurrent": ("O(n·d²)", "O(n)", "O(n)"),
    "Convolutional": ("O(k·n·d²)", "O(1)", "O(log_k(n))"),
    "Self-Attention (restricted)": ("O(r·n·d)", "O(1)", "O(n/r)"),
}
SECTION4 = {"Convolutional (contiguous)": {"max_path_length": "O(n/k)"},
            "Convolutional (separable)": {"complexity": "O(k·n·d + n·d²)"}}


@pytest.fixture(scope="module")
def rows():
    return {r.paper.label: r for r in table1(n=128, d=512)}


def test_all_twelve_cells_of_table1_are_derived(rows):
    for label, cells in PAPER.items():
        derived = tuple(rows[label].derived(m) for m in ("complexity", "sequential_ops", "max_path_length"))
        assert derived == cells, label


def test_section4_rows(rows):
    for label, cells in SECTION4.items():
        for measure, expected in cells.items():
            assert rows[label].derived(measure) == expected


def test_paper_entries_are_transcribed_as_printed():
    for row in TABLE1:
        if row.label in PAPER:
            assert (row.complexity, row.sequential_ops, row.max_path_length) == PAPER[row.label]


def test_exact_counts_by_hand(rows):
    n, d = 128, 512
    assert rows["Self-Attention"].flops == 4 * n * n * d  # Q K^T and weights x V: 2 n^2 d each
    assert rows["Recurrent"].flops == 2 * n * 4 * d * (d + d)  # LSTM: 4 gates over [x, h]
    assert rows["Convolutional (contiguous)"].flops == 2 * n * 3 * d * d
    assert rows["Convolutional (separable)"].flops == 2 * n * 3 * d + 2 * n * d * d
    pairs = n * 9 - 4 * 5  # |i - j| <= 4: 9 per row, minus the 2 * (4 + 3 + 2 + 1) cut at the ends
    assert rows["Self-Attention (restricted)"].flops == 4 * pairs * d
    assert rows["Recurrent"].path == n and rows["Convolutional (contiguous)"].path == n - 1
    assert rows["Self-Attention (restricted)"].path == 32  # ceil(127 / 4)


def by_hand(n: int, d: int) -> dict[str, tuple[int, int, int, int]]:
    """(FLOPs of Table 1's terms, of the whole layer, sequential operations, maximum path length) of
    each row's spec at n and d, counted by hand (2 FLOPs per multiply-add): attention's scores and
    weighted values, 2 * pairs * d each, plus 8 n d^2 for W^Q, W^K, W^V and W^O; an LSTM's 4 gates over
    [x, h]; k = 3 taps; dilated kernels (dilation 3^l) connect n positions in ceil(log_3 n) layers."""
    dilated = math.ceil(math.log(n, 3) - 1e-9)
    pairs = n * 9 - 4 * 5  # restricted, r = 4: |i - j| <= 4
    return {"Self-Attention": (4 * n * n * d, 4 * n * n * d + 8 * n * d * d, 1, 1),
            "Recurrent": (16 * n * d * d, 16 * n * d * d, n, n),
            "Convolutional": (6 * n * d * d, 6 * n * d * d, 1, dilated),
            "Self-Attention (restricted)": (4 * pairs * d, 4 * pairs * d + 8 * n * d * d, 1, math.ceil((n - 1) / 4)),
            "Convolutional (contiguous)": (6 * n * d * d, 6 * n * d * d, 1, n - 1),
            "Convolutional (separable)": (6 * n * d + 2 * n * d * d, 6 * n * d + 2 * n * d * d, 1, dilated)}


def test_table1_command(cli):
    """Every cell the command prints against the paper, every exact count against a hand count."""
    cells = {label: dict(zip(MEASURES, values)) for label, values in PAPER.items()} | SECTION4
    code, out, _ = cli("table1")
    assert code == 0 and "16/16 cells match the paper" in out and "✗" not in out
    lines = {}
    for line in out.split("cells match")[0].splitlines():  # the cells, not the exact counts below
        lines[line.split("  ")[0]] = line
    for label, expected in cells.items():
        assert all(f"{cell} ✓" in lines[label] for cell in expected.values()), lines[label]
    code, out, _ = cli("table1", "--n", "64", "--d", "256", "--format", "json")
    data = json.loads(out)
    assert code == 0 and [r["layer_type"] for r in data] == [row.label for row in TABLE1]
    hand = by_hand(64, 256)
    for r in data:
        for measure, cell in cells[r["layer_type"]].items():
            assert r[measure]["tfspec"] == r[measure]["paper"] == cell and r[measure]["match"], (r, measure)
        at = r["at"]
        assert (at["n"], at["d"]) == (64, 256)
        assert (at["flops"], at["layer_flops"], at["sequential_ops"], at["max_path_length"]) == hand[r["layer_type"]]
    code, out, _ = cli("table1", "--format", "markdown")
    assert code == 0 and "| layer type | complexity | paper |" in out


@pytest.mark.parametrize("args,message", [(["--d", "500"], "divisible"), (["--n", "1"], "--n must be")])
def test_table1_bad_options(cli, args, message):
    code, _, err = cli("table1", *args)
    assert code == 2 and err.startswith("error:") and message in err


def test_a_size_in_a_denominator_bounds_nothing():
    """n·d²/h (a per-head width d/h squared, times h) is at most n·d², never the other way round:
    the class of their sum is O(n·d²), not empty (each once dropped the other)."""
    from tfspec.analysis.asymptotics import big_o
    from tfspec.analysis.flops import SYMBOLS as s

    assert big_o(7 * s.n * s.h * s.d_k * s.d_v + 2 * s.n * s.d * s.h * s.d_v, s) == "O(n·d²)"
