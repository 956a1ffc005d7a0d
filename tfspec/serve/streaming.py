"""Server-sent events: a completion streamed one chunk per decoded token, in the shapes the
``openai`` client parses, then ``data: [DONE]``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from starlette.responses import Response, StreamingResponse

from tfspec.serve.errors import ApiError
from tfspec.serve.generation import Generation


async def stream(service, request, body, ids, new, started, chunk) -> Response:
    """Server-sent events, one per piece of text as the batch decodes it (OpenAI's ``data: {...}``
    chunks in the shape ``chunk(text, finish reason, first)`` gives, then ``data: [DONE]``).
    The prompt is admitted (or refused: ``Service.admit``) before the response starts."""
    loop, texts = asyncio.get_running_loop(), asyncio.Queue()
    gen = Generation(service, body, ids, new, on_text=lambda t: t and loop.call_soon_threadsafe(texts.put_nowait, t))
    task = asyncio.ensure_future(gen.result(service, request, started))  # admitted: from here on the answer is 200
    ident, created, name, sent_any = uuid.uuid4().hex, int(time.time()), service.spec.name, []

    def event(text: str, reason: str | None) -> str:
        prefix, fields = chunk(text, reason, not sent_any)
        sent_any.append(True)
        return f"data: {json.dumps({'id': f'{prefix}-{ident}', 'created': created, 'model': name, **fields})}\n\n"

    async def events():
        try:
            while not task.done() or not texts.empty():
                getter = asyncio.ensure_future(texts.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield event(getter.result(), None)
                else:
                    getter.cancel()
            try:
                await task
            except ApiError as e:  # the deadline passed mid-stream: the status is sent; end with the error
                yield f"data: {e.response().body.decode()}\n\n"
                return
            if rest := gen.text.release(final=True):
                yield event(rest, None)
            yield event("", gen.finish_reason)
            yield "data: [DONE]\n\n"
        finally:  # the client left mid-stream: its row leaves the batch
            gen.job.cancelled |= not task.done()
            task.cancel()

    return StreamingResponse(events(), media_type="text/event-stream")
