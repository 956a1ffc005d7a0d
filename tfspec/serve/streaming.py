"""Server-sent events: a completion streamed one chunk per decoded token, in the shapes the
``openai`` client parses, then ``data: [DONE]``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from starlette.responses import Response, StreamingResponse

from tfspec.serve.errors import ApiError
from tfspec.serve.generation import Generation, usage


async def stream(service, request, body, ids, new, started, chunk, scored=None, head: str = "") -> Response:
    """Server-sent events, one per piece of text as the batch decodes it (OpenAI's ``data: {...}``
    chunks in the shape ``chunk(text, finish reason, first, logprobs)`` gives, ``head`` first
    (an echoed prompt), with ``stream_options.include_usage`` a last chunk of usage and no
    choices, then ``data: [DONE]``). ``scored(scores, offset)`` formats the log-probabilities of
    the tokens a chunk carries. The prompt is admitted (or refused: ``Service.admit``) before
    the response starts."""
    loop, texts = asyncio.get_running_loop(), asyncio.Queue()
    gen = Generation(service, body, ids, new, on_text=lambda t: t and loop.call_soon_threadsafe(texts.put_nowait, t))
    task = asyncio.ensure_future(gen.result(service, request, started))  # admitted: from here on the answer is 200
    ident, created, name = uuid.uuid4().hex, int(time.time()), service.spec.name
    sent = {"chunks": 0, "scores": 0, "chars": len(head)}

    def event(text: str, reason: str | None = None) -> str:
        logprobs = None
        if scored is not None:  # the tokens read since the last chunk (the scores list only grows)
            scores = gen.job.scores[sent["scores"]:]
            logprobs, sent["scores"] = scored(scores, sent["chars"]), sent["scores"] + len(scores)
        prefix, fields = chunk(text, reason, not sent["chunks"], logprobs)
        sent["chunks"], sent["chars"] = sent["chunks"] + 1, sent["chars"] + len(text)
        return _data({"id": f"{prefix}-{ident}", "created": created, "model": name, **fields})

    async def events():
        try:
            if head:
                yield event(head)
            while not task.done() or not texts.empty():
                getter = asyncio.ensure_future(texts.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield event(getter.result())
                else:
                    getter.cancel()
            try:
                out = await task
            except ApiError as e:  # the deadline passed mid-stream: the status is sent; end with the error
                yield f"data: {e.response().body.decode()}\n\n"
                return
            if rest := gen.text.release(final=True):
                yield event(rest)
            yield event("", gen.finish_reason)
            if body.stream_options is not None and body.stream_options.include_usage:
                prefix, fields = chunk("", None, False, None)
                yield _data({"id": f"{prefix}-{ident}", "created": created, "model": name, **fields, "choices": [],
                             "usage": usage(len(ids), len(out))})
            yield "data: [DONE]\n\n"
        finally:  # the client left mid-stream: its row leaves the batch
            if not task.done():
                service.batcher.cancel(gen.job)
                task.cancel()

    return StreamingResponse(events(), media_type="text/event-stream")


def _data(fields: dict) -> str:
    return f"data: {json.dumps(fields)}\n\n"
