"""From exact counts to Table 1's O(.) classes: leading terms of formulas, growth of measurements.

Two kinds of evidence, two reductions:

* FLOP formulas (sympy) reduce symbolically: with multi-head sizes h*d_k = h*d_v = d (§3.2.2),
  key/value heads g at their bound h and the memory as long as the sequence, keep the terms
  of highest degree in n, drop those another term bounds (every size is >= 1, so r*n*d bounds
  n*d) and drop constants.
* Measured counts (sequential operations, path lengths at n = 16 .. 1024) are fitted by least
  squares to a + b*g(n) for g in {1, log n, n}; when the growth depends on a layer size (kernel
  k, radius r), re-measuring with that size doubled shrinks the slope, which puts the size in
  the denominator (n/k) or the logarithm's base (log_k(n)).
"""

from __future__ import annotations

import math

import numpy as np
import sympy

ORDER = ("k", "r", "l_q", "l_m", "n", "m", "d", "d_ff", "h", "d_k", "d_v")
"""Factor order in rendered monomials, the paper's (k * n * d^2, r * n * d)."""
SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def leading_monomials(expr: sympy.Expr, s) -> list[dict[str, int]]:
    """The asymptotically dominant monomials of ``expr`` as n grows, coefficients dropped."""
    # Key/value heads are at most h: bounded by the multi-head case.
    expr = expr.xreplace({s.g: s.h}).xreplace({s.d_k: s.d / s.h, s.d_v: s.d / s.h, s.m: s.n})
    # min(r, n - 1) and the like: as n grows, the bound that does not involve n is the one that holds.
    expr = expr.replace(lambda e: isinstance(e, sympy.Min),
                        lambda e: next((a for a in e.args if not a.has(s.n)), e))
    # floor(n / l_q) blocks: n / l_q of them, up to a bounded remainder.
    expr = expr.replace(lambda e: isinstance(e, sympy.floor), lambda e: e.args[0])
    terms = [t for t in sympy.Add.make_args(sympy.expand(expr)) if not t.could_extract_minus_sign()]
    powers = [{str(b): int(p) for b, p in t.as_powers_dict().items() if b.is_Symbol} for t in terms]
    top = max(p.get("n", 0) for p in powers)
    powers = [p for p in powers if p.get("n", 0) == top]
    keep = []
    for p in powers:
        # every exponent, q's own too: n*d^2/h (a size in the denominator) does not bound n*d^2
        bounded = any(q != p and all(q.get(x, 0) >= p.get(x, 0) for x in p.keys() | q.keys()) for q in powers)
        if not bounded and p not in keep:
            keep.append(p)
    return sorted(keep, key=lambda p: (p.get("d", 0), sorted(p.items())))


def render_monomial(powers: dict[str, int]) -> str:
    """``{'k': 1, 'n': 1, 'd': 2}`` -> ``k·n·d²``."""
    names = sorted(powers, key=lambda x: ORDER.index(x) if x in ORDER else len(ORDER))
    return "·".join(x + (str(powers[x]).translate(SUPERSCRIPTS) if powers[x] > 1 else "") for x in names) or "1"


def big_o(expr: sympy.Expr, s) -> str:
    """The O(.) class of a cost formula, in the paper's notation: ``O(k·n·d + n·d²)``."""
    return "O(" + " + ".join(render_monomial(p) for p in leading_monomials(expr, s)) + ")"


GROWTHS = {"log": np.log, "n": lambda n: n}


def fit_growth(ns, ys) -> tuple[str, float]:
    """('1' | 'log' | 'n', slope): the growth g(n) whose line a + b*g(n) fits ``ys`` best."""
    y = np.asarray(ys, dtype=float)
    if np.ptp(y) == 0:
        return "1", 0.0
    best = None
    for name, g in GROWTHS.items():
        x = g(np.asarray(ns, dtype=float))
        slope, intercept = np.polyfit(x, y, 1)
        residual = float(np.sum((y - slope * x - intercept) ** 2))
        if best is None or residual < best[2]:
            best = (name, float(slope), residual)
    return best[0], best[1]


def growth_class(growth: str, size: str | None = None) -> str:
    """``('n', 'r')`` -> ``O(n/r)``; ``('log', 'k')`` -> ``O(log_k(n))``; ``('1', None)`` -> ``O(1)``."""
    if growth == "1":
        return "O(1)"
    if growth == "log":
        return f"O(log_{size}(n))" if size else "O(log(n))"
    return f"O(n/{size})" if size else "O(n)"


def shrinks(slope: float, scaled_slope: float) -> bool:
    """Whether doubling a size clearly shrank the growth (not just rounding in the counts)."""
    return not math.isclose(slope, 0.0) and scaled_slope < 0.8 * slope
