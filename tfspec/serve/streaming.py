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
    """OpenAI's ``data: {...}`` chunks in the shape ``chunk(text, finish reason, first, fields)``
    gives (``fields``: the choice's ``logprobs``, and ``token_ids`` where the export has no
    tokenizer), ``head`` first (an echoed prompt), with ``stream_options.include_usage`` a last
    chunk of usage and no choices, then ``data: [DONE]``. A chunk carries the tokens whose
    pieces its text completes (``Detokenizer.settled``), so the tokens a stream sends and their
    offsets are the unary answer's; ``scored(text, scores, first, offset)`` formats their
    log-probabilities. The prompt is admitted (or refused: ``Service.admit``) before the
    response starts: a refusal is a status, not a 200."""
    return StreamingResponse(_Stream(service, request, body, ids, new, started, chunk, scored, head).events(),
                             media_type="text/event-stream")


class _Stream:
    def __init__(self, service, request, body, ids, new, started, chunk, scored, head: str):
        self.loop, self.texts, self.told = asyncio.get_running_loop(), asyncio.Queue(), 0
        self.gen = Generation(service, body, ids, new, on_text=self._told)
        self.task = asyncio.ensure_future(self.gen.result(service, request, started))  # admitted: the answer is 200
        self.service, self.body, self.chunk, self.scored, self.head = service, body, chunk, scored, head
        self.ident, self.created = uuid.uuid4().hex, int(time.time())
        self.chunks, self.sent, self.offset = 0, 0, len(head)
        """Chunks sent, tokens sent, and where the next token's piece starts in the choice's text."""

    def _told(self, text: str, settled: int) -> None:
        """In the decoding thread: new text, or tokens settled, for the next chunk."""
        if text or settled > self.told:
            self.told = settled
            self.loop.call_soon_threadsafe(self.texts.put_nowait, (text, settled))

    def event(self, text: str, upto: int, reason: str | None = None) -> str:
        """The chunk of ``text`` carrying tokens ``sent`` to ``upto``."""
        fields, reader = {"logprobs": None}, self.gen.text
        if self.scored is not None:
            scores = self.gen.job.scores[self.sent:upto]
            fields["logprobs"] = self.scored(reader, scores, self.sent, self.offset)
        if self.service.codec is None:
            fields["token_ids"] = reader.taken[self.sent:upto]
        self.offset += sum(map(len, reader.pieces[self.sent:upto]))
        prefix, fields = self.chunk(text, reason, not self.chunks, fields)
        self.chunks, self.sent = self.chunks + 1, max(self.sent, upto)
        if self.body.stream_options is not None and self.body.stream_options.continuous_usage_stats:
            fields["usage"] = usage(len(self.gen.ids), reader.tokens)  # vLLM's: the tokens read so far
        return self.data(prefix, fields)

    def data(self, prefix: str, fields: dict) -> str:
        fields = {"id": f"{prefix}-{self.ident}", "created": self.created, "model": self.service.spec.name, **fields}
        return f"data: {json.dumps(fields)}\n\n"

    async def events(self):
        try:
            if self.head:
                yield self.event(self.head, 0)
            while not self.task.done() or not self.texts.empty():
                getter = asyncio.ensure_future(self.texts.get())
                await asyncio.wait({getter, self.task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield self.event(*getter.result())
                else:
                    getter.cancel()
            async for text in self.ending():
                yield text
        finally:  # the client left mid-stream: its row leaves the batch
            if not self.task.done():
                self.service.batcher.cancel(self.gen.job)
                self.task.cancel()

    async def ending(self):
        """The text held back with the tokens left, the finish reason, the usage if asked, ``[DONE]``."""
        try:
            out = await self.task
        except ApiError as e:  # the deadline passed mid-stream: the status is sent; end with the error
            yield f"data: {e.response().body.decode()}\n\n"
            return
        rest, upto = self.gen.text.release(final=True), self.gen.text.tokens
        if rest or upto > self.sent:
            yield self.event(rest, upto)
        yield self.event("", upto, self.gen.finish_reason)
        if self.body.stream_options is not None and self.body.stream_options.include_usage:
            prefix, fields = self.chunk("", None, False, {"logprobs": None})
            yield self.data(prefix, fields | {"choices": [], "usage": usage(len(self.gen.ids), len(out))})
        yield "data: [DONE]\n\n"
