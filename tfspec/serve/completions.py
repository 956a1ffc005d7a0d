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
from tfspec.serve.tasks import COMPLETIONS, require


async def models(service: Service, request: Request, started: float) -> Response:
    """The one model, with the POST routes it answers (``serves``: tfspec's, beside OpenAI's fields)."""
    return JSONResponse({"object": "list", "data": [{"id": service.spec.name, "object": "model", "created": 0,
                                                      "owned_by": "tfspec", "serves": list(service.serves)}]})


def _prompt(service: Service, prompt: str | list[int], field: str, max_tokens: int) -> tuple[list[int], int]:
    """(prompt ids, tokens it may get): token ids as sent (within the vocabulary), a text as the
    tokenizer reads it for ``tfspec generate``."""
    if isinstance(prompt, list):
        ids = service.within_vocabulary(prompt, field)
    elif service.codec is None:
        raise ApiError(400, f"{service.config.directory}: no tokenizer to read text with; send the prompt as "
                       "token ids", field)
    else:
        try:
            ids = service.codec.prompt(prompt)
        except TfspecError as e:
            raise ApiError(422, str(e), field) from None
    return ids, room(service, ids, max_tokens, field)


def _untokenized(service: Service, body: CompletionRequest) -> None:
    """What an export without a tokenizer cannot answer: text to match (stop strings) or spell
    (log-probabilities). Its answers' text is empty and their ``token_ids`` carry the tokens."""
    if service.codec is not None:
        return
    for field, asked in (("stop", body.stops), ("logprobs", body.logprobs is not None)):
        if asked:
            raise ApiError(422, f"{field}: {service.config.directory} has no tokenizer to read the output as text",
                           field)


async def completions(service: Service, request: Request, started: float) -> Response:
    body = await service.body(request, CompletionRequest)
    require(service, COMPLETIONS)
    _untokenized(service, body)
    service.fits(len(body.prompts), "prompt")
    fields = [f"prompt.{i}" if body.many else "prompt" for i in range(len(body.prompts))]
    prompts = await asyncio.to_thread(  # up to 256 prompts of 100,000 characters: off the event loop
        lambda: [_prompt(service, p, field, body.max_tokens) for p, field in zip(body.prompts, fields)])
    if body.echo and body.logprobs is not None:  # the step graph gives the last position's log-probabilities only
        raise ApiError(422, "echo with logprobs: the prompt's own log-probabilities are not computed; "
                       "ask for one of them", "echo")
    scored = None if body.logprobs is None else completion_logprobs
    heads = [_echoed(service, p) if body.echo else "" for p in body.prompts]
    if body.stream:
        if body.many:
            raise ApiError(422, "stream: one prompt per streamed request", "prompt")
        return await stream(service, request, body, *prompts[0], started, completion_chunk, scored, heads[0])
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
    for i, (gen, head) in enumerate(zip(gens, heads)):
        choices.append({"text": head + gen.text.text, "index": i, "finish_reason": gen.finish_reason,
                        "logprobs": scored and scored(gen.text, gen.job.scores, 0, len(head))}
                       | ({"token_ids": gen.out} if service.codec is None else {}))
    return JSONResponse({"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                         "model": service.spec.name, "choices": choices,
                         "usage": usage(sum(len(ids) for ids, _ in prompts), sum(map(len, outputs)))})


def _echoed(service: Service, prompt: str | list[int]) -> str:
    """``echo``'s text of a prompt: as sent, or its token ids decoded (none without a tokenizer)."""
    if isinstance(prompt, str):
        return prompt
    return "" if service.codec is None else service.codec.decode(prompt)


def completion_chunk(text: str, reason: str | None, first: bool, fields: dict) -> tuple[str, dict]:
    """(id prefix, fields) of one streamed ``/v1/completions`` chunk; ``fields``: the choice's others."""
    return "cmpl", {"object": "text_completion",
                    "choices": [{"text": text, "index": 0, "finish_reason": reason} | fields]}


routes = [("/v1/models", "GET", models, True), ("/v1/completions", "POST", completions, True)]
