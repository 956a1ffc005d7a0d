"""Training checkpoints that lose nothing.

``RUN/checkpoints/step-000100/`` holds ``model.safetensors`` (IR parameter names),
``optimizer.safetensors`` (Adam moments by parameter name, RNG states) and ``trainer.json``
(step, data position, file checksums): format 1, written by rank 0. Format 2 (``sharded``) holds
the same state written by every rank with ``torch.distributed.checkpoint``; both are read.
A checkpoint is written into a temporary directory and renamed into place, so a crash while
saving leaves the previous one intact; loading checks the checksums and the parameter names and
shapes, and refuses a mismatch with the reason.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from tfspec.errors import TfspecError
from tfspec.ir.names import upgrade
from tfspec.untrusted import file_sha256, read_json, whole

from ..checkpoint import WeightsMismatch, checked_weights, load_weights, weights_of
from ..model import TorchModel
from . import sharded
from .sharding import restore_moments

FORMAT = 1
PREFIX = "step-"


def checkpoints(run: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    return [p for p in written(run) if (p / "trainer.json").is_file()]


def written(run: Path) -> list[Path]:
    """Every checkpoint directory of a run, oldest first, complete or not: what a resume tries
    (and names when it skips one), where ``checkpoints`` holds only those with a trainer.json."""
    root = run / "checkpoints"
    found = [p for p in root.glob(f"{PREFIX}*") if not p.name.endswith(".tmp") and p.is_dir()
             and not p.is_symlink()] if root.is_dir() else []
    return sorted(found, key=lambda p: p.name)


def remove_stale(run: Path) -> list[str]:
    """Delete what interrupted checkpoint writes left (``step-N.tmp``, of whatever file type:
    the next save of step N must be able to stage there); their names."""
    root = run / "checkpoints"
    stale = sorted(root.glob(f"{PREFIX}*.tmp")) if root.is_dir() else []
    for path in stale:
        discard(path)
    return [p.name for p in stale]


def discard(path: Path) -> None:
    """Remove ``path`` whatever it is: a directory with its contents, or a file, link, socket or
    fifo (a link is unlinked, never what it points to); nothing there is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def newest_intact(run: Path, model: TorchModel, optimizer: torch.optim.Optimizer, log, rank: int = 0,
                  world: int = 1) -> tuple[Path, dict, torch.Tensor | None]:
    """Load the newest checkpoint that passes its checks, saying which newer ones were skipped
    and why (a directory without trainer.json among them); refuse when none does, and at once
    when one does not fit the spec. Every rank calls this together and all agree on the one
    loaded. Return (its path, its state, this rank's RNG state or None if it had none)."""
    skipped = []
    for path in reversed(written(run)):
        try:
            meta = _agreed(lambda: read_meta(path, rank, world), world)
            return path, _state(meta), _agreed(lambda: _restore(path, meta, model, optimizer, rank), world)
        except WeightsMismatch:  # the spec does not fit this run: its older checkpoints fit no better
            raise
        except TfspecError as e:
            skipped.append(str(e))
            log(f"warning: skipping checkpoint {path.name}: {e}")
    raise TfspecError(f"{run}: no intact checkpoint to resume from ({'; '.join(skipped)})")


def _agreed(step, world: int):
    """``step()``'s result on every rank, or on every rank the TfspecError one rank raised."""
    try:
        result, error = step(), None
    except TfspecError as e:
        result, error = None, e
    if world > 1:
        errors = [None] * world
        dist.all_gather_object(errors, error)
        error = next((e for e in errors if e is not None), None)
    if error is not None:
        raise error
    return result


def _restore(path: Path, meta: dict, model: TorchModel, optimizer, rank: int) -> torch.Tensor | None:
    """Model and optimizer from a checked checkpoint of either format; this rank's RNG state."""
    if meta["format"] == sharded.FORMAT:
        return sharded.load(path, model, optimizer, rank)
    rngs = load(path, model, optimizer, meta)[1]
    return rngs[rank] if rank < len(rngs) else None


def save(run: Path, model: TorchModel, optimizer: torch.optim.Optimizer, state: dict, rng: list[torch.Tensor],
         keep: int, full: tuple[dict, dict] | None = None) -> Path:
    """Write checkpoint ``state['step']`` atomically; keep the newest ``keep``. A failed write
    (a full disk) removes its partial files, leaves the previous checkpoints intact and ends
    in one line that says so. ``full``: (weights, Adam state) by parameter name, gathered from
    a sharded model (``sharding.full_state``), written instead of ``model``'s and ``optimizer``'s."""
    final = run / "checkpoints" / f"{PREFIX}{state['step']:07d}"
    staging = final.with_name(final.name + ".tmp")
    try:
        _write(staging, full or _gathered(model, optimizer), state, rng)
    except OSError as e:
        discard(staging)
        raise TfspecError(_not_written(run, final, e.strerror or str(e))) from None
    publish(staging, final, keep)
    return final


