"""Classification (fine-tuning, BERT's recipe in ``finetune``): a labelled text or each labelled
word, read by an encoder-only spec with a sequence_classification or token_classification head.

The reader takes ``{train,dev,test}.txt`` with aligned ``.labels`` (``tfspec.data.labelled``) and
encodes them with the pretrained model's tokenizer: a text's ids and its class, or a line's ids
and, at each word's first subword, its class (``IGNORE`` elsewhere). A step is one batch of
``config.batch`` texts from epoch e's order (``default_rng([seed, e])``); its loss is the mean
cross-entropy over the labelled positions, with AdamW and a linear warm-up and decay. After
each epoch, and when ``--max-minutes`` ends one early, the dev accuracy is recorded.
"""

from __future__ import annotations

import math
import sys
from itertools import chain
from pathlib import Path

import numpy as np

from tfspec.errors import TfspecError
from tfspec.untrusted import whole

from ...finetune import IGNORE, FinetuneConfig, accuracy, adamw, batches, logits_of, loss_of, lr_at, padded
from ..trainer import Loop, Task
from . import task


@task("classification")
class Classification(Task):
    trains = "an encoder-only spec with a sequence_classification or token_classification head"
    reads = "labelled text ({train,dev,test}.txt and .labels)"
    advice = "Lower --lr or raise --warmup"
    command = "finetune"

    @staticmethod
    def fits(spec) -> bool:
        kind = getattr(spec.head, "kind", None)
        return spec.family == "encoder-only" and kind in ("sequence_classification", "token_classification")

    @classmethod
    def holds(cls, data: Path) -> bool:
        return (Path(data) / "train.labels").is_file()

    def __init__(self, model, config: FinetuneConfig, train: tuple[list, list], dev: tuple[list, list]):
        self.per_epoch = math.ceil(len(train[0]) / config.batch)
        super().__init__(model.graph.spec, config, Loop.of(config, steps=config.epochs * self.per_epoch))
        self.module, self.train, self.dev = model, train, dev

    def counters(self) -> dict:
        return {"epoch": 0, "done": 0, "dev_accuracy": []}

    def model(self, device):
        return self.module  # the pretrained body is loaded and the head drawn from --seed already

    def optimizer(self, model, device):
        return adamw(model, self.config)

    def rate(self, step: int) -> float:
        return lr_at(step, self.loop.steps, self.config)

    def batches(self, state: dict, count: int, mine: slice) -> tuple[list[dict], float]:
        ids, labels = self.train
        size = self.config.batch
        order = np.random.default_rng([self.loop.seed, state["epoch"]]).permutation(len(ids))
        index, tokens, mask = next(batches(ids, size, self.module.pad_id, order[state["done"] * size:]))
        state["done"] += 1
        return [{"tokens": tokens, "mask": mask, "targets": padded([labels[i] for i in index], IGNORE)}], 1

    def loss(self, net, model, batch: dict):
        return loss_of(logits_of(model, batch["tokens"], batch["mask"]), batch["targets"]), {}

    def after_step(self, model, state: dict, log) -> dict | None:
        if state["done"] < self.per_epoch:
            return None
        state["epoch"], state["done"] = state["epoch"] + 1, 0
        state["dev_accuracy"].append(accuracy(model, *self.dev))
        log(f"epoch {state['epoch']}: dev accuracy {state['dev_accuracy'][-1]:.4f}")
        return {"step": state["step"], "epoch": state["epoch"], "dev_accuracy": state["dev_accuracy"][-1]}

    def interrupted(self, model, state: dict, log) -> None:
        if state["done"]:  # a part of an epoch: scored too, so a run stopped by the clock still reports dev
            state["dev_accuracy"].append(accuracy(model, *self.dev))
            log(f"step {state['step']}: dev accuracy {state['dev_accuracy'][-1]:.4f}")

    def resumed(self, path: Path, state: dict, model) -> dict:
        counts = [state.get(k) for k in ("step", "epoch", "done")]
        if (not all(whole(c) and 0 <= c < 2**53 for c in counts)
                or not isinstance(state.get("dev_accuracy"), list) or "seconds" not in state):
            raise TfspecError(f"{path}/trainer.json: not a fine-tuning checkpoint (step, epoch, done, seconds and "
                              "dev_accuracy expected)")
        if state["done"] >= self.per_epoch:  # saved at an epoch's last batch before its end was recorded
            self.after_step(model, state, lambda line: None)
        return state


def read_splits(data: Path, kind: str) -> tuple[dict, list[str], dict]:
    """(split -> (texts, labels), the label names train has, split -> class ids) of a labelled
    directory: one label per text (``sequence``) or per word (``tokens``)."""
    from tfspec.data.corpus import SPLITS
    from tfspec.data.labelled import label_ids, read_labelled, read_tagged

    splits = {s: (read_tagged if kind == "tokens" else read_labelled)(data, s) for s in SPLITS}
    train_labels = splits["train"][1]
    names = sorted(set(chain.from_iterable(train_labels) if kind == "tokens" else train_labels))
    if len(names) < 2:
        raise TfspecError(f"{data / 'train.labels'}: one label ({names[0]}); a classifier needs at least two")
    return splits, names, {s: label_ids(labels, names, data / f"{s}.labels") for s, (_, labels) in splits.items()}


def examples(codec, kind: str, texts: list, classes: list, limit: int, path: Path) -> tuple[list, list]:
    """(ids, targets) of one split, cut to the model's positions: a text's ids and its class, or
    (tokens) a line's ids and, at each word's first subword, its class (IGNORE elsewhere)."""
    from tfspec.data.codecs import encode_words

    if kind == "sequence":
        return [_fit(codec.encode(text), limit) for text in texts], classes
    ids, targets, cut = [], [], 0
    for line_number, (words, line) in enumerate(zip(texts, classes), 1):
        try:
            line_ids, firsts = encode_words(codec, words)
        except TfspecError as e:
            raise TfspecError(f"{path}:{line_number}: {e}") from None
        target = [IGNORE] * len(line_ids)
        for first, label in zip(firsts, line):
            target[first] = label
        ids.append(_fit(line_ids, limit))
        targets.append(_fit(target, limit))
        cut += len(firsts) - sum(t != IGNORE for t in targets[-1])
    if cut:
        print(f"warning: {path}: {cut:,} words lie beyond the model's {limit} positions; they are neither "
              "trained on nor scored", file=sys.stderr)
    return ids, targets


def _fit(ids: list[int], limit: int) -> list[int]:
    """Ids cut to the model's positions, keeping the last (eos / [SEP])."""
    return ids if len(ids) <= limit else ids[:limit - 1] + ids[-1:]
