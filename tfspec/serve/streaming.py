"""Server-sent events: a completion streamed a chunk per piece of text as the batch decodes it,
in the shapes the ``openai`` client parses, then ``data: [DONE]``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from starlette.responses import Response, StreamingResponse

from tfspec.serve.errors import ApiError
from tfspec.serve.generation import Generation, usage


async def stream(service, request, body, ids, new, started, chunk, scored=None, head: str = "") -> Response:
    """OpenAI's ``data: {...}`` chunks in the shape ``chunk(text, finish reason, first,
    logprobs)`` gives, ``head`` first (an echoed prompt), with ``stream_options.include_usage``
    a last chunk of usage and no choices, then ``data: [DONE]``. ``scored(scores, offset)``
    formats the log-probabilities of the tokens a chunk carries. The prompt is admitted (or
    refused: ``Service.admit``) before the response starts: a refusal is a status, not a 200."""
    return StreamingResponse(_Stream(service, request, body, ids, new, started, chunk, scored, head).events(),
                             media_type="text/event-stream")


class _Stream:
    def __init__(self, service, request, body, ids, new, started, chunk, scored, head: str):
        loop, self.texts = asyncio.get_running_loop(), asyncio.Queue()
        self.gen = Generation(service, body, ids, new,
                              on_text=lambda t: t and loop.call_soon_threadsafe(self.texts.put_nowait, t))
        self.task = asyncio.ensure_future(self.gen.result(service, request, started))  # admitted: the answer is 200
        self.service, self.body, self.chunk, self.scored, self.head = service, body, chunk, scored, head
        self.ident, self.created = uuid.uuid4().hex, int(time.time())
        self.chunks, self.scores, self.chars = 0, 0, len(head)
        """Chunks sent, tokens whose log-probabilities were sent, characters sent."""

    def event(self, text: str, reason: str | None = None) -> str:
        logprobs = None
        if self.scored is not None:  # the tokens read since the last chunk (the scores list only grows)
            scores = self.gen.job.scores[self.scores:]
            logprobs, self.scores = self.scored(scores, self.chars), self.scores + len(scores)
        prefix, fields = self.chunk(text, reason, not self.chunks, logprobs)
        self.chunks, self.chars = self.chunks + 1, self.chars + len(text)
        if self.body.stream_options is not None and self.body.stream_options.continuous_usage_stats:
            fields["usage"] = usage(len(self.gen.ids), self.gen.text.tokens)  # vLLM's: the tokens read so far
        return self.data(prefix, fields)

    def data(self, prefix: str, fields: dict) -> str:
        fields = {"id": f"{prefix}-{self.ident}", "created": self.created, "model": self.service.spec.name, **fields}
        return f"data: {json.dumps(fields)}\n\n"

    async def events(self):
        try:
            if self.head:
                yield self.event(self.head)
            while not self.task.done() or not self.texts.empty():
                getter = asyncio.ensure_future(self.texts.get())
                await asyncio.wait({getter, self.task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield self.event(getter.result())
                else:
                    getter.cancel()
            async for text in self.ending():
                yield text
        finally:  # the client left mid-stream: its row leaves the batch
            if not self.task.done():
                self.service.batcher.cancel(self.gen.job)
                self.task.cancel()

    async def ending(self):
        """The text held back, the finish reason, the usage if asked, ``[DONE]``."""
        try:
            out = await self.task
        except ApiError as e:  # the deadline passed mid-stream: the status is sent; end with the error
            yield f"data: {e.response().body.decode()}\n\n"
            return
        if rest := self.gen.text.release(final=True):
            yield self.event(rest)
        yield self.event("", self.gen.finish_reason)
        if self.body.stream_options is not None and self.body.stream_options.include_usage:
            prefix, fields = self.chunk("", None, False, None)
            yield self.data(prefix, fields | {"choices": [], "usage": usage(len(self.gen.ids), len(out))})
        yield "data: [DONE]\n\n"
