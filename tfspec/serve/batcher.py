"""Dynamic batching: requests queue here and one worker thread decodes them together.

onnxruntime runs in the worker thread (it releases the GIL), so the server's event loop keeps
accepting and answering while a batch decodes. Requests that arrive during a batch wait in a
bounded queue (full: the caller answers 503, memory stays bounded) and form the next batch:
the oldest request and the queued ones of equal search options nearest it in length, up to
``max_batch_tokens`` tokens counting the padding, as ``decode_all`` groups ``tfspec translate``'s
sorted lines (a batch of mixed lengths steps as long as its longest line: taken in arrival
order, served throughput was 64% of ``decode_all``'s on the same lines).
A request that times out or whose client leaves is cancelled: it leaves the queue at once (its
places free), and a running batch whose requests are all cancelled stops at its next step.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from tfspec.evaluate import decode_all
from tfspec.search import SearchOptions, search
from tfspec.serve.logits import Tweaks
from tfspec.serve.watched import Watched


class QueueFull(Exception):
    """The queue holds ``max_queue`` requests: the caller sheds this one (503)."""


class Cancelled(Exception):
    """Every request of the running batch was cancelled: the search stops."""


class Stopped(Exception):
    """The decoding thread ended (stopped, or died of a bug) before this request was decoded."""


@dataclass(eq=False)
class Job:
    """One request: its sources (translation) or prompts (decoder-only, with BOS), decoded with
    ``options``; ``key`` groups the jobs that may share a batch."""

    sources: list[list[int]]
    options: SearchOptions
    key: tuple
    future: asyncio.Future
    watch: Callable[[int], bool] | None = None
    """Told each new token as the search picks it (decoder-only, one prompt): True ends the row
    (a stop string appeared, ``detokenize``)."""
    tweaks: Tweaks | None = None
    """Penalties, biases and log-probabilities asked for."""
    scores: list = field(default_factory=list)
    """With ``tweaks.logprobs``: each token's ``logits.score``, appended as it is taken."""
    cancelled: bool = False
    arrived: float = field(default_factory=time.perf_counter)

    @property
    def tokens(self) -> int:
        return sum(map(len, self.sources))

    @property
    def width(self) -> int:
        return max(map(len, self.sources))


