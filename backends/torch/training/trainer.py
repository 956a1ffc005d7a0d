"""The training loop: the paper's recipe (§5) on any spec, on one process or many (DDP).

Encoder-decoder specs learn to translate, decoder-only specs to continue the target text,
encoder-only specs to fill in masked source tokens (BERT's masked LM). A step consumes
``world x accum`` length-grouped batches in an order fixed by (seed, epoch);
rank r takes its share. The loss is normalised by the step's target tokens counted over all
of them (every rank knows the global batch), so K processes compute what one process
accumulating K batches would. Checkpoints hold everything a resumed run needs to continue with
the same losses as an uninterrupted one; Ctrl-C or SIGTERM saves one before exiting.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from tfspec.errors import TfspecError
from tfspec.untrusted import parse_json

from .. import build_module
from . import checkpoint, sharding
from .batches import Pairs, collate, epoch_order, make_batches, masked
from .schedule import adam, rate, smoothed_loss


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    """Optimizer steps to reach (a resumed run continues up to this)."""
    batch_tokens: int = 4096
    """Tokens per batch, padding included (the paper: ~25000 source + 25000 target per step)."""
    accum: int = 1
    """Batches accumulated per optimizer step and process: steps of accum x batch_tokens."""
    warmup: int = 4000
    """Warm-up steps of the learning-rate schedule (eq. 3)."""
    lr_scale: float = 1.0
    """Multiplies eq. 3's rate (small batches often want 2)."""
    seed: int = 0
    save_every: int = 500
    keep: int = 5
    """Checkpoints kept (average needs the last k)."""
    log_every: int = 10
    clip: float = 0.0
    """Gradient-norm clipping; 0 disables (the paper does not clip)."""
    max_minutes: float = 0.0
    """Stop (with a checkpoint) after this much wall time in this process; 0: no limit."""
    shard: str = "ddp"
    """How ranks hold the model (``sharding.parallelize``): ddp (whole, replicated) or fsdp."""
    checkpoint_activations: bool = False
    """Recompute each layer's activations in the backward pass instead of keeping them."""
    compile: bool = False
    """``torch.compile`` each layer before sharding."""
    sharded: bool = False
    """Checkpoints in format 2: each rank writes its part with torch.distributed.checkpoint (no
    rank gathers the whole model), read back at any number of ranks; format 1 otherwise."""


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


