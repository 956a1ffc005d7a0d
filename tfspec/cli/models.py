"""Where commands get their model: a training run's spec (run.json) and the weights to load,
a spec with ``--weights`` (else random weights of ``--seed``), and the device of ``--device``.

Training, evaluation, sampling, fine-tuning and both export formats share these, so they live
here rather than in one command's module that the others would have to import.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from tfspec.data.codecs import TOKENIZER
from tfspec.errors import TfspecError
from tfspec.spec import Spec, load_spec, spec_from_data
from tfspec.untrusted import file_name, names, read_json


OWN_FILES = ("spec.yaml", "run.json", "tfspec.json")
"""Files that make a directory tfspec's own (an import, a training run, an export)."""


def checkpoint_directory(ref) -> Path | None:
    """``ref`` as a Hugging Face checkpoint directory (a ``config.json``, none of ``OWN_FILES``),
    else None."""
    path = Path(ref)
    try:
        own = any((path / name).is_file() for name in OWN_FILES)
        return path if path.is_dir() and (path / "config.json").is_file() and not own else None
    except (OSError, ValueError):
        return None


def load_model_spec(ref) -> Spec:
    """SPEC as the commands take it: a spec file, a shipped spec's name, an imported directory,
    or a Hugging Face checkpoint directory, read as ``tfspec import`` reads it (its tensors
    checked from the file headers; nothing written or converted)."""
    directory = checkpoint_directory(ref)
    if directory is None:
        return load_spec(ref)
    from tfspec.interop.hf.imports import checkpoint_spec

    read = checkpoint_spec(directory)
    print(f"spec: {directory} read as {read.architecture} (what `tfspec import` writes)", file=sys.stderr)
    return read.spec


@contextmanager
def imported_for(args, near: Path):
    """With ``args.spec`` a Hugging Face checkpoint directory: imported (weights streamed,
    as ``tfspec import`` does) into a directory beside ``near`` for the command's duration,
    ``args.spec`` naming the import; otherwise nothing."""
    directory = checkpoint_directory(args.spec)
    if directory is None:
        yield
        return
    from tfspec.interop.hf.imports import import_checkpoint

    near.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".import-", dir=near))
    try:
        result = import_checkpoint(directory, scratch / "model")
        print(f"import: {directory} ({result.architecture}) read as {result.spec.name}, {result.num_params:,} "
              "parameters", file=sys.stderr)
        args.spec = str(result.directory)
        yield
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def torch_device(name: str):
    """The torch device ``--device`` names (auto: CUDA when torch sees one, else the CPU)."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise TfspecError("--device cuda: this torch build sees no CUDA device")
    return torch.device(name)


def run_spec(run: Path) -> tuple[Spec, dict]:
    """(spec, run.json) of a training run; a missing or corrupt run.json is the user's error."""
    try:
        meta = read_json(run / "run.json")
        _check_run(meta)
        return spec_from_data(meta["spec"], str(run / "run.json")), meta
    except FileNotFoundError:
        raise TfspecError(f"{run}: not a training run (no run.json); train one with `tfspec train`") from None
    except (OSError, ValueError, KeyError) as e:
        raise TfspecError(f"{run}/run.json: corrupt ({str(e).splitlines()[0]})") from None


def _check_run(meta) -> None:
    """run.json is data: a mapping whose paths and names are strings, the tokenizer a file of
    the run itself and the classes a list of names (ValueError says which is not)."""
    if not isinstance(meta, dict):
        raise ValueError(f"a mapping was expected, not {type(meta).__name__}")
    for key in ("data", "src", "tgt", "tokenizer"):
        if key in meta and not isinstance(meta[key], str):
            raise ValueError(f"{key!r} must be a string, not {type(meta[key]).__name__}")
    if not file_name(meta.get("tokenizer", TOKENIZER)):
        raise ValueError("'tokenizer' must name a file in the run directory")
    if meta.get("classes") is not None and not names(meta["classes"]):
        raise ValueError("'classes' must be a list of names")


def run_weights(run: Path, chosen: str | None) -> Path:
    """The weights of a run to load: ``chosen`` (--checkpoint), else the average, else the
    newest checkpoint. A checkpoint is its weights file, or the directory itself when sharded
    (``load_any_weights`` reads both)."""
    from tfspec.backends.torch.training import checkpoint

    if chosen:
        path = Path(chosen)
        return path / "model.safetensors" if (path / "model.safetensors").is_file() else path
    if (run / "average.safetensors").is_file():
        return run / "average.safetensors"
    found = checkpoint.checkpoints(run)
    if not found:
        raise TfspecError(f"{run}: no checkpoints yet")
    if (found[-1] / "model.safetensors").is_file():
        checkpoint.read_meta(found[-1])
        return found[-1] / "model.safetensors"
    return found[-1]  # sharded: load_any_weights checks its files as it reads them


def model_to_export(spec, args):
    """The PyTorch module of ``spec`` with ``--weights``, else the weights of the directory the
    spec came from (``tfspec import`` writes spec.yaml beside model.safetensors), else random
    weights of ``--seed``."""
    import torch

    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.training.checkpoint import load_any_weights

    torch.manual_seed(args.seed)
    model = build_module(spec)
    own = Path(args.spec) / "model.safetensors"
    if not args.weights and Path(args.spec).is_dir() and own.is_file():
        print(f"weights: {own} (the directory's own; --weights picks others)", file=sys.stderr)
        args.weights = own
    if args.weights:
        load_any_weights(model, args.weights)
    else:
        print(f"note: no --weights given: exporting randomly initialised weights (seed {args.seed})", file=sys.stderr)
    return model