def save_sharded(run: Path, model, optimizer: torch.optim.Optimizer, state: dict, keep: int, rank: int,
                 world: int) -> Path:
    """Write checkpoint ``state['step']`` in format 2, every rank its part (all call this
    together); rank 0 renames it into place and keeps the newest ``keep``."""
    final = run / "checkpoints" / f"{PREFIX}{state['step']:07d}"
    staging = final.with_name(final.name + ".tmp")
    if rank == 0:
        discard(staging)
    _barrier(world)
    try:
        sharded.save(staging, model, optimizer, state, rank, world)
    except (Exception, sharded.CheckpointException) as e:  # noqa: BLE001 - DCP's (a full disk on any rank)
        if rank == 0:
            discard(staging)
        if isinstance(e, TfspecError):
            raise
        cause = sharded.failure(e)
        raise TfspecError(_not_written(run, final, getattr(cause, "strerror", None) or str(cause))) from None
    if rank == 0:
        publish(staging, final, keep)
    _barrier(world)
    return final


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def _not_written(run: Path, final: Path, reason: str) -> str:
    previous = checkpoints(run)
    kept = f"the newest intact checkpoint is {previous[-1].name}" if previous else "no earlier checkpoint exists"
    return f"could not write checkpoint {final.name} ({reason}); {kept}: free space, then rerun with --resume"


def publish(staging: Path, final: Path, keep: int) -> None:
    """Rename a completely written checkpoint into place (the one step a kill cannot split) and
    delete all but the newest ``keep``."""
    discard(final)
    os.replace(staging, final)
    for old in checkpoints(final.parent.parent)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _gathered(model: TorchModel, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(weights, Adam state) by parameter name, of a model held whole in this process."""
    names = {id(p): n for n, p in model.named_parameters()}
    moments = {names[id(p)]: optimizer.state.get(p, {}) for group in optimizer.param_groups for p in group["params"]}
    return weights_of(model), moments


def _write(staging: Path, full: tuple[dict, dict], state: dict, rng: list[torch.Tensor]) -> None:
    weights, moments = full
    discard(staging)
    staging.mkdir(parents=True)
    save_file({k: v.contiguous().cpu() for k, v in weights.items()}, str(staging / "model.safetensors"))
    tensors = {f"rng.{i}": r for i, r in enumerate(rng)}
    for name, values in moments.items():
        for key, value in values.items():
            tensors[f"{name}.{key}"] = value.detach().reshape(value.shape).contiguous().cpu()
    save_file(tensors, str(staging / "optimizer.safetensors"))
    files = {f: file_sha256(staging / f) for f in CHECKED}
    meta = {"format": FORMAT, **state, "files": files}
    (staging / "trainer.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def load(path: Path, model: TorchModel, optimizer: torch.optim.Optimizer | None, meta: dict | None = None
         ) -> tuple[dict, list[torch.Tensor]]:
    """Restore ``model`` (and ``optimizer``) from a format-1 checkpoint (``meta``: its trainer.json,
    already checked); return its state and RNG states. Into an FSDP-sharded model every rank
    reads the whole tensors and keeps its shard of each."""
    meta = meta or read_meta(path)
    fsdp = hasattr(model, "set_requires_gradient_sync")  # an FSDPModule: DTensor parameters
    if fsdp:
        _into_shards(model, checked_weights(model, path / "model.safetensors"))
    else:
        load_weights(model, path / "model.safetensors")
    tensors = upgrade(load_file(str(path / "optimizer.safetensors")), model.graph)  # AdamW's, by 0.1.0's names too
    if optimizer is not None:
        moments = {}
        for name, p in model.named_parameters():
            state = {key[len(name) + 1:]: t for key, t in tensors.items()
                     if key.startswith(name + ".") and key[len(name) + 1:] in ("step", "exp_avg", "exp_avg_sq")}
            if state:
                moments[name] = state
                if not fsdp:
                    optimizer.state[p] = {k: v.to(p.device) if k != "step" else v for k, v in state.items()}
        if fsdp:
            restore_moments(model, optimizer, moments)
    rng = [tensors[k] for k in sorted((k for k in tensors if k.startswith("rng.")), key=lambda k: int(k[4:]))]
    return _state(meta), rng


def _into_shards(model, weights: dict[str, torch.Tensor]) -> None:
    """Whole weights by IR name into a sharded model (DCP's full-state-dict path)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    canonical = model.graph.tied()  # the state dict repeats a tied matrix under each of its names
    full = {k: weights[canonical.get(k, k)] for k in model.state_dict()}
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True))


