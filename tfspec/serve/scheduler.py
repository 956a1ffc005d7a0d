"""Continuous batching for decoder-only exports: a request joins the running batch at its next
step and leaves it when done (iteration-level scheduling, Orca, Yu et al. OSDI 2022; what vLLM
and TGI do), instead of waiting for the whole batch before it to finish.

Each step feeds every running row its last token. Newcomers are prefilled together, their
prompts left-padded (``prefix_mask``, docs/decoding.md), then spliced into the running batch:
both caches are cut to their live columns, left-padded with masked zeros to one width and
stacked, and each row's ``position_offset`` keeps its positions its own. A masked key's weight
is exactly zero (``exp`` of the graph's large negative underflows), so a row's tokens are the
ones it gets alone (``tfspec generate``) whatever shares its steps. Each row picks its own
token: the likeliest, or one drawn by its own generator, so a seed repeats its draws in any
company. Needs a step graph that takes masks and keeps every past key (no banded attention,
whose cache keeps only its band): ``continuous`` says whether an export qualifies.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from tfspec.search import _banned, _limits, _Picker, among, stop_ids
from tfspec.serve.batcher import Batcher, Job, _settle


def continuous(decoder) -> bool:
    """Whether ``decoder``'s rows can join and leave between steps (module docstring)."""
    if not getattr(decoder, "takes_masks", False):
        return False
    banded = any(getattr(s, "band", None) is not None and s.band() is not None
                 for layer in decoder.model.spec.plan("decoder") for s in layer.sublayers)
    return not banded and all("past_len" in i.shape for name, i in decoder.inputs.items() if name.startswith("past."))


@dataclass(eq=False)
class Row:
    """One prompt in the running batch: what it has produced and how it picks its next token."""

    job: Job
    limit: int
    """Tokens it may produce (``max_tokens``, within the model's positions)."""
    pick: _Picker | None
    """Its own sampler (None: greedy)."""
    out: list[int] = field(default_factory=list)

    @property
    def reserved(self) -> int:
        """Cache columns it may come to hold: its prompt and every token it may produce."""
        return self.job.tokens + self.limit

    def banned(self, decoder, stops) -> list[int]:
        return _banned(decoder, stops, len(self.out), self.job.options.min_length)

    def choose(self, values: np.ndarray, ids: np.ndarray, banned: list[int]) -> int:
        """The row's next token from its top-k ``values``/``ids`` (k,), as ``search`` picks."""
        if self.pick is None:
            return int(ids[np.argmax(~among(ids, banned))])
        return int(self.pick(np.where(among(ids, banned), -np.inf, values)[None], ids[None])[0])

    def take(self, token: int, stops) -> bool:
        """Record ``token``; whether the row goes on (not at end of sequence nor its limit)."""
        if token in stops:
            return False
        self.out.append(token)
        if self.job.sink is not None:
            self.job.sink(token)
        return len(self.out) < self.limit


