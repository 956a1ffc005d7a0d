"""BERT's masked LM (Devlin et al. 2019, §3.1): encoder-only specs predict masked source tokens.

The batches are the translation task's source sides; each is masked by ``batches.masked`` (15% of
the tokens: 80% shown as [MASK], 10% as a random token, 10% kept) from (seed, step, batch) alone,
so every rank and a resumed run mask alike. Every rank masks every batch of the step: the loss
is divided by the masked tokens of all of them.
"""

from __future__ import annotations

from ..batches import masked
from . import task
from .text import Tokens


@task("masked-lm")
class MaskedLM(Tokens):
    trains, family = "an encoder-only spec without a head or frames to fill in masked SRC tokens", "encoder-only"

    def batches(self, state: dict, count: int, mine: slice) -> tuple[list[dict], float]:
        group, vocab = self.next_batches(state, count), self.spec.vocab
        mask_id = vocab.mask_id if vocab.mask_id is not None else vocab.unk_id
        made = {b: masked(self.pairs, self.groups[b], vocab.pad_id, mask_id, vocab.size,
                          [self.loop.seed, state["step"], b]) for b in group}
        tokens = sum(int(m["loss_mask"].sum()) for m in made.values())
        state["tokens"] += tokens
        return [made[b] for b in group[mine]], tokens
