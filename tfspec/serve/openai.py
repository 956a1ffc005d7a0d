"""OpenAI-compatible routes for decoder-only exports: ``/v1/models`` and ``/v1/completions``
(streamed as server-sent events with ``stream: true``), in the shapes the ``openai`` client
parses; ``/v1/chat/completions`` is in ``chat``. With continuous batching (``scheduler``) every
request shares the running batch and picks its own tokens; with static batching greedy
requests are batched with each other and sampled ones decode alone. Either way a ``seed``
gives the tokens ``tfspec generate --sample --seed`` gives."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from tfspec.errors import TfspecError
from tfspec.search import Sampling, SearchOptions
from tfspec.serve.app import ApiError, Service
from tfspec.serve.schemas import MAX_NEW_TOKENS, CompletionRequest


async def models(service: Service, request: Request, started: float) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": service.spec.name, "object": "model", "created": 0,
                                                      "owned_by": "tfspec"}]})


def _prompt(service: Service, text: str, i: int, max_tokens: int) -> tuple[list[int], int]:
    """(prompt ids, tokens it may get): the tokenizer's ids, as ``tfspec generate`` reads them."""
    field = "prompt" if i is None else f"prompt.{i}"
    try:
        ids = service.codec.prompt(text)
    except TfspecError as e:
        raise ApiError(422, str(e), field) from None
    return ids, room(service, ids, max_tokens, field)


def room(service: Service, ids: list[int], max_tokens: int | None, field: str) -> int:
    """Tokens a prompt of ``ids`` may get: ``max_tokens`` (None: all), within the model's positions."""
    left = service.limit - len(ids) if service.limit is not None else MAX_NEW_TOKENS
    if not ids or left < 1:
        raise ApiError(413 if ids else 422, f"the prompt is {len(ids)} tokens; the model takes 1 to "
                       f"{(service.limit or 2) - 1}", field)
    return min(left, max_tokens or MAX_NEW_TOKENS)


def _options(body: CompletionRequest, new: int) -> SearchOptions:
    sampling = None if body.temperature == 0 else Sampling(
        temperature=body.temperature, top_p=body.top_p,
        seed=body.seed if body.seed is not None else uuid.uuid4().int % 2**32)
    return SearchOptions(beam=1, max_extra=new, max_length=new, sampling=sampling)


class Completion:
    """One prompt's continuation as text: the decoded whole less the decoded prompt (tokenizers
    that drop a leading space keep it this way), cut at the first stop string."""

    def __init__(self, service: Service, prompt: list[int], stops: list[str]):
        self.codec, self.prompt, self.stops = service.codec, prompt, stops
        self.head = self.codec.decode(prompt)
        self.stopped = False

    def text(self, new: list[int]) -> str:
        whole = self.codec.decode(self.prompt + new)
        text = whole[len(self.head):] if whole.startswith(self.head) else self.codec.decode(new)
        cuts = [text.find(s) for s in self.stops if s in text]
        self.stopped = bool(cuts)
        return text[: min(cuts)] if cuts else text


async def completions(service: Service, request: Request, started: float) -> Response:
    body = await service.body(request, CompletionRequest)
    if not service.decoder_only:
        raise ApiError(400, f"{service.spec.name} is {service.spec.family}: POST /v1/translate", "model")
    if service.codec is None:
        raise ApiError(400, f"{service.config.directory}: no tokenizer to read prompts with", "prompt")
    many = isinstance(body.prompt, list)
    prompts = [_prompt(service, text, i if many else None, body.max_tokens) for i, text in enumerate(body.prompts)]
    if body.stream:
        if many:
            raise ApiError(422, "stream: one prompt per streamed request", "prompt")
        return await stream(service, request, body, *prompts[0], started, completion_chunk)
    outputs = await asyncio.gather(*(_one(service, request, body, ids, new, started) for ids, new in prompts))
    choices, used = [], 0
    for i, ((ids, new), out) in enumerate(zip(prompts, outputs)):
        done = Completion(service, ids, body.stops)
        text = done.text(out)
        choices.append({"text": text, "index": i, "logprobs": None,
                        "finish_reason": "stop" if done.stopped or len(out) < new else "length"})
        used += len(out)
    tokens = sum(len(ids) for ids, _ in prompts)
    return JSONResponse({"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                         "model": service.spec.name, "choices": choices,
                         "usage": {"prompt_tokens": tokens, "completion_tokens": used, "total_tokens": tokens + used}})


async def _one(service, request, body, ids, new, started, sink=None) -> list[int]:
    options = _options(body, new)
    # without masks in the step graph, only prompts of one length share a batch
    key = ("complete", options, None if service.ragged else len(ids)) if options.sampling is None else \
        ("alone", uuid.uuid4())
    return (await service.decode(request, [ids], options, key, started, sink))[0]


def completion_chunk(text: str, reason: str | None, first: bool) -> tuple[str, dict]:
    """(id prefix, fields) of one streamed ``/v1/completions`` chunk."""
    return "cmpl", {"object": "text_completion", "choices": [{"text": text, "index": 0, "logprobs": None,
                                                              "finish_reason": reason}]}


async def stream(service, request, body, ids, new, started, chunk) -> Response:
    """Server-sent events, one per token as the batch decodes it (OpenAI's ``data: {...}``
    chunks in the shape ``chunk(text, finish reason, first)`` gives, then ``data: [DONE]``)."""
    loop, tokens = asyncio.get_running_loop(), asyncio.Queue()
    task = asyncio.ensure_future(_one(service, request, body, ids, new, started,
                                      sink=lambda t: loop.call_soon_threadsafe(tokens.put_nowait, t)))
    ident, created, name, sent_any = uuid.uuid4().hex, int(time.time()), service.spec.name, []

    def event(text: str, reason: str | None) -> str:
        prefix, fields = chunk(text, reason, not sent_any)
        sent_any.append(True)
        return f"data: {json.dumps({'id': f'{prefix}-{ident}', 'created': created, 'model': name, **fields})}\n\n"

    async def events():
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
            final = await task
        except ApiError as e:  # the deadline passed mid-stream: the status is sent; end with the error
            yield f"data: {e.response().body.decode()}\n\n"
            return
        text = done.text(final)
        if len(text) > len(sent):
            yield event(text[len(sent):], None)
        yield event("", "stop" if done.stopped or len(final) < new else "length")
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


routes = [("/v1/models", "GET", models), ("/v1/completions", "POST", completions)]
