"""``tfspec import``: a Hugging Face checkpoint directory -> a tfspec spec and weight file.

The configuration goes through its family module (refused by name where tfspec would not
compute the same thing), the spec is validated and lowered, every checkpoint tensor is matched
against the IR's parameters (names, shapes, floating types) before anything is written, and
the output is written into a temporary directory that becomes OUT_DIR only when complete.
"""

from __future__ import annotations

import fnmatch
import shutil
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from pydantic import ValidationError

from tfspec.errors import TfspecError
from tfspec.interop.hf.checkpoint import (CONFIG, KEPT, Checkpoint, check_writable, open_checkpoint,
                                          read_vocabulary, staged_directory)
from tfspec.interop.hf.family import FAMILIES, Family, Rule, Source
from tfspec.interop.hf.quantized import dequantized
from tfspec.tensors import write_safetensors
from tfspec.ir import build_graph
from tfspec.spec import Spec

SPEC_FILE = "spec.yaml"
WEIGHTS_FILE = "model.safetensors"


@dataclass
class Imported:
    spec: Spec
    architecture: str
    directory: Path
    """Where the import was written (the checkpoint itself for ``checkpoint_spec``)."""
    num_params: int
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)
    """config.json fields present that do not change the computation -> why (``check_config``)."""


def family_of(config: dict, where: str) -> Family:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise TfspecError(f"{where}: model_type {model_type!r} is not supported; tfspec imports: "
                          f"{', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]()


def import_checkpoint(directory: str | Path, output: str | Path, name: str | None = None,
                      architecture: str | None = None, dtype: str = "auto", progress: bool = True) -> Imported:
    """``dtype`` "auto": the checkpoint's own float type (float32 where its tensors mix types)."""
    directory, output = Path(directory), Path(output)
    check_writable(output)
    read = _read(directory, name, architecture)
    result, checkpoint, plan = read.result, read.checkpoint, read.plan
    result.directory = output
    if dtype == "auto":
        dtype = stored_dtype(checkpoint)
    with staged_directory(output) as staging:
        _write_spec(staging / SPEC_FILE, read.data, directory, result.architecture, result.ignored)
        if plan is not None:
            _write_weights(staging / WEIGHTS_FILE, read.graph, plan, checkpoint, dtype, progress, directory)
        for path in checkpoint.tokenizer_files() + [p for p in map(directory.joinpath, KEPT) if p.is_file()]:
            shutil.copyfile(path, staging / path.name)
        result.files = sorted(p.name for p in staging.iterdir())
    return result


def checkpoint_spec(directory: str | Path) -> Imported:
    """What ``import_checkpoint`` would write for ``directory``, checked as it checks (every
    tensor's name, shape and type against the IR, read from the file headers), with nothing
    written or converted: ``tfspec report`` and the other spec-only commands on a checkpoint."""
    return _read(Path(directory), None, None).result


@dataclass
class _Read:
    result: Imported
    checkpoint: Checkpoint
    data: dict
    graph: object
    plan: list | None


def _read(directory: Path, name: str | None, architecture: str | None) -> _Read:
    """The checkpoint, its family's spec and the plan mapping its tensors to the IR's."""
    checkpoint = open_checkpoint(directory)
    where = str(directory / CONFIG)
    family = family_of(checkpoint.config, where)
    architecture = _architecture(family, checkpoint.config, architecture, where)
    ignored = family.check(checkpoint.config, where)
    checkpoint = dequantized(checkpoint)
    names = _names(family, checkpoint) if checkpoint.has_weights else None
    source = Source(checkpoint.config, where, architecture, None if names is None else frozenset(names),
                    read_vocabulary(directory))
    spec, data = _spec(family, source, name or published_name(directory), directory)
    graph = build_graph(spec)
    result = Imported(spec, architecture, directory, graph.num_params, ignored=ignored)
    plan = _plan(family, spec, graph, architecture, checkpoint, names, result.notes) if names is not None else None
    if plan is None and family.leaves_out:  # with weights, the note on its tensors says it
        result.notes.append(f"left out {family.leaves_out}")
    return _Read(result, checkpoint, data, graph, plan)


def stored_dtype(checkpoint: Checkpoint) -> str:
    """The one float type every stored float tensor has (safetensors), else float32."""
    codes = {t.dtype for t in checkpoint.tensors.values() if isinstance(t.dtype, str) and t.dtype.startswith(("F", "BF"))}
    return {"F16": "float16", "BF16": "bfloat16"}.get(codes.pop(), "float32") if len(codes) == 1 else "float32"


def _architecture(family: Family, config: dict, chosen: str | None, where: str) -> str:
    listed = config.get("architectures") or [None]
    architecture = chosen or (listed[0] if isinstance(listed, list) else None) or next(iter(family.architectures))
    if not chosen:
        architecture = _native(family, config, architecture)
    if architecture not in family.architectures:
        base = next((name for name, prefix in family.architectures.items() if not prefix and name.endswith("Model")),
                    None)
        hint = f" (`--architecture {base}` imports the base model without its task head)" if base else ""
        raise TfspecError(f"{where}: architecture {architecture!r} is not supported; tfspec imports "
                          f"{family.model_type} as {', '.join(family.architectures)}{hint}")
    return architecture


def _native(family: Family, config: dict, architecture: str) -> str:
    """transformers' own class in place of a repository's (``auto_map``: Phi-mini-MoE's
    ``PhiMoEForCausalLM``, of modeling_slimmoe.py): for a model type it has a class of, transformers
    resolves an auto class (``AutoModelForCausalLM``) by the model type, never by that name, so the
    family's class that ends as the auto class does (``PhimoeForCausalLM``) is the one imported."""
    auto_map = config.get("auto_map")
    if architecture in family.architectures or not isinstance(auto_map, dict):
        return architecture
    auto = next((key for key, value in auto_map.items()
                 if isinstance(value, str) and value.rsplit(".", 1)[-1] == architecture), "")
    if not auto.startswith("AutoModel"):
        return architecture
    task = auto.removeprefix("AutoModel") or "Model"  # AutoModelForCausalLM: ForCausalLM; AutoModel: the base model
    return next((name for name in family.architectures if name.endswith(task)), architecture)


def _names(family: Family, checkpoint: Checkpoint) -> dict[str, str]:
    """Canonical tensor name (base prefix removed, current spelling) -> name in the checkpoint."""
    prefixes = sorted({p for p in family.architectures.values() if p}, key=len, reverse=True)
    names = {}
    for original in checkpoint.tensors:
        stripped = next((original[len(p):] for p in prefixes if original.startswith(p)), original)
        names[family.rename(stripped)] = original
    return names


def published_name(directory: Path) -> str:
    """The model's published name: the hub cache's ``models--org--name`` folder, else the
    directory's name. (Not the config's ``_name_or_path``: a fine-tune keeps there the name of
    the model it started from, bart-large-cnn for bart-large-cnn-samsum.)"""
    for part in reversed(directory.resolve().parts):
        if part.startswith("models--"):
            return part.split("--")[-1]
    return directory.resolve().name or "model"


def _spec(family: Family, source: Source, name: str, directory: Path) -> tuple[Spec, dict]:
    """The validated spec and the data it was validated from (what spec.yaml will say)."""
    data = family.spec_data(source)
    stack = data.get("encoder") or data.get("decoder")
    layers = stack.get("layers") or sum(group["layers"] for group in stack["groups"])
    description = (f"{family.title} ({source.architecture}) imported from Hugging Face, "
                   f"{layers} layers, d_model {data['d_model']}, {data['heads']} heads, "
                   + (f"{data['patches']['image_size']}-pixel images in {data['patches']['patch_size']}-pixel "
                      "patches." if "patches" in data else f"{data['vocab']['size']}-token vocabulary."))
    version = source.config.get("transformers_version")
    reference = {"source": f"Hugging Face checkpoint {name} ({source.architecture}"
                           f"{f', transformers {version}' if version else ''}), imported from {directory}",
                 "architecture": source.architecture}
    data = {"name": name, "description": description, **data, "reference": reference}
    try:
        return Spec.model_validate(data), data
    except ValidationError as e:
        err = e.errors()[0]
        path = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        raise TfspecError(f"{source.where}: this configuration does not give a valid tfspec spec: "
                          f"{f'{path}: ' if path else ''}{err['msg']}") from None


@dataclass(frozen=True)
class Step:
    """One IR parameter and the checkpoint tensors (their names as stored) it is made of."""

    rule: Rule
    stored: tuple[str, ...]


def _plan(family: Family, spec: Spec, graph, architecture: str, checkpoint: Checkpoint, names: dict[str, str],
          notes: list[str]) -> list[Step]:
    """Match every checkpoint tensor to the IR, or refuse naming the first tensor that does not fit."""
    rules = family.rules(spec, architecture)
    assert {r.ir for r in rules} == set(graph.params), "a family's rules must cover the IR's parameters exactly"
    problems, used, plan = [], set(), []
    for rule in rules:
        for hf, shape in rule.hf_shapes(graph.params[rule.ir].shape).items():
            used.add(hf)
            if hf not in names:
                problems.append(f"{checkpoint.directory}: tensor {hf!r} {list(shape)} is missing ({spec.name} "
                                f"as {architecture} needs it for {rule.ir})")
            elif (found := tuple(checkpoint.shape(names[hf]))) != shape:
                problems.append(f"{checkpoint.where(names[hf])}: tensor {names[hf]!r} has shape {list(found)}; "
                                f"the configuration needs {list(shape)}")
            elif not _floating(checkpoint, names[hf]):
                problems.append(f"{checkpoint.where(names[hf])}: tensor {names[hf]!r} is not floating point")
        plan.append(Step(rule, tuple(names.get(n, n) for n in rule.hf)))
    dropped: dict[str, list[str]] = {}
    for name in sorted(names.keys() - used):
        reason = next((why for pattern, why in family.dropped(architecture).items()
                       if fnmatch.fnmatchcase(name, pattern)), None)
        if reason is None:
            problems.append(f"{checkpoint.where(names[name])}: unexpected tensor {names[name]!r}: no parameter of "
                            f"{spec.name} as {architecture} takes it")
        else:
            dropped.setdefault(reason, []).append(names[name])
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise TfspecError(problems[0] + more)
    notes += [f"left out {len(group)} tensors ({group[0]}{', ...' if len(group) > 1 else ''}): {why}"
              for why, group in dropped.items()]
    return plan


def _floating(checkpoint: Checkpoint, name: str) -> bool:
    tensor = checkpoint.tensors[name]
    return tensor.dtype.startswith(("F", "BF")) if isinstance(tensor.dtype, str) else tensor.dtype.kind == "f"


def _write_spec(path: Path, data: dict, directory: Path, architecture: str, ignored: dict[str, str]) -> None:
    header = (f"# Written by `tfspec import {directory}` ({architecture}). Every config.json field that changes the\n"
              "# computation is mapped here; the weights are model.safetensors beside this file (IR names).\n")
    if ignored:  # a comment: the spec itself has no use for them, a reader checking the import has
        listed = textwrap.wrap("Fields read as not changing the computation: " + ", ".join(sorted(ignored)) + ".",
                               width=108)
        header += "".join(f"# {line}\n" for line in listed)
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110), encoding="utf-8")


def _write_weights(path: Path, graph, plan: list[Step], checkpoint: Checkpoint, dtype: str, progress: bool,
                   directory: Path) -> None:
    from tqdm import tqdm

    shapes = {step.rule.ir: graph.params[step.rule.ir].shape for step in plan}
    total = sum(int(np.prod(s)) for s in shapes.values()) * 4
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="converting", disable=not progress or None,
               file=sys.stderr, leave=False)

    def tensors():
        for step in plan:
            value = step.rule.to_ir([checkpoint.read(name) for name in step.stored])
            bar.update(value.size * 4)
            yield step.rule.ir, value

    with bar:
        write_safetensors(path, shapes, dtype, tensors(), {"tfspec.model": graph.name, "tfspec.source": str(directory),
                                                           "format": "pt"})
