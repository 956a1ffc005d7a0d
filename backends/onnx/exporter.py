"""``tfspec export``: write a model's ONNX graphs, check them, prove them against PyTorch.

The directory holds one ``.onnx`` file per graph kind (``variants/``), for large models one
external data file they all refer to (``DATA``), and ``tfspec.json``: the manifest the runtime reads (format, tfspec
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
from typing import TYPE_CHECKING

import numpy as np
import onnx
from pydantic import ValidationError

from tfspec import __version__
from tfspec.checks import Check
from tfspec.errors import TfspecError
from tfspec.export_options import ExportOptions
from tfspec.search import SearchOptions, search
from tfspec.shortlist import FILE as SHORTLIST, Shortlist, save as save_shortlist
from tfspec.spec import spec_from_data

from .external import ExternalData
from .graphs import emit
from .passes.fused import fuse
from .passes.int8 import Int8
from .runtime import FORMAT, MANIFEST, OnnxModel
from .runtime.generator import check_generate, differences
from .runtime.shortlist import check_shortlist
from .variants import Asked, variant, written
from .variants.generate import compose
from .variants.inplace import NotInPlace

if TYPE_CHECKING:  # torch is imported by exporting only: loading and serving an export never needs it
    from tfspec.backends.torch import TorchModel

EXTERNAL_DATA_BYTES = 1 << 28
"""Graphs whose weights exceed this keep them in a side file (protobuf caps files at 2 GiB)."""
DATA = "model.onnx.data"
"""The one external data file every graph of a large export names (as onnxruntime-genai's builder
and onnx's tools name it), so that the weights are on disk once."""


@dataclass
class Exported:
    directory: Path
    files: dict[str, int] = field(default_factory=dict)
    """File name -> bytes."""
    checks: list[Check] = field(default_factory=list)
    int8: dict | None = None
    """With ``int8``: how the quantised graphs compare with float32, as the manifest records it."""
    in_place_cache: str | None = None
    """With ``fused``: why the in-place step graph was not written (None: written, or not asked for)."""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def graph_kinds(graph, static: bool = False, shortlist: bool = False, fused: bool = False) -> list[str]:
    """The graphs an export writes: those of the variants (``variants/``) that say so for these
    options (the full-sequence graph, the encoder, the step graph, and the static, shortlist
    and, ``fused``, in-place step graphs)."""
    return written(graph, Asked(static, shortlist, fused))


def refuse_conflicts(fp16: bool, int8: bool, fused: bool, generate: bool) -> None:
    """The options no export combines (the in-memory and the streamed routes alike):
    ``ExportOptions``' checks, in the words ``tfspec export`` refuses them in."""
    try:
        ExportOptions(fp16=fp16, int8=int8, fused=fused, generate=generate)
    except ValidationError as e:
        raise TfspecError(e.errors()[0]["msg"]) from None


def export(model: TorchModel, directory: str | Path, opset: int = 18, fp16: bool = False,
           parity: bool = True, int8: bool = False, static_cache: bool = False, generate: bool = False,
           shortlist: Shortlist | None = None, fused: bool = False) -> Exported:
    """Write the ONNX graphs of ``model`` (with its current weights) into ``directory``; with
    ``int8``, the float32 graphs are checked first and then replaced by quantised ones; with
    ``static_cache``, also the static step graph (``graphs`` module docstring) that GPUs
    replay as CUDA graphs; with ``generate``, also generate.onnx, the encoder and the whole
    search in one graph (``generate`` module), checked token for token against the Python
    search over the step graph; with ``shortlist`` (``tfspec.shortlist``), also the shortlist
    step graph and the shortlist file, checked against the step graph's log-probabilities; with
    ``fused``, the float32 graphs use onnxruntime's fused CPU operators (``fused`` module), and a
    step graph whose cache grows in place is added (``inplace`` module) where the model allows."""
    refuse_conflicts(fp16, int8, fused, generate)
    graph, spec = model.graph, model.graph.spec
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = {name: p.detach().cpu().float().numpy() for name, p in model.named_parameters()}
    dtype = "float16" if fp16 else "float32"
    manifest = new_manifest(spec, opset, dtype)
    if generate and "tgt" not in graph.ports:
        raise TfspecError(f"--generate: {spec.name} has no decoder that generates tokens (family {spec.family})")
    if shortlist and not {"src", "tgt"} <= set(graph.ports):
        raise TfspecError(f"--shortlist: {spec.name} does not translate sources (family {spec.family}); a shortlist "
                          "maps source tokens to target candidates")
    result = Exported(directory)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=directory))
    try:
        sink = _shared_data(graph, staging, manifest, int8)
        try:
            result.in_place_cache = write_graphs(graph, graph_kinds(graph, static_cache, bool(shortlist), fused),
                                                 weights, staging, manifest, fused, sink=sink)
        finally:
            if sink is not None:
                sink.close()
        if generate:
            manifest["graphs"]["generate"] = write_generate(staging, manifest, graph_metadata(manifest, "generate"))
        if shortlist:
            save_shortlist(shortlist, staging / SHORTLIST)
            manifest["shortlist"] = {"file": SHORTLIST, **shortlist.meta}
        write_manifest(staging, manifest)
        if parity:  # checked (and quantised) before publishing: a failure or an interrupt leaves nothing
            from tfspec.backends.parity.onnx import check_parity  # imports torch
            result.checks = check_parity(OnnxModel(staging, device="cpu"), model, tolerance=5e-2 if fp16 else 1e-4)
            if generate:
                result.checks += check_generate(OnnxModel(staging, device="cpu"))
            if shortlist:
                result.checks.append(check_shortlist(OnnxModel(staging, device="cpu")))
            manifest["parity"] = [{"check": c.name, "max_abs_diff": c.diff, "tolerance": c.tolerance, "ok": c.ok}
                                  for c in result.checks]
            write_manifest(staging, manifest)
        if int8:
            manifest["int8"] = result.int8 = quantize(graph, weights, staging, manifest, fused)
            write_manifest(staging, manifest)
        result.files = publish(staging, directory, MANIFEST)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _shared_data(graph, staging: Path, manifest: dict, int8: bool) -> ExternalData | None:
    """For weights over ``EXTERNAL_DATA_BYTES``: one data file every graph of the export refers
    to (recorded in ``manifest``), instead of a side file per graph holding them all again; the
    runtime then opens the full-sequence graph only when it is run. int8 exports re-emit every
    graph with their own weights, so they keep the per-graph files."""
    if int8 or 4 * graph.num_params <= EXTERNAL_DATA_BYTES:
        return None
    manifest["weights"] = {"file": DATA}
    return ExternalData(staging / DATA)


