"""The streamed route of ``tfspec export``: weights from a safetensors file into one external
data file, one tensor at a time (``backends/onnx/streamed.py``), for ``--int4``, ``--int8``,
``--stream``, and models whose float32 PyTorch form would not fit in memory.

The memory each route needs is printed before anything is read; a model is refused only when
even the streamed route cannot fit, naming its largest tensor. Parity with PyTorch needs the
float32 model: where it fits it is checked in full, else the export says what was checked
instead (a one-layer model cut from the same weights, exported and compared the same way).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from tfspec.errors import TfspecError
from tfspec.ir import build_graph

GiB = 1 << 30


def quant_options(args):
    """``--int4`` and its settings as ``int4.Int4``, ``--int8`` as ``int8.Int8``, or None (its
    settings without it, and what it does not combine with, refused by ``ExportOptions``)."""
    if not args.int4:
        from tfspec.backends.onnx.passes.int8 import Int8

        return Int8() if args.int8 else None
    from tfspec.backends.onnx.passes.int4 import Int4

    return Int4(args.int4_block, not args.int4_zero_points, 4 if args.int4_embeddings == "int4" else 8)


def streamed_file(args, spec) -> Path | None:
    """The safetensors file the streamed route reads (IR names: ``--weights``, else an imported
    directory's model.safetensors), or None where the weights come from elsewhere."""
    chosen = Path(args.weights) if args.weights else Path(args.spec) / "model.safetensors"
    if chosen.suffix != ".safetensors" or not chosen.is_file():
        return None
    from tfspec.tensors import read_header

    names = read_header(chosen)[0].keys()
    return chosen if set(build_graph(spec).params) <= names else None


def choose_route(args, spec, quant) -> tuple[bool, object]:
    """(stream?, the memory needs), printing what each route needs and what is available."""
    from tfspec.backends.onnx.streamed import available, needs, written_bytes

    graph = build_graph(spec)
    params = graph.num_params
    need, free = needs(graph, written_bytes(graph, quant)), available()
    file = streamed_file(args, spec)
    forced = args.stream or (file is not None and free and need.floating > free)
    if forced and in_memory(args):
        what = ("--format optimum is written from memory" if args.format == "optimum" else "--shortlist is exported "
                "in memory only (its step graph is checked against the float32 one, which --int8 then quantises)")
        raise TfspecError(f"{what}: " + (
                              "leave out --stream" if args.stream else
                              f"~{need.floating / GiB:.1f} GiB that way, {free / GiB:.1f} GiB is available"))
    stream = bool(forced) or (quant is not None and not in_memory(args))
    print(f"memory: {params:,} parameters; float32 route ~{need.floating / GiB:.1f} GiB, streamed route "
          f"~{need.streamed / GiB:.1f} GiB (largest tensor {need.largest}), {free / GiB:.1f} GiB available; "
          f"{'streaming' if stream else 'float32 route'}", file=sys.stderr)
    if stream and free and need.streamed > free:
        raise TfspecError(f"{spec.name}: even streamed, the export needs ~{need.streamed / GiB:.1f} GiB "
                          f"({need.largest} in float32, and onnxruntime's copy of the written weights); "
                          f"{free / GiB:.1f} GiB is available")
    if stream and file is None and free and need.floating > free:
        raise TfspecError(f"{args.weights or args.spec}: streaming reads a safetensors file with tfspec's "
                          f"parameter names (`tfspec import` writes one); these weights would be loaded whole "
                          f"(~{need.floating / GiB:.1f} GiB), more than the {free / GiB:.1f} GiB available")
    return stream, need


def in_memory(args) -> bool:
    """Whether the export takes the in-memory route whatever its size: ``--shortlist``, whose
    graph is checked against the float32 step graph (before ``--int8`` quantises both), and
    ``--format optimum``, whose quantised graphs sit beside the float ones they are emitted with."""
    return args.shortlist is not None or args.format == "optimum"


def export_stream(args, spec, quant, need, home: Path | None) -> tuple[object, list]:
    """Write the export by streaming; returns (the export, its checks: empty with --no-check).
    ``home``: the directory whose tokenizer reads ``--int4-calibrate``'s text."""
    from tfspec.backends.onnx.streamed import available, export_streamed

    graph, started = build_graph(spec), time.perf_counter()
    file, model, scratch = streamed_file(args, spec), None, None
    if file is None:  # a training run's checkpoint or random weights: held whole (they fit: choose_route)
        model = _torch_model(spec, args)
        scratch = tempfile.TemporaryDirectory(prefix=".weights-", dir=Path(args.output).parent)
        file = _save(model, Path(scratch.name) / "model.safetensors")
    else:
        print(f"weights: {file} (streamed)", file=sys.stderr)
    try:
        if args.int4_calibrate is not None:
            quant = _calibrated(args, spec, file, quant, need, home)
        result, reader = export_streamed(graph, file, Path(args.output), _kinds(args, graph), args.opset,
                                         "float16" if args.fp16 else "float32", quant, args.generate,
                                         genai=args.format == "genai", fused=args.fused,
                                         model_type=genai_type(spec) if args.format == "genai" else "decoder")
        print(f"streamed: {reader.reads} tensors read, at most {reader.peak} in memory at once, in "
              f"{time.perf_counter() - started:.1f}s" + (f"; {quant.describe()}" if quant else ""))
        if args.no_check:
            return result, []
        free = available()
        if free and need.floating > free:
            return result, _truncated(args, spec, file, quant, need, free)
        return result, _checks(args, result.directory, model or _torch_model(spec, args), quant)
    finally:
        if scratch is not None:
            scratch.cleanup()


def genai_type(spec) -> str:
    """genai's ``model.type`` for ``spec`` (``variants.genai.runtime_type``): the Hugging Face
    family that computes it exactly, asked here so that the backend loads no family."""
    from tfspec.backends.onnx.variants.genai import HF_TYPES, runtime_type
    from tfspec.interop.hf.export import exact_model_type

    return runtime_type(exact_model_type(spec, HF_TYPES))


def _calibrated(args, spec, file: Path, quant, need, home: Path | None):
    """``quant`` with activation-aware scales from the float32 model run on the calibration text."""
    import dataclasses

    from tfspec.backends.onnx.passes.awq import channel_scales
    from tfspec.backends.onnx.streamed import available
    from tfspec.data.codecs import shipped_codec
    from tfspec.tensors import SafetensorsWeights

    free = available()
    if free and need.floating > free:
        raise TfspecError(f"--int4-calibrate runs the float32 model on the text: ~{need.floating / GiB:.1f} GiB, "
                          f"{free / GiB:.1f} GiB available; leave it out to round to nearest while streaming")
    if spec.family != "decoder-only":
        raise TfspecError(f"--int4-calibrate: {spec.name} is {spec.family}; calibration runs decoder-only models on text")
    codec = shipped_codec(args.tokenizer, home, spec.vocab)
    if codec is None:
        raise TfspecError(f"--int4-calibrate: {args.spec} has no tokenizer (tokenizer.json or tokenizer.model) "
                          "to read the calibration text with; give --tokenizer MODEL")
    limit = (spec.positional.limit or 512) - 1
    try:
        lines = [line for line in args.int4_calibrate.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise TfspecError(f"{args.int4_calibrate}: cannot read it as UTF-8 text ({e})") from None
    sequences = [codec.prompt(line)[:min(limit, 512)] for line in lines[:128]]
    if not sequences:
        raise TfspecError(f"{args.int4_calibrate}: no text to calibrate with")
    started = time.perf_counter()
    graph = build_graph(spec)
    scales = channel_scales(graph, SafetensorsWeights(file), sequences, quant.block, quant.symmetric)
    print(f"calibration: {len(sequences)} lines, {sum(map(len, sequences)):,} tokens of {args.int4_calibrate}; "
          f"activation-aware scales for {len(scales)} of {len(_projections(graph))} projections (the rest round "
          f"to nearest, which was better on these activations), {time.perf_counter() - started:.1f}s",
          file=sys.stderr)
    return dataclasses.replace(quant, channel_scales=scales)


def _projections(graph) -> list[str]:
    from tfspec.backends.onnx.passes.int4 import tables

    return [n for n, p in graph.params.items() if len(p.shape) == 2 and n not in tables(graph)]


def _kinds(args, graph) -> list[str]:
    """The graphs ``export_streamed`` writes for these options."""
    from tfspec.backends.onnx.exporter import graph_kinds

    return ["genai"] if args.format == "genai" else graph_kinds(graph, args.static_cache, fused=args.fused)


def _torch_model(spec, args):
    from tfspec.cli.models import model_to_export

    return model_to_export(spec, args)


def _save(model, path: Path) -> Path:
    from tfspec.tensors import write_safetensors

    params = dict(model.named_parameters())
    write_safetensors(path, {n: tuple(p.shape) for n, p in params.items()}, "float32",
                      ((n, p.detach().float().numpy()) for n, p in params.items()), {"format": "pt"})
    return path


def _checks(args, directory: Path, model, quant, label: str = "") -> list:
    """Parity of the written graphs with the PyTorch ``model``: in full for float32 graphs,
    both ``quant_parity`` checks for quantised ones (``model`` then holds the graphs' weights)."""
    from tfspec.backends.onnx import OnnxModel

    fp16 = args.fp16
    if args.format == "genai":
        from tfspec.backends.parity.genai import check_genai_parity
        from tfspec.backends.parity.quant import dequantised, output_scales

        path = directory / "model.onnx"
        if quant is None:
            return check_genai_parity(path, model, tolerance=5e-2 if fp16 else 1e-4)
        model = dequantised(model, path, quant)
        return check_genai_parity(path, model, tolerance=quant.same_weights * output_scales(model)["logits"])
    onnx_model = OnnxModel(directory, device="cpu")
    if quant is not None:
        from tfspec.backends.parity.quant import check_quantised

        checks = check_quantised(onnx_model, model, quant)
    else:
        from tfspec.backends.parity.onnx import check_parity

        checks = check_parity(onnx_model, model, tolerance=5e-2 if fp16 else 1e-4)
    if args.generate:
        from tfspec.backends.onnx.runtime.generator import check_generate

        checks += check_generate(OnnxModel(directory, device="cpu"))
    return checks


def _truncated(args, spec, file: Path, quant, need, free: int) -> list:
    """Parity where the float32 model does not fit: the spec cut to its first layer, exported
    from the same weights the same way, checked in full against PyTorch."""
    import torch

    from tfspec.backends.onnx.streamed import export_streamed
    from tfspec.backends.torch import build_module
    from tfspec.tensors import SafetensorsWeights

    print(f"parity: the float32 model needs ~{need.floating / GiB:.1f} GiB, {free / GiB:.1f} GiB is available: "
          "checking its first layer (embeddings, layer 0, final norm and output projection of these weights) "
          "instead of the whole model", file=sys.stderr)
    cut = _first_layer(spec)
    graph = build_graph(cut)
    model = build_module(cut).eval()
    weights = SafetensorsWeights(file)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name]))
    with tempfile.TemporaryDirectory(prefix=".first-layer-", dir=Path(args.output).parent) as scratch:
        export_streamed(graph, file, Path(scratch), _kinds(args, graph), args.opset,
                        "float16" if args.fp16 else "float32", quant, genai=args.format == "genai", progress=False,
                        fused=args.fused, model_type=genai_type(spec) if args.format == "genai" else "decoder")
        args = _without_generate(args)
        checks = _checks(args, Path(scratch), model, quant)
    from tfspec.checks import Check

    return [Check(f"first layer only: {c.name}", c.diff, c.tolerance) for c in checks]


def _first_layer(spec):
    """``spec`` with one layer in each stack (the first group's kind, for grouped stacks)."""
    from tfspec.spec import Spec

    data = spec.model_dump(mode="json")
    for stack in ("encoder", "decoder"):
        if data.get(stack):
            if data[stack].get("groups"):
                data[stack]["groups"] = [data[stack]["groups"][0] | {"layers": 1}]
            else:
                data[stack]["layers"] = 1
    return Spec.model_validate(data)


def _without_generate(args):
    import copy

    args = copy.copy(args)
    args.generate = False
    return args
