"""Which transformers architectures `tfspec import` takes, checked by counting parameters.

For every text model type transformers registers (CONFIG_MAPPING), and every image or audio
encoder type (``modal_types``: image and audio classifiers, zero-shot image classifiers,
speech-to-text, CTC), this builds the default
configuration, picks the class to count (seq2seq LM, causal LM, masked LM, else the base model;
among them the first one tfspec's family imports), counts its parameters on the meta device,
writes that configuration as config.json (``architectures`` set to the class) and imports it
config-only, in-process. It writes a markdown page: imported exactly, imported with another
count (the difference named tensor by tensor), refused (tfspec's reason), not built by
transformers (the exception's first line), and the types set apart as not text.

A type is text when a causal-LM, seq2seq-LM or masked-LM mapping names it, no mapping whose
models take images, video or audio (IMAGE_TEXT_TO_TEXT, MULTIMODAL_LM, SPEECH_SEQ_2_SEQ, ...)
does, and its configuration has no vision, audio or other modality sub-configuration
(``vision_config``, ``audio_encoder_config``); everything else is listed apart without being built.

Re-run after adding a family (about half a minute on 2 cores; low priority on a shared machine):

    nice -n 10 .venv/bin/python tools/generators/hf_coverage.py                 # writes docs/architectures.md
    .venv/bin/python tools/generators/hf_coverage.py --only gpt2,bert,gptj      # a spot check, to stdout
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import math
import re
import signal
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LIMIT_S = 120
"""Per architecture: a default config so big that building it on meta takes longer is 'not built'."""

TEXT_TASKS = ("SEQ_TO_SEQ_CAUSAL_LM", "CAUSAL_LM", "MASKED_LM")
"""The mappings (modeling_auto.MODEL_FOR_<task>_MAPPING_NAMES) naming the classes counted, in order of
preference; the base model (MODEL_MAPPING_NAMES) comes last."""

NOT_TEXT = re.compile(r"IMAGE|VISION|VISUAL|VIDEO|AUDIO|SPEECH|CTC|WAVEFORM|SPECTROGRAM|MULTIMODAL|DOCUMENT")
"""Mappings whose models take something other than tokens (names as in modeling_auto)."""

OTHER_MODALITY = re.compile(r"vision|image|video|audio|speech|acoustic|vq")
"""Sub-configurations (a config class's ``sub_configs``) of a model taking more than tokens."""


@dataclass(frozen=True)
class Row:
    model_type: str
    status: str
    """exact, differ, refused, failed (tfspec raised something other than TfspecError), not built."""
    cls: str = ""
    theirs: int | None = None
    ours: int | None = None
    note: str = ""
    """Refused: tfspec's reason; differ: the difference named; not built: the exception's first line."""


def text_types() -> tuple[dict[str, list[str]], dict[str, str]]:
    """(text model type -> candidate classes, most preferred first; other type -> why set apart)."""
    from transformers.models.auto import configuration_auto, modeling_auto

    mappings = {n[len("MODEL_FOR_"):-len("_MAPPING_NAMES")]: getattr(modeling_auto, n) for n in dir(modeling_auto)
                if n.startswith("MODEL_FOR_") and n.endswith("_MAPPING_NAMES")}
    text, apart = {}, {}
    for model_type in configuration_auto.CONFIG_MAPPING_NAMES:
        other = [task for task, names in mappings.items() if NOT_TEXT.search(task) and model_type in names]
        other += [k for k in getattr(configuration_auto.CONFIG_MAPPING[model_type], "sub_configs", None) or {}
                  if OTHER_MODALITY.search(k)]
        classes = [mappings[task][model_type] for task in TEXT_TASKS if model_type in mappings[task]]
        if other:
            apart[model_type] = "takes images, video or audio"
        elif not classes:
            apart[model_type] = ("no language-model class (base model only)" if model_type in
                                 modeling_auto.MODEL_MAPPING_NAMES else "no model class (a part of another model)")
        else:
            base = modeling_auto.MODEL_MAPPING_NAMES.get(model_type)
            text[model_type] = list(dict.fromkeys(c for c in [*classes, base] if isinstance(c, str)))
    return text, apart


MODAL_TASKS = ("IMAGE_CLASSIFICATION", "ZERO_SHOT_IMAGE_CLASSIFICATION", "SPEECH_SEQ_2_SEQ", "CTC",
               "AUDIO_CLASSIFICATION")
"""The mappings naming the vision and audio classes counted (issue 56's families), in order of
preference; the base model comes last."""
GENERATIVE = re.compile(r"TEXT_TO_TEXT|VISION_2_SEQ|MULTIMODAL_LM|IMAGE_TEXT|VIDEO|TEXT_TO_SPECTROGRAM|TEXT_TO_WAVEFORM")
"""Mappings of models that generate text from images or speech from text: set apart still."""


def modal_types(apart: dict[str, str]) -> dict[str, list[str]]:
    """The vision and audio types among those ``text_types`` set apart (an image or audio
    classifier, a zero-shot image classifier, speech-to-text, CTC) -> candidate classes."""
    from transformers.models.auto import modeling_auto

    mappings = {n[len("MODEL_FOR_"):-len("_MAPPING_NAMES")]: getattr(modeling_auto, n) for n in dir(modeling_auto)
                if n.startswith("MODEL_FOR_") and n.endswith("_MAPPING_NAMES")}
    found = {}
    for model_type in apart:
        if any(GENERATIVE.search(task) and model_type in names for task, names in mappings.items()):
            continue
        classes = [mappings[task][model_type] for task in MODAL_TASKS if model_type in mappings.get(task, {})]
        if classes:
            base = modeling_auto.MODEL_MAPPING_NAMES.get(model_type)
            found[model_type] = list(dict.fromkeys(c for c in [*classes, base] if isinstance(c, str)))
    return found


class Timeout(Exception):
    pass


@contextmanager
def time_limit(seconds: int):
    """Interrupts Python code running longer than ``seconds`` (SIGALRM: main thread, Unix)."""
    def expire(signum, frame):
        raise Timeout(f"took longer than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".strip().rstrip(":")


def check(model_type: str, classes: list[str], limit: int = LIMIT_S) -> Row:
    """One architecture: transformers' count of the default configuration against tfspec's import."""
    try:
        with time_limit(limit):
            return _check(model_type, classes)
    except Timeout as e:
        return Row(model_type, "not built", classes[0], note=str(e))


def _check(model_type: str, classes: list[str]) -> Row:
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from tfspec.errors import TfspecError
    from tfspec.interop.hf.family import FAMILIES
    from tfspec.interop.hf.imports import import_checkpoint

    written = CONFIG_MAPPING[model_type].model_type  # config.json's model_type: gpt-sw3 writes gpt2
    family = FAMILIES.get(written)
    cls = next((c for c in classes if family and c in family.architectures), classes[0])
    with tempfile.TemporaryDirectory() as tmp:
        try:
            config = CONFIG_MAPPING[model_type]()
            config.architectures = [cls]
            with torch.device("meta"):
                model = getattr(transformers, cls)(config)
            theirs = sum(p.numel() for p in model.parameters())
            config.to_json_file(Path(tmp) / "config.json")
        except Exception as e:
            return Row(model_type, "not built", cls, note=first_line(e))
        try:
            imported = import_checkpoint(tmp, Path(tmp) / "out", progress=False)
        except TfspecError as e:
            return Row(model_type, "refused", cls, theirs, note=shorten(str(e), tmp))
        except Exception as e:
            return Row(model_type, "failed", cls, theirs, note=shorten(first_line(e), tmp))
    ours = imported.num_params
    if ours == theirs:
        return Row(model_type, "exact", cls, theirs, ours)
    try:
        why = difference(written, model, imported)
    except Exception as e:  # the counts stand; only naming the difference failed
        why = f"{ours - theirs:+,} (not named: {first_line(e)})"
    return Row(model_type, "differ", cls, theirs, ours, why)


def shorten(reason: str, tmp: str, width: int = 160) -> str:
    """tfspec's message without the temporary path or the list of families, within ``width``."""
    reason = reason.splitlines()[0].replace(f"{tmp}/config.json: ", "").replace(tmp, "DIR")
    reason = re.sub(r"; tfspec imports: .*", "", reason)
    return reason if len(reason) <= width else reason[:width - 3] + "..."


def difference(model_type: str, model, imported) -> str:
    """Tensors only transformers counts (its frozen parameters marked), and tensors tfspec counts that
    transformers keeps as buffers or lacks, grouped over layers: 'transformers counts
    encoder.embed_positions.weight (1,048,576, frozen)'. An unexplained remainder is given as a number."""
    groups = _unshared(model_type, model, imported)
    plain = {kind: sum(sum(sizes) for (k, _), sizes in groups.items() if k == kind)
             for kind in ("tfspec counts", "transformers counts")}
    if plain["tfspec counts"] == plain["transformers counts"]:  # the same tensors fused in memory, split on disk
        groups = {key: sizes for key, sizes in groups.items() if key[0] not in plain}
    parts = [f"{kind} {what if kind == 'sizes differ:' else _group(what, sizes)}"
             for (kind, what), sizes in sorted(groups.items())]
    signed = {"tfspec counts": 1, "tfspec counts the buffer": 1, "transformers counts": -1, "sizes differ:": 1}
    named = sum(signed.get(kind, 0) * sum(sizes) for (kind, _), sizes in groups.items())
    rest = imported.num_params - sum(p.numel() for p in model.parameters()) - named
    return "; ".join(parts[:4] + ([f"{len(parts) - 4} more"] if len(parts) > 4 else [])
                     + ([f"{rest:+,} unexplained"] if rest else []))


def _unshared(model_type: str, model, imported) -> dict[tuple[str, str], list[int]]:
    """(kind, tensor pattern) -> sizes, for the tensors the two counts do not share. Names are compared
    as the family's rules write them (base-model prefix removed, current spelling)."""
    from tfspec.interop.hf.family import FAMILIES
    from tfspec.ir import build_graph

    family = FAMILIES[model_type]()
    prefixes = sorted({p for p in family.architectures.values() if p}, key=len, reverse=True)

    def canonical(name: str) -> str:
        return family.rename(next((name[len(p):] for p in prefixes if name.startswith(p)), name))

    params = {canonical(n): p for n, p in model.named_parameters()}
    buffers = {canonical(n) for n, b in model.named_buffers() if b.is_floating_point()}
    graph = build_graph(imported.spec)
    ours = {name: math.prod(shape) for rule in family.rules(imported.spec, imported.architecture)
            for name, shape in rule.hf_shapes(graph.params[rule.ir].shape).items()}
    groups: dict[tuple[str, str], list[int]] = {}
    for name, p in params.items():
        if name not in ours:
            frozen = "" if p.requires_grad else ", frozen"
            groups.setdefault(("transformers counts", _layers(name) + frozen), []).append(p.numel())
        elif ours[name] != p.numel():
            what = f"{_layers(name)} ({p.numel():,} vs {ours[name]:,})"
            groups.setdefault(("sizes differ:", what), []).append(ours[name] - p.numel())
    for name, n in ours.items():
        if name not in params:
            kind = "tfspec counts the buffer" if name in buffers else "tfspec counts"
            groups.setdefault((kind, _layers(name)), []).append(n)
    return groups


def _layers(name: str) -> str:
    return re.sub(r"\.\d+\.", ".*.", name)


def _group(what: str, sizes: list[int]) -> str:
    """'name (2 x 1,024, frozen)' for the tensors one pattern covers."""
    name, _, flag = what.partition(", ")
    counts = f"{len(sizes)} x {sizes[0]:,}" if len(set(sizes)) == 1 and len(sizes) > 1 else f"{sum(sizes):,}"
    return f"{name} ({counts}{', ' + flag if flag else ''})"


SECTIONS = [("exact", "Imported exactly", ("model type", "class", "parameters")),
            ("differ", "Imported with a different count", ("model type", "class", "transformers", "tfspec",
                                                           "difference")),
            ("refused", "Refused by a tfspec family", ("model type", "class", "tfspec's reason")),
            ("failed", "tfspec failed (a bug: not a one-line refusal)", ("model type", "class", "exception")),
            ("not built", "Not built by transformers", ("model type", "class", "exception"))]


def render(rows: list[Row], modal: list[Row], apart: dict[str, str], command: str, seconds: float) -> str:
    import transformers

    lines = ["# Hugging Face architectures and `tfspec import`", "",
             "Every text model type transformers registers, and its image and audio encoders (classifiers,",
             "zero-shot image classifiers, speech-to-text, CTC), built from its default configuration and imported",
             "config-only (`config.json` alone, `architectures` naming the class counted); the parameter counts",
             "are compared with transformers' own (`sum(p.numel() for p in model.parameters())` on the meta",
             "device). Generated; do not edit by hand:", "", f"    {command}", "",
             f"transformers {transformers.__version__}, {datetime.date.today().isoformat()}, "
             f"{len(rows) + len(modal)} model types checked in {seconds / 60:.1f} min.", ""]
    lines += _sections(rows, "text model types", "##", f"; {len(apart)} other types set apart")
    lines += ["", f"## Vision and audio ({len(modal)} model types)", ""]
    lines += _sections(modal, "vision and audio model types", "###", "")
    lines += ["", f"## Set apart, not built ({len(apart)})", "",
              "Neither text nor an image or audio encoder: a mapping whose models generate text from images or",
              "video, or speech from text, names them, their configuration holds a vision or audio",
              "sub-configuration, or transformers has no language-model class for them."]
    for why in sorted(set(apart.values())):
        names = sorted(t for t, w in apart.items() if w == why)
        lines += ["", f"**{why[0].upper() + why[1:]} ({len(names)}):** {', '.join(names)}"]
    from tfspec.interop.hf.family import FAMILIES

    if texts := sorted(t for t in apart if t in FAMILIES):
        lines += ["", f"Of these, `tfspec import` takes the text model of: {', '.join(texts)} (docs/interop.md)."]
    return "\n".join(lines) + "\n"


def _sections(rows: list[Row], what: str, level: str, tail: str) -> list[str]:
    """The summary line of ``rows`` and a table per status, headed at ``level``."""
    by = {status: sorted((r for r in rows if r.status == status), key=lambda r: r.model_type)
          for status, _, _ in SECTIONS}
    no_family = [r for r in by["refused"] if r.note.startswith("model_type ")]
    by["refused"] = [r for r in by["refused"] if r not in no_family]
    lines = [f"**{what}: {len(by['exact'])} imported exactly, {len(by['differ'])} imported with a different "
             f"count, {len(by['refused']) + len(no_family)} refused ({len(no_family)} for want of a tfspec family)"
             + (f", {len(by['failed'])} failed" if by["failed"] else "")
             + f"; {len(by['not built'])} not built by transformers{tail}.**"]
    cells = {"exact": lambda r: (r.model_type, r.cls, f"{r.theirs:,}"),
             "differ": lambda r: (r.model_type, r.cls, f"{r.theirs:,}", f"{r.ours:,}", r.note)}
    for status, title, header in SECTIONS:
        if by[status]:
            lines += ["", f"{level} {title} ({len(by[status])})", "", _row(header), _row(["---"] * len(header))]
            lines += [_row(cells.get(status, lambda r: (r.model_type, r.cls, r.note))(r)) for r in by[status]]
    if no_family:
        lines += ["", f"{level} No tfspec family ({len(no_family)})", "", ", ".join(r.model_type for r in no_family)]
    return lines


def _row(cells) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="the page to write (default docs/architectures.md; with --only, stdout)")
    parser.add_argument("--only", help="model types to check, comma-separated (e.g. gpt2,bert,gptj)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a default configuration never needs the hub
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    # Imported untimed: on a loaded machine the first type's import of the modelling stack can outlast
    # LIMIT_S, and an import the alarm cuts short leaves transformers' lazy modules broken for every later type.
    for module in ("transformers.modeling_utils", "tfspec.interop.hf.imports"):
        importlib.import_module(module)
    text, apart = text_types()
    modal = modal_types(apart)
    apart = {t: w for t, w in apart.items() if t not in modal}
    if args.only:
        wanted = args.only.split(",")
        if unknown := [t for t in wanted if t not in text and t not in modal and t not in apart]:
            parser.error(f"--only: transformers registers no model type {', '.join(unknown)}")
        text, modal = ({t: c for t, c in kind.items() if t in wanted} for kind in (text, modal))
        apart = {t: w for t, w in apart.items() if t in wanted}
    start, rows = time.perf_counter(), {}
    every = sorted(text.items()) + sorted(modal.items())
    for i, (model_type, classes) in enumerate(every, 1):
        began = time.perf_counter()
        rows[model_type] = check(model_type, classes)
        if not args.quiet:
            print(f"[{i}/{len(every)}] {model_type}: {rows[model_type].status} ({time.perf_counter() - began:.1f} s)",
                  file=sys.stderr, flush=True)
    script = "tools/generators/hf_coverage.py" + (f" --only {args.only}" if args.only else "")
    page = render([rows[t] for t in text], [rows[t] for t in modal], apart,
                  f"nice -n 10 .venv/bin/python {script}", time.perf_counter() - start)
    out = args.out or (None if args.only else "docs/architectures.md")
    if out is None or out == "-":
        sys.stdout.write(page)
    else:
        Path(out).write_text(page, encoding="utf-8")
    if not args.quiet:
        print(next(line for line in page.splitlines() if line.startswith("**")), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
