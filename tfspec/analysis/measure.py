"""Table 1 measured: what the timings are compared with, and how their growth is fitted.

The timing itself runs a backend, so it lives beside it (``tfspec.backends.torch.measure``);
this module holds what the core owns: the sweeps, the fit and the analytic exponents.

What is timed is what Table 1 counts, as the PyTorch backend computes it: for attention kinds
the attention itself (``self_attention``: fused SDPA, or blocks for a kind with a band), for
the others the whole layer (an LSTM's recurrence, a convolution). Each kind is swept over n at
a fixed d and over d at a fixed n; the exponent is the least-squares slope of log time against
log size over the sweep's upper sizes, where the leading term dominates fixed overheads. The
analytic exponents come from the same leading monomials ``tfspec table1`` prints (O(n²·d):
2 in n, 1 in d), so the two columns are independent evidence for one claim.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from tfspec.analysis.asymptotics import leading_monomials
from tfspec.analysis.flops import SYMBOLS

NS = (512, 1024, 2048, 4096)
"""Sequence lengths of the n sweep (at width D_FOR_N)."""
DS = (128, 256, 512, 1024)
"""Widths of the d sweep (at length N_FOR_D)."""
D_FOR_N, N_FOR_D = 256, 512
BATCH_N, BATCH_D = 2, 16
"""Sequences per call in the n and d sweeps: 16 keeps the d sweep's products compute-bound (an
LSTM step at batch 2 reads its d x 4d weights from memory, and grows as the caches run out)."""
BUDGET = 0.5
"""Seconds of timed calls per point (at least 3 rounds; the fastest call is kept)."""
FITTED = 3
"""The exponent is fitted over the largest FITTED sizes of a sweep."""
AGREE = 0.35
"""A fitted exponent within this of the analytic one counts as agreeing (timings are noisy, and
caches and memory bandwidth bend curves: an LSTM whose weights outgrow the caches grows faster
than d^2)."""


@dataclass(frozen=True)
class Sweep:
    sizes: tuple[int, ...]
    seconds: tuple[float, ...]
    exponent: float


@dataclass(frozen=True)
class Measured:
    """One Table 1 row timed: analytic exponents beside fitted ones."""

    label: str
    complexity: str
    expected_n: int
    expected_d: int
    in_n: Sweep
    in_d: Sweep

    @property
    def agrees(self) -> bool:
        return abs(self.in_n.exponent - self.expected_n) <= AGREE and abs(self.in_d.exponent - self.expected_d) <= AGREE

    def to_json(self) -> dict:
        return asdict(self) | {"agrees": self.agrees}


def expected_exponents(layer) -> tuple[int, int]:
    """Degrees in n and in d of the leading terms of what Table 1 counts for ``layer``."""
    terms = layer.flops(SYMBOLS, dense=False)
    counted = sum(terms[t] for t in (layer.table1_terms or tuple(terms)))
    monomials = leading_monomials(counted, SYMBOLS)
    return max(m.get("n", 0) for m in monomials), max(m.get("d", 0) for m in monomials)


def fit_exponent(sizes, seconds, last: int = FITTED) -> float:
    """Slope of log(seconds) against log(size) over the ``last`` largest sizes."""
    x, y = np.log(np.asarray(sizes[-last:], float)), np.log(np.asarray(seconds[-last:], float))
    return float(np.polyfit(x, y, 1)[0])
