"""Sharded training checkpoints: each rank writes its own part with ``torch.distributed.checkpoint``
(DCP), and any number of ranks reads them back.

``RUN/checkpoints/step-0000100/`` then holds DCP's files (``__R_0.distcp``: the tensors rank R
wrote; ``.metadata``: which chunk of which tensor lies where), ``rng.safetensors`` (each rank's
RNG state) and ``trainer.json`` (format 2: step, data position, the world size it was written
at, the checksum of every file). Model and optimizer state pass through DCP's
``get_state_dict``/``set_state_dict``, so plain, DDP and FSDP2 models save and load alike, and
DCP reshards on load: a run saved at 2 ranks resumes at 1 or at 4. Ranks write into
``step-N.tmp``, which rank 0 renames into place once every file is there and its checksums are
recorded: a kill at any moment leaves the previous checkpoint as it was. Loading compares the
tensors ``.metadata`` declares with the model before DCP reads any (``check_fit``), so a
checkpoint that does not fit the spec gets the single-file format's answer, line for line.

Trust: DCP pickles. Its own reader loads ``.metadata`` with ``pickle.load`` and non-tensor items
with ``torch.load(weights_only=False)``, either of which runs whatever code a crafted file names;
tfspec uses neither. Only tensors are saved (the optimizer's hyper-parameters come from the run's
configuration), ``.metadata`` is written at pickle protocol 2 and read back by torch's
weights-only unpickler allowing DCP's metadata classes and nothing else, a checkpoint whose
metadata declares a non-tensor item or a file outside the checkpoint is refused, and the tensor
files are read by DCP with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import json
import pickle
import re
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint import CheckpointException
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.filesystem import FileSystemReader, _StorageInfo
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from tfspec.errors import TfspecError
from tfspec.untrusted import file_sha256, whole

from ..checkpoint import check_fit

FORMAT = 2
METADATA = ".metadata"
RNG = "rng.safetensors"
SHARD = re.compile(r"__\d+_\d+\.distcp")
"""DCP's tensor files: ``__{rank}_{file}.distcp``."""
_ALLOWED = [dcp_metadata.Metadata, dcp_metadata.TensorStorageMetadata, dcp_metadata.ChunkStorageMetadata,
            dcp_metadata.TensorProperties, dcp_metadata.MetadataIndex, dcp_metadata.StorageMeta,
            dcp_metadata._MEM_FORMAT_ENCODING, _StorageInfo]
"""The classes a ``.metadata`` file may construct: DCP's plain records of names, shapes and offsets."""


def save(staging: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict,
         rank: int, world: int) -> dict:
    """Write this rank's part of a checkpoint into ``staging`` (every rank calls this together);
    on rank 0 also the RNG states and ``trainer.json``. Return the trainer.json written (rank 0)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    with warnings.catch_warnings():  # one process without a process group: DCP says it assumes so
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        written = dcp.save({"model": _untied(model, model_state), "optim": {"state": optim_state["state"]}},
                           checkpoint_id=staging)
    mine = {p.name: file_sha256(p) for p in staging.glob(f"__{rank}_*.distcp")}
    rng = torch.get_rng_state()
    gathered = [(mine, rng)]
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, (mine, rng))
    if rank != 0:
        return {}
    unseen = sorted(name for g in gathered for name in g[0] if not (staging / name).is_file())
    if unseen:  # each node wrote into its own disk: nothing here could be resumed from
        raise TfspecError(f"{staging}: rank 0 does not see {', '.join(unseen[:3])} that other ranks wrote: "
                          "sharded checkpoints need one RUN directory that every node shares (docs/training.md)")
    written.storage_meta = None  # it names the staging directory, renamed next
    with open(staging / METADATA, "wb") as f:
        pickle.dump(written, f, protocol=2)  # the protocol torch's weights-only unpickler reads
    save_file({f"rng.{r}": g[1] for r, g in enumerate(gathered)}, str(staging / RNG))
    files = {name: digest for g in gathered for name, digest in g[0].items()}
    files |= {METADATA: file_sha256(staging / METADATA), RNG: file_sha256(staging / RNG)}
    meta = {"format": FORMAT, **state, "world": world, "files": dict(sorted(files.items()))}
    (staging / "trainer.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int) -> torch.Tensor | None:
    """Restore ``model`` and ``optimizer`` from a checkpoint whose files were checked
    (``check_files``), resharding to this world; every rank calls this together. Return this
    rank's saved RNG state, or None when the checkpoint was written by fewer ranks."""
    model_state, optim_state = get_state_dict(model, optimizer)
    wanted = {"model": _untied(model, model_state), "optim": {"state": optim_state["state"]}}
    _load(path, model, wanted)
    set_state_dict(model, optimizer, model_state_dict=_untied(model, wanted["model"], tie=True),
                   optim_state_dict={"state": wanted["optim"]["state"], "param_groups": optim_state["param_groups"]})
    rngs = load_file(str(path / RNG))
    return rngs.get(f"rng.{rank}")


