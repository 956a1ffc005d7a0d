"""Fine-tuning: a pretrained encoder's body, a new task head, a few epochs of labelled data.

The recipe is BERT's (Devlin et al. 2019, §4 and appendix A.3), as transformers' ``Trainer``
runs it by default: AdamW (beta 0.9/0.999, eps 1e-8, weight decay 0.01 except on biases and
norms), the rate rising linearly over the first ``warmup`` share of the steps and falling
linearly to 0 at the last, batches of a few dozen sentences, a few epochs, gradient norms
clipped at 1. Checkpoints are the trainer's (``training.checkpoint``); a non-finite loss stops
the run before the update, as the trainer's guard does.

One loop serves both classification heads: the loss is the cross-entropy over the labelled
positions, one per text for a sequence head, one per word (its first subword; the others,
special tokens and padding ignored, as in transformers' token classification) for a token head.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tfspec.errors import TfspecError
from tfspec.untrusted import whole

from .model import TorchModel
from .training import checkpoint
from .training.trainer import stop_requests


@dataclass(frozen=True)
class FinetuneConfig:
    epochs: int = 3
    batch: int = 32
    """Sentences per step (BERT: 16 or 32)."""
    lr: float = 5e-5
    """Peak learning rate (BERT: 2e-5 to 5e-5 for a large pretrained body; small ones take more)."""
    warmup: float = 0.1
    """Share of the steps over which the rate rises to ``lr``."""
    weight_decay: float = 0.01
    clip: float = 1.0
    seed: int = 0
    save_every: int = 500
    keep: int = 2
    log_every: int = 20
    max_minutes: float = 0.0
    """Stop (with a checkpoint) after this much wall time; 0: no limit."""


def head_parameters(model: TorchModel) -> set[str]:
    """Names of the parameters the task head declares (initialised fresh, never loaded)."""
    return {p for node in model.graph.nodes() if node.component == "head" for p in node.params.values()}


def load_body(model: TorchModel, tensors: dict[str, torch.Tensor], source: str) -> list[str]:
    """Copy the pretrained ``tensors`` into every parameter of ``model`` but the head's; return
    the names of tensors the model has no use for (the masked-LM projection, a pooler).
    A body parameter that is missing or shaped differently is refused, by name."""
    own = dict(model.named_parameters())
    body = {name: p for name, p in own.items() if name not in head_parameters(model)}
    aliases = set(model.graph.tied())
    missing = [f"missing {n} {list(p.shape)}" for n, p in body.items() if n not in tensors]
    shapes = [f"{n}: checkpoint has {list(tensors[n].shape)}, the model needs {list(p.shape)}"
              for n, p in body.items() if n in tensors and tuple(tensors[n].shape) != tuple(p.shape)]
    if missing or shapes:
        problems = shapes + missing
        more = f"; and {len(problems) - 4} more" if len(problems) > 4 else ""
        raise TfspecError(f"{source}: the pretrained weights do not fit {model.graph.name} ({len(shapes)} shapes "
                          f"differ, {len(missing)} missing): {'; '.join(problems[:4])}{more}")
    with torch.no_grad():
        for name, p in body.items():
            p.copy_(tensors[name])
    return sorted(n for n in tensors if n not in body and n not in aliases)


IGNORE = -100
"""The target of a position no label is read at (a word's later subwords, special tokens,
padding): ``cross_entropy``'s default ``ignore_index``, as transformers' token classifiers use."""


def padded(rows: list, pad: int) -> torch.Tensor:
    """(B, L) int64 of ``rows`` padded with ``pad`` to the longest; rows of one number: (B,)."""
    if np.ndim(rows[0]) == 0:
        return torch.tensor(np.array(rows, dtype=np.int64))
    out = np.full((len(rows), max(len(row) for row in rows)), pad, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return torch.from_numpy(out)


def batches(ids: list[list[int]], size: int, pad: int, order=None):
    """(index, tokens (B, L) padded with ``pad``, mask (B, L) true at each text's own tokens) in
    ``order`` (default: as given): the lengths, not the pad id, say what is padding."""
    order = np.arange(len(ids)) if order is None else order
    for start in range(0, len(order), size):
        index = order[start:start + size]
        tokens, lengths = padded([ids[i] for i in index], pad), torch.tensor([len(ids[i]) for i in index])
        yield index, tokens, torch.arange(tokens.shape[1])[None, :] < lengths[:, None]


def logits_of(model: TorchModel, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The head's logits for a batch of texts (the body's one token input) and their mask."""
    port = "src" if "src" in model.graph.ports else "tgt"
    device = next(model.parameters()).device
    return model.run({port: tokens.to(device), f"{port}_mask": mask.to(device)})["logits"]


def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the labelled positions: (B, C) logits and (B,) classes for a
    sequence head, (B, S, C) and (B, S) with ``IGNORE`` where no label is read for a token head."""
    return F.cross_entropy(logits.float().flatten(0, -2), targets.flatten(), ignore_index=IGNORE)


@torch.no_grad()
def predict(model: TorchModel, ids: list[list[int]], batch: int = 128) -> list[np.ndarray]:
    """Each text's most likely class (a sequence head), or the most likely class at each of its
    positions (a token head); batches sorted by length: little padding."""
    model.eval()
    out = [None] * len(ids)
    order = np.argsort([len(x) for x in ids], kind="stable")
    for index, tokens, mask in batches(ids, batch, model.pad_id, order):
        classes = logits_of(model, tokens, mask).argmax(-1).cpu().numpy()
        for row, i in enumerate(index):
            out[i] = classes[row] if classes.ndim == 1 else classes[row, :len(ids[i])]
    return out


def accuracy(model: TorchModel, ids: list[list[int]], targets: list) -> float:
    """The share of labelled positions predicted right: of texts for a sequence head, of words
    (their first subwords) for a token head."""
    wanted = np.concatenate([np.atleast_1d(t) for t in targets])
    got = np.concatenate([np.atleast_1d(p) for p in predict(model, ids)])
    scored = wanted != IGNORE
    return float((got[scored] == wanted[scored]).mean())


def lr_at(step: int, total: int, config: FinetuneConfig) -> float:
    """Linear warm-up to ``config.lr`` over ``warmup x total`` steps, then linear decay to 0."""
    warm = max(1, round(config.warmup * total))
    if step < warm:
        return config.lr * (step + 1) / warm
    return config.lr * max(0.0, (total - step) / max(1, total - warm))


def adamw(model: TorchModel, config: FinetuneConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (biases, norms and 1-D gains are not decayed)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=config.lr, betas=(0.9, 0.999), eps=1e-8)


def finetune(model: TorchModel, train: tuple[list, list], dev: tuple[list, list], run: Path,
             config: FinetuneConfig, progress: bool = True, log=print, resume: bool = False) -> dict:
    """Train ``model`` (body loaded, head fresh) on ``train`` = (token ids, targets: a class per
    text, or per position with ``IGNORE`` where no label is read); returns the last metrics,
    with the dev accuracy after each epoch in ``dev_accuracy``. ``resume`` continues from the
    newest intact checkpoint: epoch e's batch order comes from ``[seed, e]``, so the batches
    left in its epoch are the ones an uninterrupted run would take."""
    from tqdm import tqdm

    torch.manual_seed(config.seed)
    ids, labels = train
    optimizer = adamw(model, config)
    per_epoch = math.ceil(len(ids) / config.batch)
    total = config.epochs * per_epoch
    state = {"step": 0, "epoch": 0, "done": 0, "seconds": 0.0, "dev_accuracy": []}
    if resumed := checkpoint.start_or_resume(run, model, optimizer, resume, log, "-o"):
        state = _checked(*resumed)
        log(f"resumed from {resumed[0]} (step {state['step']}, epoch {state['epoch'] + 1})")
    device = next(model.parameters()).device
    deadline = time.perf_counter() + config.max_minutes * 60 if config.max_minutes > 0 else math.inf
    window, out_of_time = [], False
    bar = tqdm(total=total, initial=min(state["step"], total), unit="step", file=sys.stderr,
               disable=None if progress else True, dynamic_ncols=True)
    stop, restore = stop_requests()
    try:
        while state["epoch"] < config.epochs and not out_of_time:
            order = np.random.default_rng([config.seed, state["epoch"]]).permutation(len(ids))
            model.train()
            left = order[state["done"] * config.batch:]
            for index, tokens, mask in batches(ids, config.batch, model.pad_id, left):
                started = time.perf_counter()
                targets = padded([labels[i] for i in index], IGNORE).to(device)
                loss = loss_of(logits_of(model, tokens, mask), targets)
                if not math.isfinite(loss.item()):
                    raise TfspecError(_diverged(run, loss.item()))
                loss.backward()
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(state["step"], total, config)
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                state["step"] += 1
                state["done"] += 1
                state["seconds"] += time.perf_counter() - started
                window.append(loss.item())
                bar.update(1)
                if state["step"] % config.log_every == 0:
                    _log_metrics(run, {"step": state["step"], "loss": sum(window) / len(window),
                                       "lr": optimizer.param_groups[0]["lr"], "seconds": round(state["seconds"], 2)})
                    bar.set_postfix(loss=f"{sum(window) / len(window):.3f}")
                    window = []
                out_of_time = time.perf_counter() > deadline
                if state["step"] % config.save_every == 0 or out_of_time or stop.requested:
                    checkpoint.save(run, model, optimizer, dict(state), [torch.get_rng_state()], config.keep)
                if stop.requested:
                    raise KeyboardInterrupt(f"stopped at step {state['step']}; checkpoint saved, --resume continues "
                                            f"(the weights so far: {checkpoint.checkpoints(run)[-1]}/model.safetensors)")
                if out_of_time:
                    log(f"--max-minutes {config.max_minutes:g} reached at step {state['step']}; checkpoint saved")
                    break
            else:
                state["epoch"], state["done"] = state["epoch"] + 1, 0
                state["dev_accuracy"].append(accuracy(model, *dev))
                _log_metrics(run, {"step": state["step"], "epoch": state["epoch"],
                                   "dev_accuracy": state["dev_accuracy"][-1]})
                log(f"epoch {state['epoch']}: dev accuracy {state['dev_accuracy'][-1]:.4f}")
    finally:
        bar.close()
        restore()
    if out_of_time:  # a part of an epoch: scored too, so a run stopped by the clock still reports dev
        state["dev_accuracy"].append(accuracy(model, *dev))
        log(f"step {state['step']}: dev accuracy {state['dev_accuracy'][-1]:.4f}")
    checkpoint.save(run, model, optimizer, dict(state), [torch.get_rng_state()], config.keep)
    return state


def _checked(path: Path, state: dict) -> dict:
    """A resumed checkpoint's state, with what fine-tuning counts with."""
    counts = [state.get(k) for k in ("step", "epoch", "done")]
    if (not all(whole(c) and 0 <= c < 2**53 for c in counts)
            or not isinstance(state.get("dev_accuracy"), list) or "seconds" not in state):
        raise TfspecError(f"{path}/trainer.json: not a fine-tuning checkpoint (step, epoch, done, seconds and "
                          "dev_accuracy expected)")
    return state


def _log_metrics(run: Path, line: dict) -> None:
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def _diverged(run: Path, loss: float) -> str:
    saved = checkpoint.checkpoints(run)
    since = f"the newest checkpoint, {saved[-1].name}, holds finite weights" if saved else "no checkpoint was saved yet"
    return (f"fine-tuning diverged: the loss is {loss} (nothing of this step was applied; {since}). Lower --lr or "
            "raise --warmup, then rerun")