def train(spec, pairs: Pairs, run: Path, config: TrainConfig, device: torch.device, resume: bool = False,
          progress: bool = True, log=print) -> dict:
    """Train ``spec`` on ``pairs`` into ``run``; return the last logged metrics."""
    ddp = Distributed.setup(device)
    run.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    model = build_module(spec, device=device)
    net = sharding.parallelize(model, device, ddp.world, config.shard, config.checkpoint_activations, config.compile)
    optimizer = adam(model.parameters(), fused=device.type == "cuda")  # after sharding: over this rank's shards
    state = {"step": 0, "epoch": 0, "position": 0, "tokens": 0, "seconds": 0.0}
    if ddp.rank == 0 and (stale := checkpoint.remove_stale(run)):
        log(f"removed {', '.join(stale)}: checkpoint writes an earlier run did not finish")
    ddp.barrier()
    saved = checkpoint.written(run)  # a resume names each one it skips, complete or not
    if saved and not resume:
        raise TfspecError(f"{run}: already holds checkpoints (last {saved[-1].name}); pass --resume to continue "
                          "it or choose another --out")
    if saved:
        path, state, rng = checkpoint.newest_intact(run, model, optimizer, log, ddp.rank, ddp.world)
        _restore_rng(rng, config.seed, state["step"], ddp.rank)
        if ddp.rank == 0:
            _forget_metrics_after(run / "metrics.jsonl", state["step"])
        log(f"resumed from {path} (step {state['step']})")
    else:
        torch.manual_seed(config.seed + 1 + ddp.rank)  # dropout masks differ across ranks
    params = list(model.parameters())
    batches = make_batches(pairs, config.batch_tokens)
    if not batches:
        raise TfspecError("no training pairs left after tokenization (all empty or longer than the positions)")
    pad, smoothing = spec.vocab.pad_id, spec.label_smoothing
    masked_lm = spec.family == "encoder-only"  # BERT's objective: predict masked source tokens
    mask_id = spec.vocab.mask_id if spec.vocab.mask_id is not None else spec.vocab.unk_id
    inputs = {"encoder-decoder": ("src", "tgt_in"), "decoder-only": ("tgt_in",), "encoder-only": ("src",)}[spec.family]
    masks = {"src": "src_mask", "tgt_in": "tgt_mask"}  # each input's padding, from its batch's lengths
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    bar = _progress(config.steps, state["step"], progress and ddp.rank == 0)
    metrics_file = run / "metrics.jsonl"
    last: dict = {}
    stop, restore = stop_requests()
    window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "start": time.perf_counter()}
    deadline = time.perf_counter() + config.max_minutes * 60 if config.max_minutes > 0 else float("inf")
    try:
        while state["step"] < config.steps:
            started = time.perf_counter()
            group = _next_batches(state, len(batches), config.seed, ddp.world * config.accum)
            if masked_lm:  # every rank masks every batch of the step: it needs the global token count
                made = {b: masked(pairs, batches[b], pad, mask_id, spec.vocab.size, [config.seed, state["step"], b])
                        for b in group}
                step_tokens = sum(int(m["loss_mask"].sum()) for m in made.values())
            else:
                step_tokens = sum(pairs_tgt_len(pairs, batches[b]) for b in group)
            mine = group[ddp.rank * config.accum:(ddp.rank + 1) * config.accum]
            net.train()
            loss_sum = nll_sum = 0.0
            for i, b in enumerate(mine):
                batch = made[b] if masked_lm else collate(pairs, batches[b], pad)
                batch = {k: v.to(device) for k, v in batch.items()}
                with autocast, sharding.accumulating(net, last=i == len(mine) - 1):
                    logits = net(*[batch[k] for k in inputs], **{masks[k]: batch[masks[k]] for k in inputs})
                    loss, nll = smoothed_loss(logits, batch["tgt_out"], pad, smoothing, batch["loss_mask"])
                    if model.aux_loss is not None:  # ponder cost, load balancing: summed over tokens too
                        loss = loss + model.aux_loss
                    (loss * ddp.world / step_tokens).backward()
                loss_sum, nll_sum = loss_sum + loss.item(), nll_sum + nll.item()
            if ddp.world > 1:  # the step's sums over all ranks: a NaN on any rank reaches every rank
                sums = torch.tensor([loss_sum, nll_sum], device=device)
                dist.all_reduce(sums)
                loss_sum, nll_sum = sums.tolist()
            if not math.isfinite(loss_sum):
                raise TfspecError(_diverged(run, f"the loss is {loss_sum}", "nothing of this step was applied"))
            lr = rate(state["step"] + 1, spec.d_model, config.warmup, config.lr_scale)
            for g in optimizer.param_groups:
                g["lr"] = lr
            if config.clip > 0:
                torch.nn.utils.clip_grad_norm_(params, config.clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state["step"] += 1
            state["tokens"] += step_tokens
            state["seconds"] += time.perf_counter() - started
            window["loss"] += loss_sum
            window["nll"] += nll_sum
            window["tokens"] += step_tokens
            if state["step"] % config.log_every == 0 or state["step"] == config.steps:
                elapsed = time.perf_counter() - window["start"]
                last = {"step": state["step"], "loss": window["loss"] / window["tokens"],
                        "nll": window["nll"] / window["tokens"], "lr": lr, "tokens": state["tokens"],
                        "tokens_per_s": window["tokens"] / max(elapsed, 1e-9), "seconds": round(state["seconds"], 2),
                        "epoch": state["epoch"]}
                window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "start": time.perf_counter()}
                if ddp.rank == 0:
                    with open(metrics_file, "a", encoding="utf-8") as f:
                        f.write(json.dumps(last) + "\n")
                bar.set_postfix(loss=f"{last['loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{last['tokens_per_s']:.0f}")
            bar.update(1)
            out_of_time = _agree(time.perf_counter() > deadline, ddp, device)
            if state["step"] % config.save_every == 0 or state["step"] == config.steps or stop.requested or out_of_time:
                if _agree(not all(bool(torch.isfinite(sharding.local(p)).all()) for p in params), ddp, device):
                    raise TfspecError(_diverged(run, "its weights are no longer finite", "not saved"))
                _save(run, model, optimizer, state, config, ddp)
            if out_of_time:
                log(f"--max-minutes {config.max_minutes:g} reached at step {state['step']}; checkpoint saved")
                break
            if stop.requested:
                raise KeyboardInterrupt(f"stopped at step {state['step']}; checkpoint saved, --resume continues")
    finally:
        bar.close()
        restore()
    return last


