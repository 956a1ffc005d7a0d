"""Model weights on disk: safetensors (preferred) or PyTorch files read with
``weights_only=True``, so loading never runs code from the file.

Keys are IR parameter names (``TorchModel.named_parameters``): a tied matrix is stored once.
A file that does not match the spec is refused with the names and shapes that differ.
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
    path = Path(path)
    if not path.is_file():
        raise TfspecError(f"{path}: no such weights file")
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
        raise TfspecError(f"{path}: not a readable weights file ({type(e).__name__}: {str(e).strip()[:200]})") from e
    for wrapper in ("model", "state_dict"):
        if isinstance(tensors, dict) and isinstance(tensors.get(wrapper), dict):
            tensors = tensors[wrapper]
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        raise TfspecError(f"{path}: expected a mapping of parameter names to tensors")
    return tensors


def load_weights(model: TorchModel, path: str | Path) -> None:
    """Copy the file's tensors into ``model``, refusing any mismatch with the spec (a training
    checkpoint's directory: ``training.checkpoint.load_any_weights``)."""
    tensors = checked_weights(model, path)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(tensors[name])


def checked_weights(model: TorchModel, path: str | Path) -> dict[str, torch.Tensor]:
    """The file's tensors by today's IR names, refused unless they match ``model`` name for name
    and shape for shape (the whole shapes of a sharded model's parameters)."""
    tensors = upgrade(read_weights(path), model.graph)  # a file written by tfspec 0.1.0 too
    expected = {name: tuple(p.shape) for name, p in model.named_parameters()}
    aliases = set(model.graph.tied())  # a full state_dict repeats tied matrices under these names
    found = {name: tuple(t.shape) for name, t in tensors.items() if name not in aliases}
    shapes = [f"{name}: file has {list(found[name])}, spec needs {list(shape)}"
              for name, shape in expected.items() if name in found and found[name] != shape]
    missing = [f"missing {name} {list(shape)}" for name, shape in expected.items() if name not in found]
    unexpected = [f"unexpected {name} {list(shape)}" for name, shape in found.items() if name not in expected]
    problems = shapes + missing + unexpected
    if problems:
        more = f" (and {len(problems) - 12} more)" if len(problems) > 12 else ""
        raise TfspecError("\n".join([f"{path}: weights do not match spec {model.graph.name}: "
                                     f"{len(shapes)} shapes differ, {len(missing)} missing, {len(unexpected)} unexpected{more}",
                                     *problems[:12]]))
    return tensors
