"""The ONNX backend: graphs emitted straight from the IR, run with onnxruntime.

``export(module, dir)`` writes and checks the graphs; ``OnnxModel(dir)`` loads them;
``OnnxModel(dir).decoder()`` decodes with ``tfspec.search`` like the PyTorch backend does.

By concern: ``lower/`` (one lowering per IR op), ``variants/`` (what each graph file is),
``graphs`` (emitting one), ``passes/`` (rewrites and weight policies), ``runtime/`` (sessions
and decoding), ``exporter`` and ``streamed`` (writing an export directory). Its names are
imported on first use (PEP 562): serving an export loads the runtime, not the exporter.
"""

from tfspec import lazy_names

_HOMES = {"Exported": f"{__name__}.exporter", "export": f"{__name__}.exporter", "emit": f"{__name__}.graphs",
          "LOWERINGS": f"{__name__}.lower", "lowering": f"{__name__}.lower", "OnnxModel": f"{__name__}.runtime",
          "OnnxDecoder": f"{__name__}.runtime.decoding"}
"""Each public name and the module it is imported from."""

__all__ = list(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
