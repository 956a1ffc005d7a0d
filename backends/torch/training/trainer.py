"""The training loop, written once, and what it asks of a task (§5 of the paper for the defaults).

A ``Task`` (one module each in ``tasks``: translation, language modelling, masked LM, images, CTC,
classification) declares what differs, as a LightningModule does: the model and its optimizer
and rate, each step's batches and their summed loss, what is logged and evaluated. ``Trainer``
keeps the rest, as torchtitan's does: processes (DDP or FSDP, ``sharding``), seeds, gradient
accumulation, the finiteness checks, the deadline and stop requests, checkpoints (``checkpoint``,
``sharded``) and an exact resume, metrics and the progress bar. A step of ``world x accum``
batches divides its summed loss by what the task counts over all of them (the step's target
tokens, lines or one), so K processes compute what one process accumulating K batches would.
Checkpoints hold everything a resumed run needs to continue with the same losses as an
uninterrupted one; Ctrl-C or SIGTERM saves one before exiting.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from tfspec.errors import TfspecError
from tfspec.train_options import Loop

from .. import build_module
from . import checkpoint, sharding
from .process import Distributed, forget_metrics_after, progress_bar, restore_rng, stop_requests
from .schedule import adam, rate


class Task:
    """One objective the loop trains. The defaults are the paper's recipe: the spec's model,
    Adam (§5.3) and eq. 3's rate (``config.warmup``, ``config.lr_scale``)."""

    name = ""
    """Its name in the registry (``tasks.task`` sets it)."""
    label = ""
    """Said before the loop's messages where one run trains several objectives ("ctc ")."""
    parallel = False
    """Whether a step may be split over torchrun's processes and accumulated (``--accum``)."""
    advice = "Lower --lr-scale or lengthen --warmup, or use norm: pre"
    """What to change when the loss stops being finite."""
    command = "train"
    """The tfspec command that trains it."""
    trains = reads = ""
    """In words: the specs it trains (``fits``) and the directory it reads (``holds``)."""

    @staticmethod
    def fits(spec) -> bool:
        """Whether this task trains ``spec``."""
        return False

    @classmethod
    def holds(cls, data: Path) -> bool:
        """Whether the directory ``data`` holds what this task reads."""
        return False

    def __init__(self, spec, config, loop: Loop):
        self.spec, self.config, self.loop = spec, config, loop

    def counters(self) -> dict:
        """The data position the task keeps in the loop's state (and trainer.json), at the start."""
        return {}

    def model(self, device: torch.device):
        return build_module(self.spec, device=device)

    def optimizer(self, model, device: torch.device) -> torch.optim.Optimizer:
        return adam(model.parameters(), fused=device.type == "cuda")  # after sharding: over this rank's shards

    def rate(self, step: int) -> float:
        """The learning rate of the step after ``step`` steps."""
        return rate(step + 1, self.spec.d_model, self.config.warmup, self.config.lr_scale)

    def batches(self, state: dict, count: int, mine: slice) -> tuple[list[dict], float]:
        """The step's ``count`` batches (advancing the data position in ``state``): this rank's
        share ``mine`` of them, and what their summed loss is divided by, counted over all."""
        raise NotImplementedError

    def loss(self, net, model, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
        """The batch's loss, summed over what ``batches`` counts (``net`` runs it; ``model`` is the
        model unwrapped), and any other sums to log (divided by the same count)."""
        raise NotImplementedError

    def metrics(self, count: float, seconds: float, state: dict) -> dict:
        """What a metrics line adds to the loss and rate, from ``count`` (what the loss was divided
        by over the ``seconds`` since the last line)."""
        return {}

    def after_step(self, model, state: dict, log) -> dict | None:
        """Work between steps (an evaluation at the end of an epoch); a metrics line to write, if any."""
        return None

    def interrupted(self, model, state: dict, log) -> None:
        """The run ends before its last step (``--max-minutes``): what it records first."""

    def resumed(self, path: Path, state: dict, model) -> dict:
        """The state of the checkpoint resumed from, checked for what this task counts with."""
        return state


class Trainer:
    """Train ``task`` into the run directory ``run``. ``stops`` makes the (flag, restore) pair of
    stop requests: Ctrl-C and SIGTERM unless the caller names its own source."""

    def __init__(self, task: Task, run: Path, device: torch.device = torch.device("cpu"), progress: bool = True,
                 log=print, stops=None):
        self.task, self.run, self.device, self.log = task, Path(run), device, log
        self.progress, self.stops = progress, stops or stop_requests
        self.model, self.state = None, {}

    def fit(self, resume: bool = False) -> dict:
        """Train to ``loop.steps`` (continuing the run's newest checkpoint with ``resume``); return
        the last metrics line ({} if none was written). ``self.model`` and ``self.state`` then hold
        the model trained and the loop's state."""
        task, loop = self.task, self.task.loop
        if not task.parallel and (loop.accum > 1 or int(os.environ.get("WORLD_SIZE", "1")) > 1):
            raise TfspecError(f"the {task.name} task trains in one process, a batch a step: run it without torchrun "
                              "and --accum")
        self.ddp = Distributed.setup(self.device)
        self.run.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(loop.seed)
        model = task.model(self.device)
        net = sharding.parallelize(model, self.device, self.ddp.world, loop.shard, loop.checkpoint_activations,
                                   loop.compile)
        optimizer = task.optimizer(model, self.device)
        self.model, self.state = model, self._start(model, optimizer, resume)
        state = self.state
        bar = progress_bar(loop.steps, min(state["step"], loop.steps), self.progress and self.ddp.rank == 0)
        stop, restore = self.stops()
        deadline = time.perf_counter() + loop.max_minutes * 60 if loop.max_minutes > 0 else math.inf
        self._window, last = _window(), {}
        try:
            while state["step"] < loop.steps:
                lr = self._step(net, model, optimizer)
                if state["step"] % loop.log_every == 0 or state["step"] == loop.steps:
                    last = self._logged(lr)
                    bar.set_postfix(loss=f"{last['loss']:.3f}", lr=f"{lr:.2e}")
                if (line := task.after_step(model, state, self.log)) is not None:
                    self._write(line)
                bar.update(1)
                if self._saved(model, optimizer, stop, time.perf_counter() > deadline):
                    break
        finally:
            bar.close()
            restore()
        return last

    def _start(self, model, optimizer, resume: bool) -> dict:
        """The loop's state at its first step: a fresh one, or the newest intact checkpoint's
        with its weights, moments and RNG states (what unfinished saves left removed first)."""
        run, ddp, seed = self.run, self.ddp, self.task.loop.seed
        if ddp.rank == 0 and (stale := checkpoint.remove_stale(run)):
            self.log(f"removed {', '.join(stale)}: checkpoint writes an earlier run did not finish")
        ddp.barrier()
        saved = checkpoint.written(run)  # a resume names each one it skips, complete or not
        if saved and not resume:
            raise TfspecError(f"{run}: already holds checkpoints (last {saved[-1].name}); pass --resume to continue "
                              "it or choose another --out")
        if not saved:
            torch.manual_seed(seed + 1 + ddp.rank)  # dropout masks differ across ranks
            return {"step": 0, **self.task.counters(), "seconds": 0.0}
        path, state, rng = checkpoint.newest_intact(run, model, optimizer, self.log, ddp.rank, ddp.world)
        state = self.task.resumed(path, state, model)
        restore_rng(path, rng, seed, state["step"], ddp.rank)
        if ddp.rank == 0:
            forget_metrics_after(run / "metrics.jsonl", state["step"])
        self.log(f"{self.task.label}resumed from {path} (step {state['step']})")
        return state

    def _step(self, net, model, optimizer) -> float:
        """One optimizer step over this rank's batches; its learning rate."""
        task, loop, ddp, state = self.task, self.task.loop, self.ddp, self.state
        started = time.perf_counter()
        mine, count = task.batches(state, ddp.world * loop.accum, slice(ddp.rank * loop.accum,
                                                                        (ddp.rank + 1) * loop.accum))
        autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.type == "cuda")
        net.train()
        sums: dict[str, float] = {}
        for i, batch in enumerate(mine):
            batch = {k: v.to(self.device) for k, v in batch.items()}
            with autocast, sharding.accumulating(net, last=i == len(mine) - 1):
                loss, logged = task.loss(net, model, batch)
                (loss * ddp.world / count).backward()
            for key, value in {"loss": loss.item(), **logged}.items():
                sums[key] = sums.get(key, 0.0) + value
        if ddp.world > 1:  # the step's sums over all ranks: a NaN on any rank reaches every rank
            total = torch.tensor(list(sums.values()), device=self.device)
            dist.all_reduce(total)
            sums = dict(zip(sums, total.tolist()))
        if not math.isfinite(sums["loss"]):
            raise TfspecError(self._diverged(f"the {task.label}loss is {sums['loss']}", "nothing of this step was "
                                                                                       "applied"))
        lr = task.rate(state["step"])
        for group in optimizer.param_groups:
            group["lr"] = lr
        if loop.clip > 0:
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), loop.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state["step"] += 1
        state["seconds"] += time.perf_counter() - started
        for key, value in {**sums, "count": count}.items():
            self._window[key] = self._window.get(key, 0.0) + value
        return lr

    def _logged(self, lr: float) -> dict:
        """The metrics line of the steps since the last one: sums divided by what the task counts."""
        window, state = self._window, self.state
        sums = {k: v / window["count"] for k, v in window.items() if k not in ("count", "start")}
        line = {"step": state["step"], **sums, "lr": lr,
                **self.task.metrics(window["count"], time.perf_counter() - window["start"], state),
                "seconds": round(state["seconds"], 2)}
        self._window = _window()
        self._write(line)
        return line

    def _write(self, line: dict) -> None:
        if self.ddp.rank == 0:
            with open(self.run / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")

    def _saved(self, model, optimizer, stop, late: bool) -> bool:
        """Save when due, on a stop request and at the deadline (every rank agreeing on it);
        whether the run ends here. A stop request ends it with KeyboardInterrupt."""
        task, loop, state, device = self.task, self.task.loop, self.state, self.device
        out_of_time = self.ddp.agree(late, device)
        if out_of_time:
            task.interrupted(model, state, self.log)
        if state["step"] % loop.save_every == 0 or state["step"] == loop.steps or stop.requested or out_of_time:
            if self.ddp.agree(not all(bool(torch.isfinite(sharding.local(p)).all()) for p in model.parameters()),
                              device):
                raise TfspecError(self._diverged("its weights are no longer finite", "not saved"))
            self._save(model, optimizer)
        if out_of_time:
            self.log(f"{task.label}reached --max-minutes {loop.max_minutes:g} at step {state['step']}; checkpoint "
                     "saved")
            return True
        if stop.requested:
            raise KeyboardInterrupt(f"{task.label}stopped at step {state['step']}; checkpoint saved, --resume "
                                    f"continues (the weights so far: {_weights(self.run)})")
        return False

    def _save(self, model, optimizer) -> None:
        run, loop, ddp, state = self.run, self.task.loop, self.ddp, dict(self.state)
        if loop.sharded:
            checkpoint.save_sharded(run, model, optimizer, state, loop.keep, ddp.rank, ddp.world)
            return
        rng = torch.get_rng_state()
        rngs = [rng]
        if ddp.world > 1:
            rngs = [torch.empty_like(rng) for _ in range(ddp.world)]
            dist.all_gather_object(rngs, rng)
        full = sharding.full_state(model, optimizer)  # every rank takes part in gathering shards
        if ddp.rank == 0:
            checkpoint.save(run, model, optimizer, state, rngs, loop.keep, full)
        ddp.barrier()

    def _diverged(self, what: str, kept: str) -> str:
        """Why training stops: a non-finite loss (checked every step, before the update) or non-finite
        weights (checked before every save), so no checkpoint holds what the divergence touched."""
        saved = checkpoint.checkpoints(self.run)
        since = f"the newest checkpoint, {saved[-1].name}, holds finite weights" if saved else \
            "no checkpoint was saved yet"
        return (f"training diverged: {what} ({kept}; {since}). {self.task.advice}, then rerun (with --resume to "
                "continue from that checkpoint)")


def _window() -> dict:
    return {"start": time.perf_counter()}


def _weights(run: Path) -> Path:
    """Where the newest checkpoint's weights are: its model.safetensors, or (format 2) the directory."""
    newest = checkpoint.checkpoints(run)[-1]
    return newest / "model.safetensors" if (newest / "model.safetensors").is_file() else newest
