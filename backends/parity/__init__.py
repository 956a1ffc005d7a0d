"""Parity checks between the backends: exported ONNX graphs run with onnxruntime against the
PyTorch model they came from (``onnx``), quantised exports against the PyTorch model holding
exactly their weights (``quant``) and genai's graph fed as onnxruntime-genai feeds it
(``genai``). The one place that imports both backends; emitting or running an export never
imports it."""
