"""Streamed export: graphs whose weights go from a safetensors file to one external data file
one tensor at a time, so a model larger than memory (a 7B checkpoint kept in bf16 by
``tfspec import``) exports in the memory of its largest tensor.

Each weight is read when its lowering first needs it (``SafetensorsWeights``), converted or
quantised (``int4``, ``int8``), appended to ``model.onnx.data`` (``external``) and freed; the
graph protos hold references only, and every graph of the export (the full-sequence graph, the
step graphs, genai's single graph) names the same file, so the step graph writes nothing new.
The graphs are those of the in-memory route (``export.write_graph``), ``--fused`` rewrites
included (they read the weights' names and shapes only). ``needs`` states the memory this
takes, and that of the float32 route, before anything is read.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx

from tfspec.errors import TfspecError
from tfspec.tensors import SafetensorsWeights
from tfspec.ir import Graph

from .exporter import (DATA, Exported, graph_metadata, new_manifest, publish, refuse_conflicts, write_generate,
                       write_graphs, write_manifest)
from .external import ExternalData
from .variants.genai import CONFIG, GRAPH, emit_genai, genai_config
from .runtime import MANIFEST



@dataclass(frozen=True)
class Needs:
    """Memory an export needs, in bytes: ``floating`` through the float32 PyTorch model (the
    default route, which checks parity in full), ``streamed`` tensor by tensor."""

    floating: int
    streamed: int
    largest: str
    """The largest tensor, which bounds the streamed route."""


def needs(graph: Graph, quantised_bytes: int) -> Needs:
    """``floating``: the float32 model, its graph's serialised weights and onnxruntime's
    session of them (3 copies); ``streamed``: the largest tensor in float32 and the quantiser's
    temporaries (4 copies) plus onnxruntime's session of the written weights, for checking and
    decoding (``quantised_bytes``)."""
    params = {name: math.prod(p.shape) for name, p in graph.params.items()}
    largest = max(params, key=params.get)
    return Needs(12 * sum(params.values()), 16 * params[largest] + quantised_bytes + (256 << 20), largest)


def written_bytes(graph: Graph, quant) -> int:
    """Bytes of the weights an export writes (what onnxruntime holds to run it): float32, or as
    the quantisation policy counts them."""
    return 4 * graph.num_params if quant is None else quant.written_bytes(graph)


def available() -> int:
    """Bytes of memory available now (/proc/meminfo's MemAvailable), or 0 where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def export_streamed(graph: Graph, weights_file: Path, directory: Path, kinds: list[str], opset: int = 18,
                    dtype: str = "float32", quant=None, generate: bool = False, progress: bool = True,
                    genai: bool = False, fused: bool = False, model_type: str = "decoder"
                    ) -> tuple[Exported, SafetensorsWeights]:
    """Write graphs ``kinds`` of ``graph`` (``export.graph_kinds``; or, ``genai``, genai's
    model.onnx, of genai's ``model_type``) with the weights of ``weights_file`` (IR names) into ``directory``, through one
    external data file, quantised with ``quant`` (``int4.Int4``, ``int8.Int8``), ``fused`` as
    ``export`` fuses. Returns the export (no checks: the caller decides what can be checked at
    this size) and the reader, whose ``peak`` says how many tensors were in memory at once."""
    from tqdm import tqdm

    refuse_conflicts(dtype == "float16", quant is not None and quant.label == "int8", fused, generate)
    weights = SafetensorsWeights(weights_file)
    missing = sorted(graph.params.keys() - weights.shapes.keys())
    if missing:
        raise TfspecError(f"{weights_file}: no tensor {missing[0]!r} (and {len(missing) - 1} more missing); "
                          f"the spec {graph.name} needs them")
    directory.mkdir(parents=True, exist_ok=True)
    manifest = new_manifest(graph.spec, opset, dtype) | {"weights": {"file": DATA, "streamed": True}}
    if quant is not None:
        manifest[quant.label] = quant.record()
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=directory))
    total = sum(math.prod(s) for name, s in weights.shapes.items() if name in graph.params)
    try:
        sink = ExternalData(staging / DATA)
        with tqdm(total=total, unit="param", unit_scale=True, desc="writing weights", file=sys.stderr,
                  disable=not progress or None, leave=False) as bar:
            weights.on_read = lambda name: bar.update(math.prod(weights.shapes[name]))
            try:
                if genai:
                    _write_genai(graph, weights, staging, manifest, opset, dtype, quant, sink)
                else:
                    write_graphs(graph, kinds, weights, staging, manifest, fused, quant, sink)
            finally:
                sink.close()
        if generate:
            manifest["graphs"]["generate"] = write_generate(staging, manifest, graph_metadata(manifest, "generate"))
        if genai:
            inputs = [i.name for i in onnx.load(str(staging / GRAPH), load_external_data=False).graph.input]
            (staging / CONFIG).write_text(json.dumps(genai_config(graph, inputs, model_type), indent=4) + "\n", encoding="utf-8")
        else:
            write_manifest(staging, manifest)
        result = Exported(directory, in_place_cache=manifest.get("in_place_cache"))
        result.files = publish(staging, directory, CONFIG if genai else MANIFEST)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result, weights


def _write_genai(graph: Graph, weights, staging: Path, manifest: dict, opset: int, dtype: str, quant,
                 sink: ExternalData) -> None:
    proto = emit_genai(graph, weights, opset=opset, dtype=dtype, quant=quant, sink=sink,
                       metadata=graph_metadata(manifest, "genai"))
    onnx.save_model(proto, str(staging / GRAPH))
    onnx.checker.check_model(str(staging / GRAPH), full_check=True)
    manifest["graphs"]["genai"] = GRAPH