def load_model(path: Path, model: torch.nn.Module) -> None:
    """The weights of a checkpoint in one process without a process group (``tfspec average``,
    ``export``, ``evaluate``): DCP gathers every rank's chunks into whole tensors."""
    wanted = {"model": _untied(model, {k: torch.empty_like(v) for k, v in model.state_dict().items()})}
    _load(path, model, wanted)
    model.load_state_dict(_untied(model, wanted["model"], tie=True))


def _untied(model, state: dict, tie: bool = False) -> dict:
    """``state`` without the names under which a state dict repeats a tied matrix (saved once,
    as format 1 does), or with ``tie`` those names given their matrix back."""
    aliases = model.graph.tied()  # {alias: the name it shares a parameter with}
    if tie:
        return state | {alias: state[name] for alias, name in aliases.items()}
    return {k: v for k, v in state.items() if k not in aliases}


def _load(path: Path, model: torch.nn.Module, wanted: dict) -> None:
    """DCP's load with the metadata read and checked first (a refusal is one TfspecError, not
    DCP's logged fallbacks), and the model's part compared with the model before anything is
    read (``check_fit``: the answer a single-file checkpoint gives, where DCP would ignore extra
    tensors and stop on a missing or resized one with its own exception)."""
    metadata = read_metadata(path)
    check_fit(model, {name.removeprefix("model."): (tuple(m.size), m.properties.dtype)
                      for name, m in metadata.state_dict_metadata.items() if name.startswith("model.")}, path)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load(wanted, storage_reader=_Reader(path, metadata))
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - any failure left (the optimizer's part)
        cause = failure(e)
        raise TfspecError(f"{path}: cannot load this sharded checkpoint into the model "
                          f"({type(cause).__name__}: {' '.join(str(cause).split())[:300]})") from None


def failure(e: BaseException) -> BaseException:
    """The exception behind DCP's ``CheckpointException``, which wraps every rank's failure (and
    derives from BaseException, so ``except Exception`` misses it); a Ctrl-C inside DCP is raised
    again as the KeyboardInterrupt it was."""
    if isinstance(e, CheckpointException) and e.failures:
        e = next(iter(e.failures.values()))[0]
    if not isinstance(e, Exception):
        raise e
    return e


class _Reader(FileSystemReader):
    """DCP's file reader given metadata already read by ``read_metadata`` below, which DCP's own
    would have read with ``pickle.load``."""

    def __init__(self, path: Path, metadata: dcp_metadata.Metadata):
        super().__init__(path)
        self.checked = metadata

    def read_metadata(self) -> dcp_metadata.Metadata:
        self.checked.storage_meta = dcp_metadata.StorageMeta(load_id=self.load_id)
        return self.checked


def read_metadata(path: Path) -> dcp_metadata.Metadata:
    """A checkpoint's ``.metadata`` through torch's weights-only unpickler, refused unless it holds
    DCP's records alone, declares tensors only and points into the checkpoint's own files."""
    from torch._weights_only_unpickler import Unpickler

    file = path / METADATA
    try:
        with open(file, "rb") as f, torch.serialization.safe_globals(_ALLOWED), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # its note on pickle protocols: the error says more
            found = Unpickler(f).load()
    except FileNotFoundError:
        raise TfspecError(f"{file}: missing from the checkpoint") from None
    except Exception as e:  # noqa: BLE001 - UnpicklingError, EOFError, ValueError: all a refusal
        raise TfspecError(f"{file}: refused: torch's weights-only unpickler does not read it as DCP metadata "
                          f"({type(e).__name__}: {str(e).strip()[:200]}); tfspec writes metadata that it reads "
                          "and unpickles it no other way") from None
    if not isinstance(found, dcp_metadata.Metadata) or not isinstance(found.storage_data, dict):
        raise TfspecError(f"{file}: refused: not DCP metadata")
    if not all(isinstance(m, dcp_metadata.TensorStorageMetadata) for m in found.state_dict_metadata.values()):
        raise TfspecError(f"{file}: refused: declares items other than tensors (tfspec saves tensors only)")
    if not all(isinstance(s, _StorageInfo) and isinstance(s.relative_path, str) and SHARD.fullmatch(s.relative_path)
               for s in found.storage_data.values()):
        raise TfspecError(f"{file}: refused: points outside the checkpoint's __R_N.distcp files")
    return found


def check_files(path: Path, meta: dict, rank: int = 0, world: int = 1) -> None:
    """Every file trainer.json lists is there with its checksum (rank r checks every world-th
    one, so ranks share the reading); names are DCP's own, never a path elsewhere."""
    files = meta.get("files")
    if not (isinstance(files, dict) and {METADATA, RNG} <= set(files) and all(
            isinstance(v, str) and (k in (METADATA, RNG) or SHARD.fullmatch(k)) for k, v in files.items())):
        raise TfspecError(f"{path}/trainer.json: corrupt (files: not what a sharded checkpoint holds)")
    if not (whole(meta.get("world")) and meta["world"] >= 1):
        raise TfspecError(f"{path}/trainer.json: corrupt (world: not a number of ranks)")
    for name in sorted(files)[rank::world]:
        file = path / name
        if not file.is_file() or file.is_symlink():
            raise TfspecError(f"{file}: missing from the checkpoint")
        if file_sha256(file) != files[name]:
            raise TfspecError(f"{file}: checksum mismatch: the file is corrupt or was changed after saving")
