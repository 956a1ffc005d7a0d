"""Translation and language modelling on sentence pairs: the paper's task (§5).

Encoder-decoder specs learn to translate, decoder-only specs to continue the target text. A
step consumes ``world x accum`` length-grouped batches (§5.1) in an order fixed by (seed, epoch);
rank r takes its share. The loss is the label-smoothed cross-entropy (§5.4) summed over the
step's target tokens and divided by their count over all batches of the step (every rank knows
the global batch). The reader trains the corpus's shared sentencepiece model into the run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tfspec.data.corpus import load_manifest
from tfspec.errors import TfspecError
from tfspec.train_options import TrainConfig

from ..batches import Pairs, collate, encode, epoch_order, make_batches
from ..schedule import smoothed_loss
from ..trainer import Task, Trainer
from . import misfit, task


INPUTS = {"encoder-decoder": ("src", "tgt_in"), "decoder-only": ("tgt_in",), "encoder-only": ("src",)}
"""The batch's inputs the model reads, by family."""
MASKS = {"src": "src_mask", "tgt_in": "tgt_mask"}
"""Each input's padding, from its batch's lengths."""


def train(spec, pairs: Pairs, run: Path, config: TrainConfig, device, resume: bool = False, progress: bool = True,
          log=print) -> dict:
    """Train ``spec`` on ``pairs`` into ``run`` with the task that fits it (translation, language
    modelling, masked LM, images); return the last logged metrics."""
    from . import task_for

    return Trainer(task_for(spec)(spec, config, pairs), run, device, progress, log).fit(resume)


class Tokens(Task):
    """Token pairs in length-grouped batches of ``config.batch_tokens``, scored on the target side."""

    parallel = True
    reads = "a parallel corpus (`tfspec data fetch` or `prepare`)"
    family = ""
    """The family it trains: its specs that read and predict tokens (no head, frames or image)."""

    @classmethod
    def fits(cls, spec) -> bool:
        return spec.family == cls.family and spec.head is None and spec.frames is None and spec.image is None

    @classmethod
    def holds(cls, data: Path) -> bool:
        try:
            return load_manifest(data) is not None
        except TfspecError:
            return False

    def __init__(self, spec, config: TrainConfig, pairs: Pairs):
        super().__init__(spec, config, config)
        self.pairs, self.groups = pairs, make_batches(pairs, config.batch_tokens)
        if not self.groups:
            raise TfspecError("no training pairs left after tokenization (all empty or longer than the positions)")
        self.data, self.record = None, {}
        """The directory read and what run.json says about it (the reader fills them in)."""

    def counters(self) -> dict:
        return {"epoch": 0, "position": 0, "tokens": 0}

    def next_batches(self, state: dict, count: int) -> list[int]:
        """The next ``count`` batch ids in the epoch orders, advancing the data position."""
        out = []
        while len(out) < count:
            order = epoch_order(len(self.groups), self.loop.seed, state["epoch"])
            take = order[state["position"]:state["position"] + count - len(out)]
            out += [int(b) for b in take]
            state["position"] += len(take)
            if state["position"] >= len(self.groups):
                state["epoch"], state["position"] = state["epoch"] + 1, 0
        return out

    def batches(self, state: dict, count: int, mine: slice) -> tuple[list[dict], float]:
        group = self.next_batches(state, count)
        tokens = sum(len(self.pairs.tgt[i]) - 1 for b in group for i in self.groups[b])  # EOS scored, BOS not
        state["tokens"] += tokens
        return [collate(self.pairs, self.groups[b], self.spec.vocab.pad_id) for b in group[mine]], tokens

    def loss(self, net, model, batch: dict):
        inputs = INPUTS[self.spec.family]
        logits = net(*[batch[k] for k in inputs], **{MASKS[k]: batch[MASKS[k]] for k in inputs})
        loss, nll = smoothed_loss(logits, batch["tgt_out"], self.spec.vocab.pad_id, self.spec.label_smoothing,
                                  batch["loss_mask"], self.spec.outputs_log_probs)
        if model.aux_loss is not None:  # ponder cost, load balancing: summed over tokens too
            loss = loss + model.aux_loss
        return loss, {"nll": nll.item()}

    def metrics(self, count: float, seconds: float, state: dict) -> dict:
        return {"tokens": state["tokens"], "tokens_per_s": count / max(seconds, 1e-9), "epoch": state["epoch"]}

    @classmethod
    def read(cls, spec, config: TrainConfig, data: Path | None, run: Path, src: str = "en", tgt: str = "de"):
        """The task on the train split of a parallel corpus (default: the shipped sample),
        tokenized by a sentencepiece model of the spec's vocabulary trained into ``run``."""
        from tfspec.data import load_tokenizer, read_split, sample_dir, train_tokenizer
        from tfspec.data.codecs import TOKENIZER

        data = data or sample_dir()
        try:
            load_manifest(data)
        except TfspecError as e:
            raise misfit(spec, cls, data, str(e)) from None
        run.mkdir(parents=True, exist_ok=True)
        if not (run / TOKENIZER).is_file():  # every rank of a fresh torchrun run: the same model, replaced whole
            copy = run / f".{TOKENIZER}.{os.getpid()}.tmp"
            shutil.copyfile(train_tokenizer(data, spec.vocab.size, out_dir=run), copy)
            os.replace(copy, run / TOKENIZER)
        max_len = spec.positional.max_len if spec.positional.kind != "none" else 1024
        pairs = encode(read_split(data, "train", src, tgt), load_tokenizer(run / TOKENIZER), spec.vocab.bos_id,
                       spec.vocab.eos_id, max_len)
        made = cls(spec, config, pairs)
        made.data, made.record = data, {"data": str(data.resolve()), "src": src, "tgt": tgt, "tokenizer": TOKENIZER}
        return made

    def describe(self, device) -> str:
        c = self.config
        return (f"{self.spec.name}: training on {len(self.pairs):,} pairs from {self.data} on {device} "
                f"({c.steps:,} steps of {c.accum} x {c.batch_tokens:,} tokens per process)")

    def summary(self, last: dict, run: Path) -> str:
        return (f"step {last['step']}: loss {last['loss']:.3f}, nll {last['nll']:.3f}, "
                f"{last['tokens_per_s']:,.0f} tokens/s; checkpoints in {run / 'checkpoints'}")


@task("translation")
class Translation(Tokens):
    trains, family = "an encoder-decoder spec to translate SRC into TGT", "encoder-decoder"


@task("language-model")
class LanguageModel(Tokens):
    trains, family = "a decoder-only spec without an image to continue TGT text", "decoder-only"
