"""OpenAI's ``/v1/models`` and ``/v1/completions`` for decoder-only exports (streamed as
server-sent events with ``stream: true``), in the shapes the ``openai`` client parses;
``/v1/chat/completions`` is in ``chat``."""

from __future__ import annotations

import asyncio
import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tfspec.errors import TfspecError
from tfspec.serve.errors import ApiError
from tfspec.serve.generation import Generation, room, usage
from tfspec.serve.logits import completion_logprobs
from tfspec.serve.schemas import CompletionRequest
from tfspec.serve.service import Service
from tfspec.serve.streaming import stream


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


async def completions(service: Service, request: Request, started: float) -> Response:
    body = await service.body(request, CompletionRequest)
    if not service.decoder_only:
        raise ApiError(400, f"{service.spec.name} is {service.spec.family}: POST /v1/translate", "model")
    if service.codec is None:
        raise ApiError(400, f"{service.config.directory}: no tokenizer to read prompts with", "prompt")
    many = isinstance(body.prompt, list)
    service.fits(len(body.prompts), "prompt")
    prompts = await asyncio.to_thread(  # up to 256 prompts of 100,000 characters: off the event loop
        lambda: [_prompt(service, text, i if many else None, body.max_tokens) for i, text in enumerate(body.prompts)])
    if body.echo and body.logprobs is not None:  # the step graph gives the last position's log-probabilities only
        raise ApiError(422, "echo with logprobs: the prompt's own log-probabilities are not computed; "
                       "ask for one of them", "echo")
    scored = None if body.logprobs is None else \
        (lambda scores, offset: completion_logprobs(service.codec.decode, scores, offset))
    if body.stream:
        if many:
            raise ApiError(422, "stream: one prompt per streamed request", "prompt")
        head = body.prompt if body.echo else ""
        return await stream(service, request, body, *prompts[0], started, completion_chunk, scored, head)
    gens = []
    try:
        for ids, new in prompts:
            gens.append(Generation(service, body, ids, new))
    except ApiError:  # all of the request or none of it: the prompts admitted so far leave the queue
        for gen in gens:
            service.batcher.cancel(gen.job)
        raise
    outputs = await asyncio.gather(*(gen.result(service, request, started) for gen in gens))
    choices = []
    for i, (gen, prompt) in enumerate(zip(gens, body.prompts)):
        head = prompt if body.echo else ""
        choices.append({"text": head + gen.text.text, "index": i, "finish_reason": gen.finish_reason,
                        "logprobs": scored and scored(gen.job.scores, len(head))})
    return JSONResponse({"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                         "model": service.spec.name, "choices": choices,
                         "usage": usage(sum(len(ids) for ids, _ in prompts), sum(map(len, outputs)))})


def completion_chunk(text: str, reason: str | None, first: bool, logprobs: dict | None) -> tuple[str, dict]:
    """(id prefix, fields) of one streamed ``/v1/completions`` chunk."""
    return "cmpl", {"object": "text_completion", "choices": [{"text": text, "index": 0, "logprobs": logprobs,
                                                              "finish_reason": reason}]}


routes = [("/v1/models", "GET", models, True), ("/v1/completions", "POST", completions, True)]