class Batcher:
    """The queue and its worker thread. ``on_batch(jobs, seconds)`` is told of each batch decoded
    (metrics); results reach each job's future on its event loop."""

    def __init__(self, decoder, decoder_only: bool, max_batch_tokens: int, max_queue: int,
                 on_batch: Callable[[list[Job]], None] = lambda jobs: None):
        self.decoder, self.decoder_only = decoder, decoder_only
        self.max_batch_tokens, self.max_queue, self.on_batch = max_batch_tokens, max_queue, on_batch
        self.queue: deque[Job] = deque()
        self.ready = threading.Condition()
        self.running: list[Job] = []
        self.waiting = 0
        """Prompts (lines) in ``queue``: what ``max_queue`` bounds."""
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="tfspec-serve-decode", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """End the worker once its current batch is done; queued jobs are answered ``Stopped``
        (the server drains before stopping, so none are queued then)."""
        with self.ready:
            self.stopping = True
            self.ready.notify()
        self.thread.join(timeout=5)

    def submit(self, job: Job) -> None:
        """Queue ``job``, or raise ``QueueFull``: the queue counts prompts (lines), so a request
        of many takes as many places."""
        with self.ready:
            if self.waiting + len(job.sources) > self.max_queue:
                raise QueueFull
            self.queue.append(job)
            self.waiting += len(job.sources)
            self.ready.notify()

    def cancel(self, job: Job) -> None:
        """Mark ``job`` cancelled; if it still waits, its places in the queue are free at once."""
        with self.ready:
            job.cancelled = True
            if job in self.queue:
                self.queue.remove(job)
                self.waiting -= len(job.sources)

    def _taken(self, jobs) -> None:
        """``jobs`` leave the queue for decoding (the lock held)."""
        taken = set(jobs)
        self.queue = deque(job for job in self.queue if job not in taken)
        self.waiting -= sum(len(job.sources) for job in jobs)

    @property
    def depth(self) -> int:
        """Prompts (lines) waiting."""
        return self.waiting

    @property
    def alive(self) -> bool:
        """Whether the decoding thread runs (before ``start``: whether it will)."""
        return not self.stopping and (self.thread.is_alive() or self.thread.ident is None)

    def _run(self) -> None:
        """The decoding thread: ``_work`` until stopped. Should it ever die of a bug, ``alive``
        turns false (the probes fail) and what waits is answered at once, not at its deadline."""
        try:
            self._work()
        finally:
            with self.ready:
                self.stopping = True
                left, self.queue, self.waiting = list(self.queue), deque(), 0
            for job in left + self.running:
                settle(job, error=Stopped())

    def _next(self) -> list[Job]:
        """The oldest live job and the queued ones that may join it, nearest in length first,
        while rows x longest row (the padded batch; a decoder-only one with the columns its
        cache will gain, ``_grows``) fits the token budget."""
        with self.ready:
            while not self.stopping and not self.queue:
                self.ready.wait()
            if self.stopping:
                return []
            first, jobs, rows, width = self.queue[0], [], 0, 0
            peers = sorted((job for job in self.queue if job.key == first.key),
                           key=lambda job: abs(job.width - first.width))  # stable: the oldest first at a tie
            for job in peers:
                grown = (rows + len(job.sources), max(width, job.width + self._grows(job)))
                if not jobs or grown[0] * grown[1] <= self.max_batch_tokens:
                    jobs.append(job)
                    rows, width = grown
            self._taken(jobs)
            return jobs

    def _grows(self, job: Job) -> int:
        """Columns a decoder-only batch's cache gains beyond its prompts: all but the last of the
        tokens it may produce (peers share options). A translation's budget counts its sources."""
        return max(job.options.max_length - 1, 0) if self.decoder_only and job.options.max_length else 0

    def _work(self) -> None:
        while jobs := self._next():
            self.running = jobs
            try:
                outputs = self._decode(jobs)
            except Cancelled:
                outputs = None
            except Exception as e:  # a bug in decoding: each waiting request gets its error, not a hang
                for job in jobs:
                    settle(job, error=e)
                continue
            finally:
                self.running = []
            if outputs is not None:
                self.on_batch(jobs)
            for job in jobs:
                n = len(job.sources)
                settle(job, result=outputs[:n] if outputs is not None else None)
                outputs = outputs[n:] if outputs is not None else None

    def _decode(self, jobs: list[Job]) -> list[list[int]]:
        decoder = _Cancellable(self.decoder, jobs)
        sources = [s for job in jobs for s in job.sources]
        options = jobs[0].options
        if not self.decoder_only:
            return decode_all(decoder, sources, options, self.max_batch_tokens, batch_type="tokens")
        if not any(job.watch or job.tweaks or job.options.sampling for job in jobs):
            return prompts(decoder, sources, options)
        watched = Watched(decoder, jobs)  # each row draws its own tokens there (sampled requests share a batch)
        outputs = prompts(watched, sources, replace(options, sampling=None))
        watched.finish(outputs)
        return outputs


def prompts(decoder, sources: list[list[int]], options: SearchOptions) -> list[list[int]]:
    """Continue prompts in one left-padded batch (``prefix_mask``); prompts of different lengths
    only share a batch where the step graph takes masks (the jobs' keys keep them apart else)."""
    width = max(map(len, sources))
    prefix = np.full((len(sources), width), decoder.pad, dtype=np.int64)
    mask = np.zeros((len(sources), width), dtype=bool)
    for r, s in enumerate(sources):
        prefix[r, width - len(s):], mask[r, width - len(s):] = s, True
    return search(decoder, None, options, prefix=prefix, prefix_mask=None if mask.all() else mask)


class _Cancellable:
    """``decoder`` whose steps stop the search (``Cancelled``) once all of ``jobs`` are cancelled."""

    def __init__(self, decoder, jobs: list[Job]):
        self.decoder, self.jobs = decoder, jobs

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def step(self, state, tokens, k, **kw):
        if all(job.cancelled for job in self.jobs):
            raise Cancelled
        return self.decoder.step(state, tokens, k, **kw)


def settle(job: Job, result=None, error: Exception | None = None) -> None:
    """Hand the outcome to the job's event loop (a cancelled job's None is never read)."""
    def settle():
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)
    try:
        job.future.get_loop().call_soon_threadsafe(settle)
    except RuntimeError:  # the loop closed (the server stopped)
        pass
