"""The training process around the loop: the process group torchrun describes, Ctrl-C and
SIGTERM, each rank's RNG on resume, and what the run directory records (run.json, metrics.jsonl)."""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from tfspec.errors import TfspecError
from tfspec.untrusted import parse_json


@dataclass
class Distributed:
    rank: int = 0
    world: int = 1

    @classmethod
    def setup(cls, device: torch.device) -> Distributed:
        """Join the process group ``torchrun`` describes (gloo on CPU, NCCL on GPU), if any; on
        GPUs each process of a node takes the GPU of its ``LOCAL_RANK`` (not all of them GPU 0)."""
        if int(os.environ.get("WORLD_SIZE", "1")) == 1:
            return cls()
        if device.type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return cls(dist.get_rank(), dist.get_world_size())

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def agree(self, flag: bool, device) -> bool:
        """True on every rank when any rank says so (ranks must stop at the same step)."""
        if self.world == 1:
            return flag
        value = torch.tensor([float(flag)], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())


def restore_rng(path: Path, rng: torch.Tensor | None, seed: int, step: int, rank: int) -> None:
    """This rank's saved RNG state; a rank the checkpoint's run did not have (it resumes at more
    ranks) gets a seed of its own from (seed, step, rank), so dropout masks still differ across
    ranks and the run stays reproducible."""
    if rng is None:
        torch.manual_seed(int(np.random.SeedSequence([seed, step, rank]).generate_state(1)[0]))
        return
    try:
        torch.set_rng_state(rng)
    except (RuntimeError, TypeError):
        raise TfspecError(f"{path}: no usable RNG state to resume with") from None


class _StopFlag:
    """Signal handler: the first Ctrl-C/SIGTERM finishes the step and saves; a second one aborts."""

    requested = False

    def __call__(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True


def stop_requests():
    """(flag, restore): Ctrl-C and SIGTERM set ``flag.requested`` (the loop finishes its step
    and saves) until ``restore()`` puts the previous handlers back."""
    stop = _StopFlag()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    return stop, lambda: [signal.signal(s, handler) for s, handler in previous.items()]


def progress_bar(total: int, done: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=done, disable=None if enabled else True, unit="step", file=sys.stderr,
                dynamic_ncols=True)  # None: only on a terminal


def forget_metrics_after(path: Path, step: int) -> None:
    """Keep one metrics line of each kind per step up to the checkpoint resumed from: lines a
    killed run wrote after it will be redone, and a line cut short by the kill is dropped.
    Rewritten atomically."""
    if not path.is_file():
        return
    kept = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = parse_json(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("step"), int) and entry["step"] <= step:
            kept[entry["step"], tuple(entry)] = line
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(kept[k] + "\n" for k in sorted(kept, key=lambda k: k[0])), encoding="utf-8")
    os.replace(tmp, path)


def write_config(run: Path, spec, config, extra: dict) -> None:
    """RUN/run.json: the spec, the options and what the task says about its data."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "run.json").write_text(json.dumps({"spec": spec.model_dump(mode="json"), "train": asdict(config),
                                              **extra}, indent=2) + "\n", encoding="utf-8")
