"""A static batch's rows followed step by step: ``tfspec.search``'s greedy loop (and sampling)
knows nothing of a request's stop strings, penalties or log-probabilities, so the decoder it
steps is wrapped. Each step's input holds the last step's picks: each is handed to its row's
watch (a stop string ends the row: it is given only end-of-sequence to pick next), counted for
its penalties and scored from the last step's log-probabilities; each step's output is reshaped
per row (penalties, biases) and re-sorted, as the search reads candidates best first. A sampled
row draws its token here with its own generator (``Picker``) and puts it first, so the greedy
search takes it: sampled requests of any seeds share a batch with each other and with greedy
ones, and each gets the tokens it gets alone."""

from __future__ import annotations

import numpy as np

from tfspec.search import Picker, among, banned_tokens, stop_ids
from tfspec.serve.logits import WHOLE_VOCABULARY, Shaper, score


class Watched:
    """``decoder`` stepping the rows of ``jobs`` (one prompt each), following them as finished
    ones leave. A row's last token is never fed back: ``finish`` scores it from the result."""

    def __init__(self, decoder, jobs: list):
        self.decoder, self.jobs, self.rows, self.stepped = decoder, jobs, list(range(len(jobs))), False
        reshaping = [job.tweaks is not None and job.tweaks.reshapes for job in jobs]
        vocab = decoder.model.spec.vocab.size if any(reshaping) else 0
        self.shapers = [Shaper(job.tweaks, vocab) if on else None for job, on in zip(jobs, reshaping)]
        self.pickers = [None if job.options.sampling is None else Picker(job.options.sampling) for job in jobs]
        self.stops, self.min_length, self.t = stop_ids(decoder), jobs[0].options.min_length, 0
        """End-of-sequence ids, banned before ``min_length`` (one for the batch: its jobs share
        options), and the step (tokens produced so far)."""
        self.k = max([job.tweaks.candidates for job in jobs if job.tweaks]
                     + [p.k + len(self.stops) + 1 for p in self.pickers if p is not None], default=0)
        self.last: dict[int, tuple] = {}
        """Each row's last step (values, ids), before reshaping, where log-probabilities are reported."""

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def step(self, state, tokens, k, **kw):
        ended = self._took(tokens[:, 0].tolist()) if self.stepped else []
        self.stepped = True  # the first step reads the prompts; each later one the last step's picks
        values, ids, state = self.decoder.step(state, tokens, max(k, min(self.k, WHOLE_VOCABULARY)), **kw)
        values, ids = values.copy(), ids.copy()
        for i, row in enumerate(self.rows):
            job = self.jobs[row]
            if job.tweaks is not None and job.tweaks.logprobs is not None:
                self.last[row] = values[i].copy(), ids[i].copy()
            if self.shapers[row] is not None:
                shaped = self.shapers[row](values[i], ids[i])
                order = np.argsort(-shaped, kind="stable")
                values[i], ids[i] = shaped[order], ids[i][order]
            if self.pickers[row] is not None:
                self._draw(row, values[i], ids[i])
        ids[ended] = self.decoder.eos
        self.t += 1
        return values, ids, state

    def _draw(self, row: int, values: np.ndarray, ids: np.ndarray) -> None:
        """``row``'s drawn token moved first in ``ids`` (in place): what the greedy search takes."""
        banned = banned_tokens(self.decoder, self.stops, self.t, self.min_length)
        drawn = self.pickers[row](np.where(among(ids, banned), -np.inf, values)[None], ids[None])[0]
        at = int(np.flatnonzero(ids == drawn)[0])
        ids[[0, at]], values[[0, at]] = ids[[at, 0]], values[[at, 0]]

    def _took(self, picks: list[int]) -> list[int]:
        """Each row's last pick recorded; the rows (positions) a stop string ends."""
        ended = []
        for i, (row, token) in enumerate(zip(self.rows, picks)):
            self._record(row, token)
            if self.jobs[row].watch is not None and self.jobs[row].watch(token):
                ended.append(i)
        return ended

    def _record(self, row: int, token: int) -> None:
        if self.shapers[row] is not None:
            self.shapers[row].took(token)
        if row in self.last:
            self.jobs[row].scores.append(score(token, *self.last[row], self.jobs[row].tweaks.logprobs))

    def finish(self, outputs: list[list[int]]) -> None:
        """Score each row's last token (the search returned it without feeding it back)."""
        for row, out in enumerate(outputs):
            if row in self.last and len(self.jobs[row].scores) < len(out):
                self.jobs[row].scores.append(score(out[-1], *self.last[row], self.jobs[row].tweaks.logprobs))

    def select(self, state, rows, cross):
        if self.stepped:  # before it, decoder-only search copies one empty state per prompt
            self.rows = [self.rows[r] for r in rows]
        return self.decoder.select(state, rows, cross)
