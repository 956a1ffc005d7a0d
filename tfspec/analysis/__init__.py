"""Read-only analyses of the IR: plain functions returning frozen report objects.

``params`` (parameter counts) is re-exported here. The passes behind Table 1 and the cost
report import sympy, so they are imported from their modules when needed: ``flops``
(``analyze_flops``: exact FLOP formulas per op), ``paths`` (sequential operations and path
lengths on position graphs), ``complexity`` (``layer_facts``: a kind's Table 1 row),
``table1``, ``cost`` (``training_cost`` beside Table 2) and ``plot``.
"""

from tfspec.analysis.params import ParamReport, analyze_params

__all__ = ["ParamReport", "analyze_params"]