def _state(meta: dict) -> dict:
    """The loop's state in a trainer.json: its counters, without the record of files and format."""
    return {k: v for k, v in meta.items() if k not in ("format", "files", "world")}


def read_meta(path: Path, rank: int = 0, world: int = 1) -> dict:
    """trainer.json of a checkpoint, with its files checked against their checksums (in a
    sharded checkpoint, rank ``rank`` of ``world`` checks its share)."""
    try:
        meta = read_json(path / "trainer.json")
    except FileNotFoundError:
        raise TfspecError(f"{path}: not a checkpoint (no trainer.json)") from None
    except (OSError, ValueError) as e:
        raise TfspecError(f"{path}/trainer.json: corrupt ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") not in (FORMAT, sharded.FORMAT):
        raise TfspecError(f"{path}: checkpoint format {meta.get('format') if isinstance(meta, dict) else '?'!r}, "
                          f"this tfspec reads formats {FORMAT} and {sharded.FORMAT}")
    _check_meta(path, meta)
    if meta["format"] == sharded.FORMAT:
        sharded.check_files(path, meta, rank, world)
        return meta
    for name, digest in meta.get("files", {}).items():
        file = path / name
        if not file.is_file():
            raise TfspecError(f"{file}: missing from the checkpoint")
        if file_sha256(file) != digest:
            raise TfspecError(f"{file}: checksum mismatch: the file is corrupt or was changed after saving")
    return meta


CHECKED = ("model.safetensors", "optimizer.safetensors")
"""The files of a checkpoint, each with its checksum in trainer.json."""
COUNTS = ("step", "epoch", "position", "tokens")
"""trainer.json's counters (step always): whole numbers, as loops index and seed with them."""


def _check_meta(path: Path, meta: dict) -> None:
    """trainer.json is not covered by the checksums it carries: its state must be what a loop
    can count with (whole counters, other values numbers or lists of numbers) and it must list
    the checksum of every file, not anything."""
    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    files = meta.get("files")
    wrong = [] if meta["format"] == sharded.FORMAT or isinstance(files, dict) and set(files) == set(CHECKED) and all(
        isinstance(v, str) for v in files.values()) else ["files"]  # sharded.check_files checks format 2's
    wrong += [k for k in COUNTS if (k in meta or k == "step") and not (whole(meta.get(k)) and meta[k] >= 0)]
    wrong += [k for k, v in meta.items() if k not in ("format", "files", *COUNTS)
              and not (number(v) or isinstance(v, list) and all(map(number, v)))]
    if wrong:
        raise TfspecError(f"{path}/trainer.json: corrupt ({', '.join(wrong)}: not what a checkpoint holds)")


def load_checkpoint_weights(model: TorchModel, path: Path) -> None:
    """The weights of a checkpoint of either format, checked against its checksums, into ``model``
    (one process: a sharded checkpoint's chunks are gathered into whole tensors)."""
    if read_meta(path)["format"] == sharded.FORMAT:
        sharded.load_model(path, model)
    else:
        load_weights(model, path / "model.safetensors")


def load_any_weights(model: TorchModel, path: str | Path) -> None:
    """``path``'s weights into ``model``: a weights file, or a training checkpoint's directory
    (``RUN/checkpoints/step-N``) of either format: what commands given --weights read."""
    if Path(path).is_dir():
        load_checkpoint_weights(model, Path(path))
    else:
        load_weights(model, path)


def average(paths: list[Path], model: TorchModel, out: Path) -> None:
    """The mean of the checkpoints' weights (§6.1 averages the last 5 or 20), written atomically."""
    total = None
    for path in paths:
        load_checkpoint_weights(model, path)
        weights = {k: v.double() for k, v in weights_of(model).items()}
        total = weights if total is None else {k: total[k] + weights[k] for k in total}
    averaged = {k: (v / len(paths)).float().contiguous() for k, v in total.items()}
    tmp = out.with_name(out.name + ".tmp")
    save_file(averaged, str(tmp), metadata={"averaged": json.dumps([p.name for p in paths])})
    os.replace(tmp, out)
