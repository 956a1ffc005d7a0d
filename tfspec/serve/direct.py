"""The worker of exports that run their graphs once per request (a transcription, embeddings)
rather than decode step by step: one thread running requests in their order of arrival, in the
batcher's place (``/health``, the queue metric and the drain ask it the same questions), with
each request's admission (draining, a full queue: 503) and wait (the timeout: 504).

One thread: onnxruntime spreads each run over ``--threads`` already, and the model's IO
bindings are not to be shared between threads."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tfspec.serve.errors import ApiError


class Runner:
    """The thread and its queue: ``max_queue`` requests waiting at most."""

    def __init__(self, max_queue: int):
        self.max_queue, self.waiting, self.stopping = max_queue, 0, False
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="tfspec-serve-run")
        self.lock = threading.Lock()

    def start(self) -> None:
        """Nothing to start: the thread starts with the first request."""

    def stop(self) -> None:
        """Refuse new requests and drop the waiting ones (a drain leaves none)."""
        self.stopping = True
        self.pool.shutdown(wait=False, cancel_futures=True)

    @property
    def alive(self) -> bool:
        return not self.stopping

    @property
    def depth(self) -> int:
        """Requests waiting or running."""
        return self.waiting

    async def run(self, service, started: float, work, *args):
        """``work(*args)`` on the thread, or the refusal a client acts on: 503 + Retry-After
        while draining or with the queue full, 504 past ``--timeout`` from ``started`` (a request
        still queued is dropped; one running finishes unseen)."""
        if service.draining or self.stopping:
            raise ApiError(503, "the server is shutting down", headers={"Retry-After": "1"})
        self._admit()
        try:
            future = self.pool.submit(work, *args)
        except RuntimeError:  # stopped since the check
            self._done(None)
            raise ApiError(503, "the server is shutting down", headers={"Retry-After": "1"}) from None
        future.add_done_callback(self._done)
        left = service.config.timeout - (time.perf_counter() - started)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), max(left, 0))
        except TimeoutError:
            future.cancel()
            raise ApiError(504, f"not answered within the server's timeout ({service.config.timeout:g}s); "
                           "cancelled") from None

    def _admit(self) -> None:
        with self.lock:
            if self.waiting >= self.max_queue:
                raise ApiError(503, f"the queue is full ({self.max_queue} requests waiting); retry shortly",
                               headers={"Retry-After": "1"})
            self.waiting += 1

    def _done(self, _future) -> None:
        with self.lock:
            self.waiting -= 1