def new_manifest(spec, opset: int, dtype: str) -> dict:
    """The manifest of a new export, before its graphs are listed."""
    return {"format": FORMAT, "tfspec_version": __version__, "export_id": uuid.uuid4().hex, "name": spec.name,
            "opset": opset, "dtype": dtype, "vocab": spec.vocab.model_dump(mode="json"),
            "spec": spec.model_dump(mode="json"), "position_limit": spec.positional.limit, "graphs": {}}


def graph_metadata(manifest: dict, kind: str) -> dict[str, str]:
    """What every graph of the export carries, so a graph moved between directories is recognised."""
    return {"tfspec.version": __version__, "tfspec.format": str(FORMAT), "tfspec.graph": kind,
            "tfspec.export_id": manifest["export_id"], "tfspec.spec": json.dumps(manifest["spec"]),
            "tfspec.vocab": json.dumps(manifest["vocab"])}


def write_graphs(graph, kinds: list[str], weights, directory: Path, manifest: dict, fused: bool, quant=None,
                 sink=None) -> str | None:
    """``write_graph`` for each of ``kinds``; returns why the in-place step graph was not written
    (recorded in ``manifest``: the standard step graph serves), or None."""
    for kind in kinds:
        try:
            write_graph(graph, kind, weights, directory, manifest, fused, quant, sink)
        except NotInPlace as e:
            manifest["in_place_cache"] = f"not written: {e}"
    return manifest.get("in_place_cache")


def write_graph(graph, kind: str, weights, directory: Path, manifest: dict, fused: bool, quant=None,
                sink=None) -> None:
    """Emit graph ``kind`` (rewritten with onnxruntime's fused operators where ``fused`` and its
    variant say), save it into ``directory``, check it and list it in ``manifest``;
    with a ``sink`` (``external.ExternalData``) the weights go to its file, the graph holding
    references only."""
    proto = emit(graph, kind, weights, opset=manifest["opset"], dtype=manifest["dtype"],
                 metadata=graph_metadata(manifest, kind), quant=quant, sink=sink)
    if fused and variant(kind).fusable:
        manifest.setdefault("fused", {})[kind] = dict(fuse(proto, one_length=variant(kind).one_stream))
    path = directory / f"{kind}.onnx"
    save_graph(proto, path, shared=sink is not None)
    del proto  # the checker reads the file
    onnx.checker.check_model(str(path), full_check=True)
    manifest["graphs"][kind] = path.name


def write_generate(directory: Path, manifest: dict, metadata: dict[str, str]) -> str:
    """Compose generate.onnx from the directory's encoder and step graphs (float or quantised),
    check it with onnx.checker and return its file name."""
    graphs = manifest["graphs"]
    external = manifest.get("weights") is not None  # one shared data file: referenced, never loaded
    load = lambda kind: onnx.load(str(directory / graphs[kind]), load_external_data=not external).graph  # noqa: E731
    encoder = load("encoder") if "encoder" in graphs else None
    step = load("decoder")
    proto = compose(spec_from_data(manifest["spec"], MANIFEST), encoder, step, manifest["opset"], metadata)
    path = directory / "generate.onnx"
    save_graph(proto, path)
    onnx.checker.check_model(str(path), full_check=True)
    return path.name


