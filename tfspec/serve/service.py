"""The served model and the server's state: the model with its tokenizer and batcher (as its
``config.ServeConfig`` says), admission (draining, a full queue) and each request's wait for its
decoding.

Every answer to bad input is an ``ApiError`` (``errors``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from pydantic import ValidationError
from starlette.requests import Request

from tfspec.errors import TfspecError
from tfspec.search import SearchOptions
from tfspec.serve.batcher import Batcher, Job, QueueFull, Stopped
from tfspec.serve.config import ServeConfig
from tfspec.serve.direct import Runner
from tfspec.serve.errors import ApiError
from tfspec.serve.metrics import Metrics
from tfspec.serve.scheduler import ContinuousBatcher, continuous
from tfspec.serve.schemas import TranslateRequest
from tfspec.serve.tasks import decodes, served


DEAD = "the decoding thread is not running: this server cannot answer (its /health fails: restart it)"


class Service:
    """The model, its tokenizer and batcher, and the server's state (draining, in flight)."""

    def __init__(self, config: ServeConfig):
        from tfspec.backends.onnx import OnnxModel
        from tfspec.data.codecs import HFCodec, open_codec
        from tfspec.serve.chat_encode import ContentEncoder
        from tfspec.serve.chat_template import read_chat_template

        self.config = config
        self.model = OnnxModel(config.directory, threads=config.threads)
        self.spec = self.model.spec
        self.decoder_only = self.spec.family == "decoder-only"
        self.codec = open_codec(Path(config.directory), self.spec.vocab)
        self.limit = self.spec.positional.limit  # the one position limit (Positional.limit)
        self.chat = read_chat_template(Path(config.directory)) \
            if self.decoder_only and isinstance(self.codec, HFCodec) else None
        """``/v1/chat/completions``' template: where a tokenizer.json (what templates are written for) has one."""
        self.chat_encoder = ContentEncoder(self.codec.tokenizer) if self.chat else None
        """Tokenizes a rendering so that typed special tokens stay text (``chat_encode``)."""
        self.metrics = Metrics()
        self.serves = served(self.model, self.chat is not None)
        """The POST routes this export answers (``tasks``): what each handler and /v1/models ask."""
        if not self.serves:
            raise TfspecError(f"{config.directory}: {self.spec.name} ({self.spec.family}, head "
                              f"{getattr(self.spec.head, 'kind', None)}) answers none of tfspec serve's routes "
                              "(docs/serve.md)")
        self.ragged = self.continuous = False
        self.batcher = self._batcher(config) if decodes(self.serves) else Runner(config.max_queue)
        self.metrics.queue.set_function(lambda: self.batcher.depth)
        self.draining = False
        self.inflight = 0
        self.stopped = asyncio.Event()
        """Set when a drain's grace is spent: what is still in flight answers 503 and is cancelled."""

    def _batcher(self, config: ServeConfig) -> Batcher | ContinuousBatcher:
        """The batcher over the step graph: continuous where the decoder lets rows join and leave."""
        decoder = self.model.decoder()
        if self.decoder_only and config.batching == "continuous" and not continuous(decoder):
            decoder = self.model.decoder(in_place=False)  # rows join and leave over the standard cache only
        self.ragged = getattr(decoder, "takes_masks", False)
        """Prompts of different lengths share a batch (the step graph takes masks)."""
        self.continuous = self.decoder_only and config.batching == "continuous" and continuous(decoder)
        if self.continuous:
            return ContinuousBatcher(decoder, config.max_batch_tokens, config.max_queue, self.metrics.batch)
        return Batcher(decoder, self.decoder_only, config.max_batch_tokens, config.max_queue, self.metrics.batch)

    async def body(self, request: Request, model):
        """The request body parsed as ``model``: ``raw``'s refusals, then ``validated``'s."""
        return validated(model.model_validate_json, await self.raw(request))

    async def raw(self, request: Request) -> bytes:
        """The request body: 413 over ``max_body``, 408 if not received within ``body_timeout``."""
        limit = self.config.max_body
        if int(request.headers.get("content-length") or 0) > limit:
            raise ApiError(413, f"the body is over {limit:,} bytes", "body")
        try:
            return await asyncio.wait_for(_read(request, limit), self.config.body_timeout)
        except TimeoutError:  # slowloris: a client sending a byte now and then would hold a connection for ever
            raise ApiError(408, f"the body was not received within {self.config.body_timeout:g}s", "body",
                           headers={"Connection": "close"}) from None

    def admit(self, sources: list[list[int]], options: SearchOptions, key: tuple, watch=None,
              tweaks=None) -> Job:
        """Queue ``sources`` now or refuse them (503 + Retry-After: draining, or the queue full).
        Decided before any byte of the answer is sent, streams included, so that a refusal is a
        status a client or balancer acts on, never an error inside a 200. ``watch`` is told each
        token as it is decoded and may end the row (``Job.watch``); ``tweaks``: ``Job.tweaks``."""
        if self.draining:
            raise ApiError(503, "the server is shutting down", headers={"Retry-After": "1"})
        if not self.batcher.alive:
            raise ApiError(503, DEAD)
        job = Job(sources, options, key, asyncio.get_running_loop().create_future(), watch, tweaks)
        try:
            self.batcher.submit(job)
        except QueueFull:
            raise ApiError(503, f"the queue is full ({self.config.max_queue} prompts waiting); retry shortly",
                           headers={"Retry-After": "1"}) from None
        return job

    def fits(self, prompts: int, field: str) -> None:
        """413 for a request of more prompts (lines) than the queue holds: it could never be admitted."""
        if prompts > self.config.max_queue:
            raise ApiError(413, f"{prompts} prompts, more than the queue holds (--max-queue {self.config.max_queue}); "
                           "send them in several requests", field)

    async def decode(self, request: Request, sources: list[list[int]], options: SearchOptions, key: tuple,
                     started: float) -> list[list[int]]:
        """``admit`` then ``wait``."""
        return await self.wait(request, self.admit(sources, options, key), started)

    async def wait(self, request: Request, job: Job, started: float) -> list[list[int]]:
        """``job``'s outputs, up to the deadline and while the client stays; either way out, the
        work is cancelled."""
        left = self.config.timeout - (time.perf_counter() - started)
        gone = asyncio.ensure_future(_disconnected(request))
        stopped = asyncio.ensure_future(self.stopped.wait())
        try:
            done, _ = await asyncio.wait({job.future, gone, stopped}, timeout=max(left, 0),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            stopped.cancel()
        if job.future in done:
            try:
                outputs = job.future.result()
            except Stopped:
                raise ApiError(503, DEAD) from None
            self.metrics.generated.inc(sum(map(len, outputs)))
            return outputs
        self.batcher.cancel(job)
        if gone in done:
            raise ApiError(499, "the client closed the request")
        if stopped in done:
            raise ApiError(503, "the server stopped before this request finished (its drain's grace was spent); "
                                "cancelled", headers={"Retry-After": "1"})
        raise ApiError(504, f"not answered within the server's timeout ({self.config.timeout:g}s); cancelled")

    def within_vocabulary(self, ids: list[int], field: str) -> list[int]:
        """``ids``, or 422 naming the first outside the model's vocabulary (``field``.position)."""
        size = self.spec.vocab.size
        bad = next((j for j, t in enumerate(ids) if not 0 <= t < size), None)
        if bad is not None:
            raise ApiError(422, f"token id {ids[bad]} is outside the vocabulary (0..{size - 1})", f"{field}.{bad}")
        return ids

    def sources(self, body: TranslateRequest) -> list[list[int]]:
        """Source ids with EOS, as ``tfspec translate`` reads its lines; empty lines stay empty."""
        vocab = self.spec.vocab
        if body.text is not None:
            if self.codec is None:
                raise ApiError(422, "this model has no tokenizer: send token ids as 'ids'", "text")
            try:
                sources = [self.codec.encode(line) if line.strip() else [] for line in body.text]
            except TfspecError as e:
                raise ApiError(422, str(e), "text") from None
        else:
            sources = [self.within_vocabulary(line, f"ids.{i}") + [vocab.eos_id] if line else []
                       for i, line in enumerate(body.ids)]
        field = "text" if body.text is not None else "ids"
        for i, ids in enumerate(sources):
            if self.limit is not None and len(ids) > self.limit:
                raise ApiError(413, f"{len(ids)} tokens (with EOS), more than the model's {self.limit} positions",
                               f"{field}.{i}")
        return sources


def validated(validate, data):
    """``validate(data)`` (a pydantic model's ``model_validate_json`` or ``model_validate``):
    400 if not JSON, 422 if it does not fit the model (the first error's field named)."""
    try:
        return validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            raise ApiError(400, f"the body is not JSON: {first['msg']}", "body") from None
        field = ".".join(map(str, first["loc"])) or None
        raise ApiError(422, f"{field or 'body'}: {first['msg']}", field) from None


async def _read(request: Request, limit: int) -> bytes:
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise ApiError(413, f"the body is over {limit:,} bytes", "body")
    return bytes(raw)


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body was read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