def _forget_metrics_after(path: Path, step: int) -> None:
    """Keep one metrics line per step up to the checkpoint resumed from: lines a killed run wrote
    after it will be redone, and a line cut short by the kill is dropped. Rewritten atomically."""
    if not path.is_file():
        return
    by_step = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = parse_json(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("step"), int) and entry["step"] <= step:
            by_step[entry["step"]] = line
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(by_step[s] + "\n" for s in sorted(by_step)), encoding="utf-8")
    os.replace(tmp, path)


def pairs_tgt_len(pairs: Pairs, index) -> int:
    """Target tokens a batch is scored on (EOS included, BOS not)."""
    return sum(len(pairs.tgt[i]) - 1 for i in index)


def _next_batches(state: dict, num_batches: int, seed: int, count: int) -> list[int]:
    """The next ``count`` batch ids in the epoch orders, advancing the data position."""
    out = []
    while len(out) < count:
        order = epoch_order(num_batches, seed, state["epoch"])
        take = order[state["position"]:state["position"] + count - len(out)]
        out += [int(b) for b in take]
        state["position"] += len(take)
        if state["position"] >= num_batches:
            state["epoch"], state["position"] = state["epoch"] + 1, 0
    return out


def _diverged(run: Path, what: str, kept: str) -> str:
    """Why training stops: a non-finite loss (checked every step, before the update) or non-finite
    weights (checked before every save), so no checkpoint holds what the divergence touched."""
    saved = checkpoint.checkpoints(run)
    since = f"the newest checkpoint, {saved[-1].name}, holds finite weights" if saved else "no checkpoint was saved yet"
    return (f"training diverged: {what} ({kept}; {since}). Lower --lr-scale or lengthen --warmup, or use norm: pre, "
            "then rerun (with --resume to continue from that checkpoint)")


def _agree(flag: bool, ddp: Distributed, device) -> bool:
    """True on every rank when any rank says so (ranks must stop at the same step)."""
    if ddp.world == 1:
        return flag
    value = torch.tensor([float(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def _restore_rng(rng: torch.Tensor | None, seed: int, step: int, rank: int) -> None:
    """This rank's saved RNG state; a rank the checkpoint's run did not have (it resumes at more
    ranks) gets a seed of its own from (seed, step, rank), so dropout masks still differ across
    ranks and the run stays reproducible."""
    if rng is not None:
        torch.set_rng_state(rng)
    else:
        torch.manual_seed(int(np.random.SeedSequence([seed, step, rank]).generate_state(1)[0]))


def _save(run, model, optimizer, state, config, ddp) -> None:
    if config.sharded:
        checkpoint.save_sharded(run, model, optimizer, dict(state), config.keep, ddp.rank, ddp.world)
        return
    rng = torch.get_rng_state()
    rngs = [rng]
    if ddp.world > 1:
        rngs = [torch.empty_like(rng) for _ in range(ddp.world)]
        dist.all_gather_object(rngs, rng)
    full = sharding.full_state(model, optimizer)  # every rank takes part in gathering shards
    if ddp.rank == 0:
        checkpoint.save(run, model, optimizer, dict(state), rngs, config.keep, full)
    ddp.barrier()


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


def _progress(total: int, done: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=done, disable=None if enabled else True, unit="step", file=sys.stderr,
                dynamic_ncols=True)  # None: only on a terminal


def write_config(run: Path, spec, config: TrainConfig, extra: dict) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "run.json").write_text(json.dumps({"spec": spec.model_dump(mode="json"), "train": asdict(config),
                                              **extra}, indent=2) + "\n", encoding="utf-8")