def quantize(graph, weights, directory: Path, manifest: dict, fused: bool) -> dict:
    """Replace the directory's float32 graphs by int8 ones (``int8``: every constant-weight
    matrix product, per output channel; activations quantised at run time; norms, softmax and
    the rest float32), emitted again from ``weights`` with each weight quantised as it is read.
    generate.onnx is composed again from the quantised encoder and step graphs, so that it
    computes what they compute, and compared with the Python search over them. Returns how
    greedy decoding compares with the float32 graphs on the parity inputs, and generate.onnx
    with the Python search, as recorded in the manifest."""
    staging = Path(tempfile.mkdtemp(prefix=".int8-", dir=directory))
    try:
        write_graphs(graph, [k for k in manifest["graphs"] if k != "generate"], weights, staging, manifest, fused,
                     Int8())
        shutil.copy(directory / MANIFEST, staging / MANIFEST)
        if "generate" in manifest["graphs"]:
            write_generate(staging, manifest, graph_metadata(manifest, "generate"))
        record = {"weights": Int8().describe(), "ops": ["MatMul", "Gemm"]}
        if "decoder" in manifest["graphs"]:
            record |= agreement(OnnxModel(directory, device="cpu"), OnnxModel(staging, device="cpu"))
        if "generate" in manifest["graphs"]:  # recorded, as int8 agreement is: float32 parity decides
            found = differences(OnnxModel(staging, device="cpu")).values()
            record["generate_sentences"] = sum(n for _, n in found)
            record["generate_sentences_equal"] = record["generate_sentences"] - sum(d for d, _ in found)
        for file in manifest["graphs"].values():  # a float32 graph's weight file the int8 one may not have
            (directory / f"{file}.data").unlink(missing_ok=True)
        for path in staging.iterdir():  # the graphs and any external weight files
            if path.name != MANIFEST:
                os.replace(path, directory / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return record


def agreement(reference: OnnxModel, quantised: OnnxModel, seed: int = 0) -> dict:
    """Greedy tokens of ``quantised`` that equal ``reference``'s on the parity inputs (random
    sources: an untrained model's argmax is fragile, so judge int8 on a trained one's BLEU)."""
    spec = reference.spec
    rng = np.random.default_rng(seed)
    options = SearchOptions(beam=1, max_extra=12, max_length=12, min_length=12)
    if spec.family == "decoder-only":
        src, prefix = None, rng.integers(4, spec.vocab.tgt_size, (8, 1))
    else:
        src, prefix = rng.integers(4, spec.vocab.size, (8, 11)), None
    ours, theirs = (search(m.decoder(), src, options, prefix) for m in (quantised, reference))
    same = sum(a == b for x, y in zip(ours, theirs) for a, b in zip(x, y))
    return {"greedy_tokens_equal": same, "greedy_tokens": sum(map(len, theirs)),
            "sentences_equal": sum(x == y for x, y in zip(ours, theirs)), "sentences": len(theirs)}


def publish(staging: Path, directory: Path, last: str) -> dict[str, int]:
    """Move the files written in ``staging`` into ``directory``, ``last`` (the file readers
    look for first) removed before and moved in after the others, so a half-replaced
    directory never looks complete. Returns file name -> bytes."""
    if (directory / last).exists():
        (directory / last).unlink()
    files = {}
    for path in sorted(staging.iterdir(), key=lambda p: p.name == last):
        os.replace(path, directory / path.name)
        files[path.name] = (directory / path.name).stat().st_size
    return files


def write_manifest(directory: Path, manifest: dict) -> None:
    """Replace the directory's manifest atomically (a reader sees the old one or the new one)."""
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, directory / MANIFEST)


def save_graph(proto: onnx.ModelProto, path: Path, shared: bool = False) -> None:
    """Save ``proto``; a large one's weights to a side file of its own, unless its large weights
    already live in the export's ``shared`` data file (the small ones stay inside it)."""
    if not shared and weight_bytes(proto.graph) > EXTERNAL_DATA_BYTES:
        onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=f"{path.name}.data", size_threshold=1024)
    else:
        onnx.save_model(proto, str(path))


def weight_bytes(graph: onnx.GraphProto) -> int:
    """Bytes of ``graph``'s initializers and of its subgraphs' (generate.onnx's Loop bodies hold
    the step's weights), which the external data file takes."""
    nested = [a.g for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
    return sum(len(t.raw_data) for t in graph.initializer) + sum(map(weight_bytes, nested))