class ContinuousBatcher(Batcher):
    """The queue of ``Batcher`` drained step by step: between two steps, finished and cancelled
    rows leave and queued prompts join while their reserved cache columns (``Row.reserved``)
    fit in ``max_batch_tokens`` (one larger prompt runs alone)."""

    def __init__(self, decoder, *args, **kwargs):
        super().__init__(decoder, True, *args, **kwargs)
        self.stops = stop_ids(decoder)
        self.axes = {name: i.shape.index("past_len") for name, i in decoder.inputs.items()
                     if name.startswith("past.")}

    def _work(self) -> None:
        rows, state, tokens = [], None, None
        while (fresh := self._admit(rows)) is not None:
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
                    _settle(row.job, error=e)
                rows, state, tokens = [], None, None

    def _admit(self, rows: list[Row]) -> list[Row] | None:
        """Queued jobs that fit beside ``rows``, oldest first; waits while nothing runs or
        waits; None once stopping with nothing running."""
        with self.ready:
            while not self.stopping and not rows and not any(not j.cancelled for j in self.queue):
                self.ready.wait()
            if self.stopping:
                return [] if rows else None
            room, fresh = self.max_batch_tokens - sum(row.reserved for row in rows), []
            while self.queue:
                job = self.queue[0]
                row = Row(job, int(_limits(self.decoder, None, job.sources, job.options)[0]),
                          None if job.options.sampling is None else _Picker(job.options.sampling))
                if not job.cancelled and row.reserved > room and (rows or fresh):
                    break  # first come, first served: later ones wait behind it
                self.queue.popleft()
                if not job.cancelled:
                    fresh.append(row)
                    room -= row.reserved
            return fresh

    def _join(self, rows, state, tokens, fresh: list[Row]):
        """Prefill ``fresh`` together and splice the ones that go on into the running batch."""
        prompts = [row.job.sources[0] for row in fresh]
        width = max(map(len, prompts))
        prefix = np.full((len(prompts), width), self.decoder.pad, dtype=np.int64)
        mask = np.zeros((len(prompts), width), dtype=bool)
        for r, p in enumerate(prompts):
            prefix[r, width - len(p):], mask[r, width - len(p):] = p, True
        new = self.decoder.select(self.decoder.start(None), np.zeros(len(fresh), dtype=np.int64), cross=True)
        values, ids, new = self.decoder.step(new, prefix, self._k(fresh), mask=None if mask.all() else mask)
        fresh, new, first = self._advance(fresh, new, values, ids)
        if not fresh or not rows:
            return (fresh, new, first) if fresh else (rows, state, tokens)
        self.on_batch([row.job for row in rows + fresh])
        return rows + fresh, self._splice(state, new), np.concatenate([tokens, first])

    def _advance(self, rows, state, values, ids):
        """Each row picks its token from one step's top-k; finished rows leave (answered)."""
        picks = [row.choose(values[i], ids[i], row.banned(self.decoder, self.stops)) for i, row in enumerate(rows)]
        going = [row.take(token, self.stops) for row, token in zip(rows, picks)]
        for row, on in zip(rows, going):
            if not on:
                _settle(row.job, result=[row.out])
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
        return max((1 if row.pick is None else row.pick.k) + len(row.banned(self.decoder, self.stops))
                   for row in rows)

    def _splice(self, a, b):
        """One decoding state of ``a``'s rows then ``b``'s: caches cut to their live columns,
        left-padded with masked zeros to one width, stacked (docstring of the module)."""
        parts = [self._live(a), self._live(b)]
        width = max(part[3] for part in parts)

        def pad(array, axis, n):
            return np.pad(array, [(n, 0) if d == axis else (0, 0) for d in range(array.ndim)])
        values = {name: self.decoder.model.on_device(np.ascontiguousarray(np.concatenate(
            [pad(pasts[name], axis, width - w) for pasts, _, _, w in parts]))) for name, axis in self.axes.items()}
        mask = np.concatenate([pad(m, 1, width - w) for _, m, _, w in parts])
        shift = np.concatenate([s + width - w for _, _, s, w in parts])
        rows = np.arange(len(mask), dtype=np.int64)
        return replace(a, values=a.values | values, rows=rows, sources=np.zeros_like(rows), offset=width,
                       key_mask=mask, position_offset=shift)

    def _live(self, state):
        """(pasts, key mask, position offsets, width) of ``state``'s rows on the host, without
        the leading columns that are padding in every row."""
        n = len(state.rows)
        shift = np.zeros(n, np.int64) if state.position_offset is None else state.position_offset
        mask = np.ones((n, state.offset), np.int64) if state.key_mask is None else state.key_mask
        dead = int(shift.min())
        pasts = {name: np.take(state.values[name].numpy(), state.rows, axis=0).take(
            np.arange(dead, state.offset), axis=axis) for name, axis in self.axes.items()}
        return pasts, mask[:, dead:], shift - dead, state.offset - dead
