"""Read-only analyses of the IR: plain functions returning frozen report objects."""

from tfspec.analysis.params import ParamReport, analyze_params

__all__ = ["ParamReport", "analyze_params"]
