"""Server-sent events: a completion streamed one chunk per decoded token, in the shapes the
``openai`` client parses, then ``data: [DONE]``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from starlette.responses import Response, StreamingResponse

from tfspec.serve.errors import ApiError
from tfspec.serve.generation import Completion, submit_one


async def stream(service, request, body, ids, new, started, chunk) -> Response:
    """Server-sent events, one per token as the batch decodes it (OpenAI's ``data: {...}``
    chunks in the shape ``chunk(text, finish reason, first)`` gives, then ``data: [DONE]``).
    The prompt is admitted (or refused: ``Service.admit``) before the response starts."""
    loop, tokens = asyncio.get_running_loop(), asyncio.Queue()
    job = submit_one(service, body, ids, new, sink=lambda t: loop.call_soon_threadsafe(tokens.put_nowait, t))
    task = asyncio.ensure_future(service.wait(request, job, started))  # admitted: from here on the answer is 200
    ident, created, name, sent_any = uuid.uuid4().hex, int(time.time()), service.spec.name, []

    def event(text: str, reason: str | None) -> str:
        prefix, fields = chunk(text, reason, not sent_any)
        sent_any.append(True)
        return f"data: {json.dumps({'id': f'{prefix}-{ident}', 'created': created, 'model': name, **fields})}\n\n"

    async def events():
        try:
            async for text in _events():
                yield text
        finally:  # the client left mid-stream: its row leaves the batch
            job.cancelled |= not task.done()
            task.cancel()

    async def _events():
        done, sent, out = Completion(service, ids, body.stops), "", []
        while not task.done() or not tokens.empty():
            getter = asyncio.ensure_future(tokens.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            out.append(getter.result())
            text = done.text(out)
            if len(text) > len(sent) and not text.endswith("\ufffd"):  # a whole character at least
                yield event(text[len(sent):], None)
                sent = text
        try:
            final = (await task)[0]
        except ApiError as e:  # the deadline passed mid-stream: the status is sent; end with the error
            yield f"data: {e.response().body.decode()}\n\n"
            return
        text = done.text(final)
        if len(text) > len(sent):
            yield event(text[len(sent):], None)
        yield event("", "stop" if done.stopped or len(final) < new else "length")
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
