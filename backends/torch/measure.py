"""Table 1 measured on this machine: one layer of each kind timed with the PyTorch backend.

What is timed is what Table 1 counts, as this backend computes it: for attention kinds the
attention itself (``self_attention``: fused SDPA, or blocks for a kind with a band), for the
others the whole layer (an LSTM's recurrence, a convolution). The sweeps, the fit and the
analytic exponents they are compared with are the core's (``tfspec.analysis.measure``).
"""

from __future__ import annotations

import platform
import time

import torch

from tfspec.analysis import measure as plan  # read at call time: its sizes and budget can be changed
from tfspec.analysis.measure import Measured, Sweep, expected_exponents, fit_exponent
from tfspec.errors import TfspecError

from . import build_module
from .attention import self_attention
from .model import RunContext


def device_name(device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def layer_call(spec, device, n: int, batch: int):
    """A no-argument function running the layer of one-layer ``spec`` once at length n on a
    random batch (see the module docstring for what is run)."""
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
    best = [float("inf")] * len(calls)
    spent, rounds = 0.0, 0
    with torch.no_grad():
        for call in calls:  # warm-up: caches, allocator, kernels
            call()
        while rounds < 3 or (spent < plan.BUDGET * len(calls) and rounds < 50):
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
            torch.cuda.synchronize(device)


def measure(rows, device=None, ns=None, ds=None, progress=None) -> list[Measured]:
    """Time each Table 1 row (``tfspec.paper.Table1Row``) over ``ns`` and ``ds`` (default: the plan's NS, DS)."""
    from tfspec.analysis.complexity import table1_complexity
    from tfspec.analysis.table1 import single_layer, with_width
    from tfspec.spec import load_spec

    ns, ds = ns or plan.NS, ds or plan.DS
    if len(ns) < plan.FITTED or len(ds) < plan.FITTED:
        raise TfspecError(f"measuring needs at least {plan.FITTED} sizes per sweep")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = []
    for row in rows:
        base = load_spec(row.spec)
        layer = single_layer(base)
        e_n, e_d = expected_exponents(layer)
        in_n = time_calls([layer_call(with_width(base, plan.D_FOR_N), device, n, plan.BATCH_N) for n in ns], device)
        in_d = time_calls([layer_call(with_width(base, d), device, plan.N_FOR_D, plan.BATCH_D) for d in ds], device)
        out.append(Measured(row.label, table1_complexity(layer), e_n, e_d,
                            Sweep(tuple(ns), tuple(in_n), fit_exponent(ns, in_n)),
                            Sweep(tuple(ds), tuple(in_d), fit_exponent(ds, in_d))))
        if progress:
            progress(out[-1])
    return out
