"""Continuous batching for decoder-only exports: a request joins the running batch at its next
step and leaves it when done (iteration-level scheduling, Orca, Yu et al. OSDI 2022; what vLLM
and TGI do), instead of waiting for the whole batch before it to finish.

Each step feeds every running row its last token. Newcomers are prefilled together, their
prompts left-padded (``prefix_mask``, docs/decoding.md), then spliced into the running batch
on the device (``backends.onnx.splice``): both caches are cut to their live columns, left-padded
with masked zeros to one width and stacked, and each row's ``position_offset`` keeps its
positions its own. The cache is thus one rectangle, rows x its widest row: admission counts
that rectangle, never the rows' own lengths summed (``_cache``). A masked key's weight
is exactly zero (``exp`` of the graph's large negative underflows), so a row's tokens are the
ones it gets alone (``tfspec generate``) whatever shares its steps. Each row picks its own
token: the likeliest, or one drawn by its own generator, so a seed repeats its draws in any
company. Needs a step graph that takes masks and keeps every past key (no banded attention,
whose cache keeps only its band) and no memory tokens (``memory_tokens``, whose keys lead each
row's cache): ``continuous`` says whether an export qualifies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfspec.backends.onnx.runtime.splice import Splicer, cache_axis, live
from tfspec.search import Picker, among, banned_tokens, output_limits, stop_ids
from tfspec.serve.batcher import Batcher, Job, settle
from tfspec.serve.logits import Shaper, score


def continuous(decoder) -> bool:
    """Whether ``decoder``'s rows can join and leave between steps (module docstring)."""
    if not getattr(decoder, "takes_masks", False):
        return False
    banded = any(getattr(s, "band", None) is not None and s.band() is not None
                 for layer in decoder.model.spec.plan("decoder") for s in layer.sublayers)
    if decoder.model.spec.decoder.memory_tokens:  # their keys lead every row's cache: no one live slice to cut
        return False
    return not banded and all(cache_axis(i.shape) is not None
                              for name, i in decoder.inputs.items() if name.startswith("past."))


@dataclass(eq=False)
class Row:
    """One prompt in the running batch: what it has produced and how it picks its next token."""

    job: Job
    limit: int
    """Tokens it may produce (``max_tokens``, within the model's positions)."""
    pick: Picker | None
    """Its own sampler (None: greedy)."""
    shaper: Shaper | None = None
    """Its penalties and biases (``logits``), None without."""
    out: list[int] = field(default_factory=list)
    step: tuple | None = None
    """The last step's (values, ids) of this row, kept while log-probabilities are reported."""

    @property
    def steps(self) -> int:
        """Columns its steps may still add to the cache: every token it may yet produce but the
        last (never fed back); a newcomer's prompt and first token come from its prefill."""
        return self.limit - max(len(self.out), 1)

    @property
    def candidates(self) -> int:
        """Candidates a step must return for it, banned tokens aside: what picking needs after
        its penalties and biases (``Shaper.candidates``), or its reported alternatives."""
        picking = 1 if self.pick is None else self.pick.k
        if self.shaper is not None:
            picking = self.shaper.candidates(picking)
        return max(picking, self.job.tweaks.logprobs or 0) if self.job.tweaks else picking

    def banned(self, decoder, stops) -> list[int]:
        return banned_tokens(decoder, stops, len(self.out), self.job.options.min_length)

    def choose(self, values: np.ndarray, ids: np.ndarray, banned: list[int]) -> int:
        """The row's next token from its top-k ``values``/``ids`` (k,), as ``search`` picks,
        after its penalties and biases."""
        if self.job.tweaks is not None and self.job.tweaks.logprobs is not None:
            self.step = values, ids
        shaped = np.where(among(ids, banned), -np.inf, values if self.shaper is None else self.shaper(values, ids))
        if self.pick is None:
            return int(ids[np.argmax(shaped)])
        return int(self.pick(shaped[None], ids[None])[0])

    def take(self, token: int, stops) -> bool:
        """Record ``token``; whether the row goes on (not at end of sequence, a stop string nor its limit)."""
        if token in stops:
            return False
        self.out.append(token)
        if self.shaper is not None:
            self.shaper.took(token)
        if self.step is not None:
            self.job.scores.append(score(token, *self.step, self.job.tweaks.logprobs))
        if self.job.watch is not None and self.job.watch(token):
            return False  # a stop string
        return len(self.out) < self.limit


WAITING_SERVED_RATIO = 0.3
"""Queued prompts join once they are this many per running row (TGI's ``waiting_served_ratio``):
each join copies the running caches, so one join for several newcomers costs less than several."""
MAX_WAITING_STEPS = 8
"""...or once the oldest has waited this many steps (TGI's ``max_waiting_tokens``, 20 there)."""


