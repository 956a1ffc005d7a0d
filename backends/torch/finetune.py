"""Fine-tuning: a pretrained encoder's body, a new task head, a few epochs of labelled data.

The recipe is BERT's (Devlin et al. 2019, §4 and appendix A.3), as transformers' ``Trainer``
runs it by default: AdamW (beta 0.9/0.999, eps 1e-8, weight decay 0.01 except on biases and
norms), the rate rising linearly over the first ``warmup`` share of the steps and falling
linearly to 0 at the last, batches of a few dozen sentences, a few epochs, gradient norms
clipped at 1. The loop, its checkpoints and its guards are the trainer's (``training.trainer``,
with the ``classification`` task).

One task serves both classification heads: the loss is the cross-entropy over the labelled
positions, one per text for a sequence head, one per word (its first subword; the others,
special tokens and padding ignored, as in transformers' token classification) for a token head.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tfspec.errors import TfspecError
from tfspec.train_options import FinetuneConfig

from .model import TorchModel
from .training.tasks import named
from .training.process import stop_requests
from .training.trainer import Trainer


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
    text, or per position with ``IGNORE`` where no label is read) with the ``classification``
    task's loop; return its state, with the dev accuracy after each epoch in ``dev_accuracy``.
    ``resume`` continues from the newest intact checkpoint: epoch e's batch order comes from
    ``[seed, e]``, so the batches left in its epoch are the ones an uninterrupted run would take."""
    trainer = Trainer(named("classification")(model, config, train, dev), run, next(model.parameters()).device,
                      progress, log, stops=stop_requests)
    trainer.fit(resume)
    return trainer.state
