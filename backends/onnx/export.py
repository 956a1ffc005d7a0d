"""``tfspec export``: write a model's ONNX graphs, check them, prove them against PyTorch.

The directory holds one ``.onnx`` file per graph kind (``graphs.KINDS``), external weight
files for large models, and ``tfspec.json``: the manifest the runtime reads (format, tfspec
version, spec, vocabulary, opset, dtype, graph files, parity results). Every graph also
carries the spec, vocabulary, version and an export id in its metadata, so a graph moved
between directories is recognised. Files are written to a temporary directory beside the
target and moved in last, manifest last of all, so an interrupted export leaves no mixture.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from tfspec import __version__
from tfspec.backends.torch import TorchModel

from .graphs import emit
from .parity import Check, check_parity
from .runtime import FORMAT, MANIFEST, OnnxModel

EXTERNAL_DATA_BYTES = 1 << 28
"""Graphs whose weights exceed this keep them in a side file (protobuf caps files at 2 GiB)."""


@dataclass
class Exported:
    directory: Path
    files: dict[str, int] = field(default_factory=dict)
    """File name -> bytes."""
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def graph_kinds(model: TorchModel) -> list[str]:
    ports = model.graph.ports
    return ["model"] + (["encoder"] if "src" in ports else []) + (["decoder"] if "tgt" in ports else [])


def export(model: TorchModel, directory: str | Path, opset: int = 18, fp16: bool = False,
           parity: bool = True) -> Exported:
    """Write the ONNX graphs of ``model`` (with its current weights) into ``directory``."""
    graph, spec = model.graph, model.graph.spec
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = {name: p.detach().cpu().float().numpy() for name, p in model.named_parameters()}
    dtype = "float16" if fp16 else "float32"
    export_id = uuid.uuid4().hex
    manifest = {"format": FORMAT, "tfspec_version": __version__, "export_id": export_id, "name": spec.name,
                "opset": opset, "dtype": dtype, "vocab": spec.vocab.model_dump(mode="json"),
                "spec": spec.model_dump(mode="json"), "graphs": {}}
    result = Exported(directory)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=directory))
    try:
        for kind in graph_kinds(model):
            metadata = {"tfspec.version": __version__, "tfspec.format": str(FORMAT), "tfspec.graph": kind,
                        "tfspec.export_id": export_id, "tfspec.spec": json.dumps(manifest["spec"]),
                        "tfspec.vocab": json.dumps(manifest["vocab"])}
            proto = emit(graph, kind, weights, opset=opset, dtype=dtype, metadata=metadata)
            path = staging / f"{kind}.onnx"
            _save(proto, path)
            onnx.checker.check_model(str(path), full_check=True)
            manifest["graphs"][kind] = path.name
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if (directory / MANIFEST).exists():
            (directory / MANIFEST).unlink()  # a half-replaced directory must not look complete
        for path in sorted(staging.iterdir(), key=lambda p: p.name == MANIFEST):
            os.replace(path, directory / path.name)
            result.files[path.name] = (directory / path.name).stat().st_size
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if parity:
        result.checks = check_parity(OnnxModel(directory, device="cpu"), model, tolerance=5e-2 if fp16 else 1e-4)
        manifest["parity"] = [{"check": c.name, "max_abs_diff": c.diff, "tolerance": c.tolerance, "ok": c.ok}
                              for c in result.checks]
        tmp = directory / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, directory / MANIFEST)
    return result


def _save(proto: onnx.ModelProto, path: Path) -> None:
    weights = sum(len(t.raw_data) for t in proto.graph.initializer)
    if weights > EXTERNAL_DATA_BYTES:
        onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=f"{path.name}.data", size_threshold=1024)
    else:
        onnx.save_model(proto, str(path))