class ContinuousBatcher(Batcher):
    """The queue of ``Batcher`` drained step by step: between two steps, finished and cancelled
    rows leave and queued prompts join (``WAITING_SERVED_RATIO``, ``MAX_WAITING_STEPS``) while
    the cache they would all come to hold, padded (``_cache``), fits in ``max_batch_tokens``
    (one larger prompt runs alone)."""

    def __init__(self, decoder, *args, **kwargs):
        super().__init__(decoder, True, *args, **kwargs)
        self.waited = 0
        """Steps the queue has waited while rows ran."""
        self.stops = stop_ids(decoder)
        self.vocab = decoder.model.spec.vocab.size
        self.splicer = None
        """Joins two decoding states on the device (``backends.onnx.splice``), made on first use."""

    def _work(self) -> None:
        rows, state, tokens = [], None, None
        while (fresh := self._admit(rows, state)) is not None:
            try:
                if rows and any(row.job.cancelled for row in rows):
                    rows, state, tokens = self._keep(rows, state, tokens, [not r.job.cancelled for r in rows])
                if fresh:
                    rows, state, tokens = self._join(rows, state, tokens, fresh)
                if rows:
                    values, ids, state = self.decoder.step(state, tokens, self._k(rows))
                    rows, state, tokens = self._advance(rows, state, values, ids)
            except Exception as e:  # a bug in decoding: each running request gets its error, not a hang
                for row in rows + fresh:
                    settle(row.job, error=e)
                rows, state, tokens = [], None, None

    def _admit(self, rows: list[Row], state) -> list[Row] | None:
        """Queued jobs that fit beside ``rows`` (``_cache``), oldest first, when enough of them
        wait or the oldest waited long enough (``WAITING_SERVED_RATIO``); waits while nothing
        runs or waits; None once stopping with nothing running."""
        with self.ready:
            while not self.stopping and not rows and not self.queue:
                self.ready.wait()
            if self.stopping:
                return [] if rows else None
            fresh = []
            for job in self.queue:
                row = Row(job, int(output_limits(self.decoder, None, job.sources, job.options)[0]),
                          None if job.options.sampling is None else Picker(job.options.sampling),
                          Shaper(job.tweaks, self.vocab) if job.tweaks and job.tweaks.reshapes else None)
                if (rows or fresh) and _cache(rows, state, fresh + [row]) > self.max_batch_tokens:
                    break  # first come, first served: later ones wait behind it
                fresh.append(row)
            if rows and len(fresh) < WAITING_SERVED_RATIO * len(rows) and self.waited < MAX_WAITING_STEPS:
                self.waited += bool(self.queue)
                return []
            self.waited = 0
            self._taken([row.job for row in fresh])
            return fresh

    def _join(self, rows, state, tokens, fresh: list[Row]):
        """Prefill ``fresh`` together and splice the ones that go on into the running batch:
        the batch metrics count it as ``rows`` and ``fresh`` together (a lone request is a batch of one)."""
        prompts = [row.job.sources[0] for row in fresh]
        width = max(map(len, prompts))
        prefix = np.full((len(prompts), width), self.decoder.pad, dtype=np.int64)
        mask = np.zeros((len(prompts), width), dtype=bool)
        for r, p in enumerate(prompts):
            prefix[r, width - len(p):], mask[r, width - len(p):] = p, True
        new = self.decoder.select(self.decoder.start(None), np.zeros(len(fresh), dtype=np.int64), cross=True)
        values, ids, new = self.decoder.step(new, prefix, self._k(fresh), mask=None if mask.all() else mask)
        self.on_batch([row.job for row in rows + fresh])
        fresh, new, first = self._advance(fresh, new, values, ids)
        if not fresh or not rows:
            return (fresh, new, first) if fresh else (rows, state, tokens)
        return rows + fresh, self._splice(state, new), np.concatenate([tokens, first])

    def _advance(self, rows, state, values, ids):
        """Each row picks its token from one step's top-k; finished rows leave (answered)."""
        picks = [row.choose(values[i], ids[i], row.banned(self.decoder, self.stops)) for i, row in enumerate(rows)]
        going = [row.take(token, self.stops) for row, token in zip(rows, picks)]
        for row, on in zip(rows, going):
            if not on:
                settle(row.job, result=[row.out])
        return self._keep(rows, state, np.array(picks, dtype=np.int64)[:, None], going)

    def _keep(self, rows, state, tokens, going: list[bool]):
        if all(going):
            return rows, state, tokens
        keep = np.flatnonzero(going)
        if not keep.size:
            return [], None, None
        return [rows[i] for i in keep], self.decoder.select(state, keep, cross=True), tokens[keep]

    def _k(self, rows: list[Row]) -> int:
        """Candidates one step returns: enough for the greediest and the sampled rows alike."""
        return max(row.candidates + len(row.banned(self.decoder, self.stops)) for row in rows)

    def _splice(self, a, b):
        """One decoding state of ``a``'s rows then ``b``'s, joined on the device (``splice``)."""
        if self.splicer is None:
            self.splicer = Splicer(self.decoder)
        return self.splicer.join(a, b)


def _cache(rows: list[Row], state, fresh: list[Row]) -> int:
    """Cache columns x rows that ``rows`` (decoding ``state``) and ``fresh`` joining them come
    to hold at most: the cache is one rectangle, every row padded to the widest, so a short
    row beside a long one holds as many columns as it does. The join cuts the running cache to
    its live columns and pads the narrower side to the wider; each step adds a column to all.
    Rows only leave until the next join, which is counted again: this bounds the cache."""
    width = max([live(state)[1] if rows else 0] + [row.job.tokens for row in fresh])
    return (len(rows) + len(fresh)) * (width + max(row.steps for row in rows + fresh))
