"""``tfspec report SPEC --train``: what one training step needs per rank, and where it fits.

The estimate is ``tfspec.analysis.train_memory``'s (states from the parameter table,
activations from the IR's ops and shapes); ``tools/bench/check_train_memory.py`` measures it.
"""

from __future__ import annotations

import json
import os

from tfspec.analysis.train_memory import DEVICES, Setup, estimate
from tfspec.cli.tables import render
from tfspec.cli.types import integer

GiB = 2**30


def add_options(c) -> None:
    c.add_argument("--train", action="store_true",
                   help="peak memory per process of one training step (weights, gradients, optimizer moments, "
                        "activations, loss) under DDP and FSDP, with and without --checkpoint-activations, and "
                        "whether it fits on 24/40/80 GB devices and in this machine's memory")
    c.add_argument("--batch-tokens", type=integer(1, 2**30), default=4096,
                   help="with --train: tokens per batch and process (default 4096, as `tfspec train`)")
    c.add_argument("--length", type=integer(1, 2**24), help="with --train: tokens per sequence (default: the "
                   "spec's max_len, at most 512)")
    c.add_argument("--ranks", type=integer(1, 2**20), default=1, help="with --train: processes (default 1)")
    c.add_argument("--optimizer", choices=["adam", "sgd"], default="adam",
                   help="with --train: adam keeps two moments per weight, sgd none (default adam)")
    c.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="with --train: bf16 gathers bfloat16 weights under FSDP (CUDA; float32 masters)")


def setups(spec, args) -> list[Setup]:
    """Every way the table compares: DDP and FSDP, each without and with checkpointing."""
    length = args.length or min(spec.positional.max_len if spec.positional.kind != "none" else 512, 512)
    rows = max(1, args.batch_tokens // length)
    return [Setup(rows, length, shard, args.ranks, args.optimizer, args.precision, ckpt)
            for shard in ("ddp", "fsdp") for ckpt in (False, True)]


def report(spec, graph, args) -> int:
    machine = physical_memory()
    results = [(s, estimate(graph, s)) for s in setups(spec, args)]
    if args.format == "json":
        print(json.dumps([{"shard": s.shard, "ranks": s.ranks, "rows": s.rows, "length": s.length,
                           "checkpoint_activations": s.checkpoint, "optimizer": s.optimizer,
                           "precision": s.precision, **vars_of(m)} for s, m in results], indent=2))
        return 0
    devices = {**DEVICES, "this machine": machine} if machine else DEVICES
    headers = ["shard", "checkpointing", "states GiB", "activations GiB", "peak GiB", *devices]
    rows = [[s.shard, "yes" if s.checkpoint else "no",
             f"{(m.weights + m.optimizer + m.gathered + m.gradients) / GiB:.2f}",
             f"{(m.activations + m.loss) / GiB:.2f}", f"{m.peak / GiB:.2f}",
             *("fits" if m.peak <= size else "no" for size in devices.values())] for s, m in results]
    first = results[0][0]
    print(f"{spec.name}: one training step per process, {first.ranks} process(es), batch {first.rows} x "
          f"{first.length} tokens, {first.optimizer}, {first.precision}\n")
    print(render(headers, rows, args.format), end="")
    return 0


def vars_of(m) -> dict:
    return {"weights": m.weights, "gradients": m.gradients, "optimizer": m.optimizer, "gathered": m.gathered,
            "activations": m.activations, "loss": m.loss, "peak": m.peak}


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
