"""Table 1 measured: one layer of each kind timed on this machine, its growth in n and d fitted.

What is timed is what Table 1 counts, as the PyTorch backend computes it: for attention kinds
the attention itself (``self_attention``: fused SDPA, or blocks for a kind with a band), for
the others the whole layer (an LSTM's recurrence, a convolution). Each kind is swept over n at
a fixed d and over d at a fixed n; the exponent is the least-squares slope of log time against
log size over the sweep's upper sizes, where the leading term dominates fixed overheads. The
analytic exponents come from the same leading monomials ``tfspec table1`` prints (O(n²·d):
2 in n, 1 in d), so the two columns are independent evidence for one claim.
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict, dataclass

import numpy as np

from tfspec.analysis.asymptotics import leading_monomials
from tfspec.analysis.flops import SYMBOLS
from tfspec.errors import TfspecError

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


def device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def layer_call(spec, device, n: int, batch: int):
    """A no-argument function running the layer of one-layer ``spec`` once at length n on a
    random batch (see the module docstring for what is run)."""
    import torch

    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.attention import self_attention
    from tfspec.backends.torch.model import RunContext

    model = build_module(spec, device=device).eval()
    node = next(x for x in model.graph.nodes() if x.layer is not None)
    module, layer, ctx = model.get_submodule(node.name), node.layer, RunContext(False, {})
    if node.op == "attention":
        q, k, v = (torch.randn(batch, n, spec.heads, size, device=device) for size in (spec.d_k, spec.d_k, spec.d_v))

        def run():
            ctx._masks.clear()  # a fresh call builds its mask, as a real forward pass does
            return self_attention(ctx, layer, node.shape[1], q, k, v, 0.0)
    else:
        x = torch.randn(batch, n, spec.d_model, device=device)

        def run():
            return module(ctx, x)
    return run


def time_calls(calls: list, device) -> list[float]:
    """The fastest time of each call, measured in interleaved rounds (so a slow spell of the
    machine hits every size alike) until about BUDGET seconds per call have passed."""
    import torch

    best = [float("inf")] * len(calls)
    spent, rounds = 0.0, 0
    with torch.no_grad():
        for call in calls:  # warm-up: caches, allocator, kernels
            call()
        while rounds < 3 or (spent < BUDGET * len(calls) and rounds < 50):
            for i, call in enumerate(calls):
                _sync(device)
                start = time.perf_counter()
                call()
                _sync(device)
                elapsed = time.perf_counter() - start
                best[i], spent = min(best[i], elapsed), spent + elapsed
            rounds += 1
    return best


def _sync(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def measure(rows, device=None, ns=None, ds=None, progress=None) -> list[Measured]:
    """Time each Table 1 row (``tfspec.paper.Table1Row``) over ``ns`` and ``ds`` (default NS, DS)."""
    import torch

    from tfspec.analysis.complexity import table1_complexity
    from tfspec.analysis.table1 import single_layer, with_width
    from tfspec.spec import load_spec

    ns, ds = ns or NS, ds or DS
    if len(ns) < FITTED or len(ds) < FITTED:
        raise TfspecError(f"measuring needs at least {FITTED} sizes per sweep")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = []
    for row in rows:
        base = load_spec(row.spec)
        layer = single_layer(base)
        e_n, e_d = expected_exponents(layer)
        in_n = time_calls([layer_call(with_width(base, D_FOR_N), device, n, BATCH_N) for n in ns], device)
        in_d = time_calls([layer_call(with_width(base, d), device, N_FOR_D, BATCH_D) for d in ds], device)
        out.append(Measured(row.label, table1_complexity(layer), e_n, e_d,
                            Sweep(tuple(ns), tuple(in_n), fit_exponent(ns, in_n)),
                            Sweep(tuple(ds), tuple(in_d), fit_exponent(ds, in_d))))
        if progress:
            progress(out[-1])
    return out
