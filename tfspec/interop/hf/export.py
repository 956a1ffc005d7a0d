"""``tfspec export --format hf``: a spec and its weights as a directory transformers loads.

A spec fits a family when importing the configuration the family writes for it gives the
same spec back (up to the family's ``free`` fields: training settings and ids only tokenizers
read). So an exported checkpoint computes what the spec computes, or it is not written: the
refusal names each field where the spec and the family differ.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from tfspec.errors import TfspecError
from tfspec.interop.hf.checkpoint import CONFIG, staged_directory
from tfspec.interop.hf.family import FAMILIES, Family, Source
from tfspec.interop.hf.imports import WEIGHTS_FILE
from tfspec.tensors import write_safetensors
from tfspec.spec import Spec


CLOSEST = 3
"""Families a refusal describes: the nearest ones, so that the line says what to change."""


def fitting_family(spec: Spec) -> Family:
    """The family whose transformers class computes exactly what ``spec`` does, the one of the
    architecture it was imported from first (a Mistral checkpoint without a window computes what
    Llama does, and stays Mistral); refused with the reasons of the ``CLOSEST`` families (fewest
    differing fields), not all of them."""
    source = spec.reference.architecture if spec.reference is not None else None
    misses = []
    for model_type in sorted(FAMILIES, key=lambda t: (source not in FAMILIES[t].architectures,
                                                      FAMILIES[t].export_rank, t)):
        family = FAMILIES[model_type]()
        reason, distance = _misfit(family, spec)
        if reason is None:
            return family
        misses.append((distance, len(misses), f"not {family.title}: {reason}"))
    closest = [reason for *_, reason in sorted(misses)[:CLOSEST]]
    raise TfspecError(f"{spec.name} fits no Hugging Face family tfspec exports; closest: " + "; ".join(closest)
                      + f" ({len(misses) - len(closest)} other families differ more)")


def exact_model_type(spec: Spec, model_types) -> str | None:
    """The first of ``model_types`` whose family computes exactly what ``spec`` does, or None."""
    return next((t for t in model_types if misfit(FAMILIES[t](), spec) is None), None)


def misfit(family: Family, spec: Spec) -> str | None:
    """Why ``spec`` is not ``family`` (the resolved fields that differ), or None."""
    return _misfit(family, spec)[0]


def _misfit(family: Family, spec: Spec) -> tuple[str | None, float]:
    """``misfit``'s reason and how far ``spec`` is from ``family``: the number of differing
    fields, more for a configuration that does not hold, most for another structure."""
    if reason := family.structure(spec):
        return reason, 1e6
    if not family.grouped and (differing := [name for name, stack in spec.stacks if not stack.uniform]):
        return (f"the {' and '.join(differing)} layers are not all alike (groups of different blocks); "
                f"{family.title} repeats one layer"), 1e5
    spec = family_form(spec)
    config = family.config(spec)
    source = Source(config, "(exported config)", family.architecture_for(spec))
    try:
        rebuilt = Spec.model_validate({"name": spec.name, **family.spec_data(source)})
    except ValidationError as e:
        return f"its {family.title} configuration is not a valid spec ({e.errors()[0]['msg']})", 1e4
    except TfspecError as e:  # the family's import refuses what its config() wrote: a spec it cannot hold
        return f"{family.title} does not import its own configuration of it ({str(e).removeprefix('error: ')})", 1e4
    ours, theirs = _flat(spec, family.free), _flat(rebuilt, family.free)
    differ = [key for key in ours.keys() | theirs.keys() if ours.get(key) != theirs.get(key)]
    if not differ:
        return None, 0
    return ", ".join(f"{key} is {_show(ours.get(key))} ({family.title}: {_show(theirs.get(key))})"
                     for key in sorted(differ)), len(differ)


def family_form(spec: Spec) -> Spec:
    """``spec`` in the form the families read: each stack whose layers are alike written as
    layers + block (a stack written as groups of one block computes the same; a stack whose
    layers differ stays groups, which only a ``grouped`` family reads), and each causal window
    reaching every position the spec holds written as causal attention (``_unwindowed``)."""
    data = spec.model_dump(mode="json")
    for name, stack in spec.stacks:
        if stack.groups is not None and stack.uniform:
            data[name] = {"layers": stack.num_layers, "block": data[name]["groups"][0]["block"], "shared": stack.shared,
                          "act": data[name]["act"], "share_layers": data[name]["share_layers"]}
        for block in [data[name]["block"]] if data[name].get("block") else [g["block"] for g in data[name]["groups"]]:
            block[:] = [_unwindowed(layer, spec.positional.max_len) for layer in block]
    return spec if data == spec.model_dump(mode="json") else Spec.model_validate(data)


def _unwindowed(layer, max_len: int):
    """A causal ``restricted_self_attention`` layer (dumped) whose window of r + 1 keys holds
    all of the max_len positions as ``causal_self_attention``, which computes the same, else
    ``layer``: the families import such a window so (Mistral's sliding_window at least
    max_position_embeddings), so a spec extending mistral-7b with fewer positions exports."""
    if not (isinstance(layer, dict) and layer.get("kind") == "restricted_self_attention" and layer.get("causal")):
        return layer
    reach = (layer.get("positions") or {}).get("max_len", max_len)
    if layer["r"] + 1 < reach:
        return layer
    return {k: v for k, v in layer.items() if k not in ("r", "causal")} | {"kind": "causal_self_attention"}


def _flat(spec: Spec, free: tuple[str, ...]) -> dict[str, object]:
    """The spec's resolved fields (``Spec.canonical``) as dotted keys, ``free`` ones left out."""
    flat: dict[str, object] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}{k}.", v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(f"{prefix}{i}.", v)
        elif prefix[:-1] not in free:
            flat[prefix[:-1]] = value

    walk("", spec.canonical())
    return flat


def _show(value) -> str:
    return "unset" if value is None else json.dumps(value)


def export_checkpoint(spec: Spec, weights: dict[str, np.ndarray], output: str | Path, dtype: str = "float32",
                      extra_files: list[Path] = ()) -> tuple[str, list[str]]:
    """Write ``config.json`` and ``model.safetensors`` (plus ``extra_files``, e.g. tokenizer
    files) for ``spec`` with ``weights`` (IR names); return the architecture and file names. A
    tensor several rules write (a ``Split`` block each) is joined by the later rule's layout."""
    family = fitting_family(spec)
    spec = family_form(spec)
    architecture = family.architecture_for(spec)
    prefix = family.architectures[architecture]
    tensors: dict[str, np.ndarray] = {}
    for rule in family.rules(spec, architecture):
        for name, value in rule.to_hf(weights[rule.ir]).items():
            key = name if name.startswith(family.heads) else prefix + name
            tensors[key] = rule.layout.join(tensors[key], value) if key in tensors else value
    config = family.config(spec) | {"dtype": dtype}
    with staged_directory(Path(output)) as staging:
        (staging / CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        write_safetensors(staging / WEIGHTS_FILE, {k: v.shape for k, v in tensors.items()}, dtype,
                          tensors.items(), {"format": "pt", "tfspec.model": spec.name})
        for path in extra_files:
            shutil.copyfile(path, staging / path.name)
        files = sorted(p.name for p in staging.iterdir())
    return architecture, files
