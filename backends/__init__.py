"""Backends turn the IR into something that runs: ``torch`` (training) and, later, ONNX.

Installed as ``tfspec.backends``. Backends import the core's public API; the core never
imports a backend.
"""
