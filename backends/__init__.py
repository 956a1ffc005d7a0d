"""Backends turn the IR into something that runs: ``torch`` (training, KV-cached decoding)
and ``onnx`` (graphs emitted from the IR, run with onnxruntime).

Installed as ``tfspec.backends``. Backends import the core's public API; the core never
imports a backend.
"""
