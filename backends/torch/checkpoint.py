"""Model weights on disk: safetensors (preferred) or PyTorch files read with
``weights_only=True``, so loading never runs code from the file.

Keys are IR parameter names (``TorchModel.named_parameters``): a tied matrix is stored once.
Weights that do not fit the spec are refused by ``check_fit`` before they are loaded, naming the
tensors whose names, shapes or types differ: the answer sharded training checkpoints give too.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import torch

from tfspec.errors import TfspecError
from tfspec.ir.names import upgrade

from .model import TorchModel


def weights_of(model: TorchModel) -> dict[str, torch.Tensor]:
    """The model's parameters by IR name, tied ones once."""
    return {name: p.detach() for name, p in model.named_parameters()}


def save_weights(model: TorchModel, path: str | Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous().cpu() for k, v in weights_of(model).items()}, str(path),
              metadata={"tfspec.model": model.graph.name})


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors or PyTorch weights file (a {'model': ...} wrapper is opened)."""
    path = _existing(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            tensors = load_file(str(path))
        else:
            with warnings.catch_warnings():  # the restricted unpickler warns about protocols it reads fine
                warnings.simplefilter("ignore", UserWarning)
                tensors = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # torch's text here suggests weights_only=False: never for a user's file
        raise TfspecError(f"{path}: not a readable weights file: a pickle that is not tensors only (loading "
                          "it would run code); use safetensors or a PyTorch file of tensors") from None
    except Exception as e:  # noqa: BLE001 - every reader error means the same thing to the user
        raise _unreadable(path, e) from e
    for wrapper in ("model", "state_dict"):
        if isinstance(tensors, dict) and isinstance(tensors.get(wrapper), dict):
            tensors = tensors[wrapper]
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        raise TfspecError(f"{path}: expected a mapping of parameter names to tensors")
    return tensors


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise TfspecError(f"{path}: no such weights file")
    return path


def _unreadable(path: Path, e: Exception) -> TfspecError:
    return TfspecError(f"{path}: not a readable weights file ({type(e).__name__}: {str(e).strip()[:200]})")


SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "I64": torch.int64,
                      "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
"""The dtype codes of a safetensors header (the format's own list) as torch dtypes."""


def safetensors_layout(path: str | Path) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Each tensor's (shape, dtype) in a safetensors file, from its header alone: nothing loaded."""
    from safetensors import safe_open

    path = _existing(path)
    try:
        with safe_open(str(path), "pt") as f:
            codes = {name: (tuple(f.get_slice(name).get_shape()), f.get_slice(name).get_dtype()) for name in f.keys()}
    except Exception as e:  # noqa: BLE001 - SafetensorError, OSError: the file cannot be read either way
        raise _unreadable(path, e) from e
    unknown = sorted({code for _, code in codes.values()} - set(SAFETENSORS_DTYPES))
    if unknown:
        raise TfspecError(f"{path}: not a readable weights file (dtype {', '.join(unknown)}: tfspec reads "
                          f"{', '.join(SAFETENSORS_DTYPES)})")
    return {name: (shape, SAFETENSORS_DTYPES[code]) for name, (shape, code) in codes.items()}


def load_weights(model: TorchModel, path: str | Path) -> None:
    """Copy the file's tensors into ``model``, refusing any mismatch with the spec (a training
    checkpoint's directory: ``training.checkpoint.load_any_weights``)."""
    tensors = checked_weights(model, path)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(tensors[name])


def checked_weights(model: TorchModel, path: str | Path) -> dict[str, torch.Tensor]:
    """The file's tensors by today's IR names (a file written by tfspec 0.1.0 too), refused by
    ``check_fit`` unless they fit ``model``: a safetensors file from its header, before any
    tensor is read; a PyTorch file, whose layout is known only once unpickled, after."""
    header = Path(path).suffix == ".safetensors"
    if header:
        check_fit(model, upgrade(safetensors_layout(path), model.graph), path)
    tensors = upgrade(read_weights(path), model.graph)
    if not header:
        check_fit(model, {name: (tuple(t.shape), t.dtype) for name, t in tensors.items()}, path)
    return tensors


class WeightsMismatch(TfspecError):
    """Weights that do not fit the spec: the spec is wrong for them rather than the file damaged,
    so a resume stops here instead of trying an older checkpoint of the same run."""


def check_fit(model: TorchModel, found: dict[str, tuple[tuple[int, ...], torch.dtype]], where) -> None:
    """Refuse weights whose names, shapes or dtypes (``found``: name -> (shape, dtype), read from
    a safetensors header or DCP's metadata) do not fit ``model``: the one answer every checkpoint
    format gives, before anything is loaded. Whole shapes are compared (a sharded model's too);
    any floating dtype fits a floating parameter (imports keep a checkpoint's bf16 or fp16)."""
    expected = {name: (tuple(p.shape), p.dtype) for name, p in model.named_parameters()}
    aliases = set(model.graph.tied())  # a full state_dict repeats tied matrices under these names
    found = {name: (tuple(shape), dtype) for name, (shape, dtype) in found.items() if name not in aliases}
    common = [name for name in expected if name in found]
    shapes = [f"{name}: file has {list(found[name][0])}, spec needs {list(expected[name][0])}"
              for name in common if found[name][0] != expected[name][0]]
    dtypes = [f"{name}: file has {_dtype(found[name][1])} values, spec needs {_dtype(expected[name][1])}"
              for name in common if found[name][0] == expected[name][0]
              and found[name][1].is_floating_point != expected[name][1].is_floating_point]
    missing = [f"missing {name} {list(shape)}" for name, (shape, _) in expected.items() if name not in found]
    unexpected = [f"unexpected {name} {list(found[name][0])}" for name in sorted(found) if name not in expected]
    problems = shapes + dtypes + missing + unexpected
    if problems:
        types = f", {len(dtypes)} of another type" if dtypes else ""
        more = f" (and {len(problems) - 12} more)" if len(problems) > 12 else ""
        raise WeightsMismatch("\n".join([f"{where}: weights do not match spec {model.graph.name}: {len(shapes)} "
                                         f"shapes differ{types}, {len(missing)} missing, {len(unexpected)} "
                                         f"unexpected{more}", *problems[:12]]))


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
