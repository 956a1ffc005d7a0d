"""OpenAI's ``POST /v1/chat/completions``, where the export's tokenizer has a chat template
(``chat_template``): the messages rendered as transformers renders them, tokenized without
adding special tokens (the template writes them) and continued as a completion is."""

from __future__ import annotations

import asyncio
import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tfspec.serve.errors import ApiError
from tfspec.serve.generation import Generation, room, usage
from tfspec.serve.logits import chat_logprobs
from tfspec.serve.schemas import ChatRequest
from tfspec.serve.service import Service
from tfspec.serve.streaming import stream
from tfspec.serve.tasks import CHAT, COMPLETIONS, require


async def chat(service: Service, request: Request, started: float) -> Response:
    body = await service.body(request, ChatRequest)
    if service.chat is None and COMPLETIONS in service.serves:
        raise ApiError(400, f"{service.spec.name}: no chat template in {service.config.directory} "
                       "(chat_template.jinja or tokenizer_config.json); POST /v1/completions", "messages")
    require(service, CHAT)
    ids = await asyncio.to_thread(_prompt, service, body.messages)  # both may take long: off the event loop
    if any(i >= service.spec.vocab.size for i in ids):
        raise ApiError(422, f"the tokenizer gave id {max(ids)}, outside the model's vocabulary", "messages")
    new = room(service, ids, body.max_completion_tokens or body.max_tokens, "messages")
    if body.top_logprobs is not None and not body.logprobs:
        raise ApiError(422, "top_logprobs: only with logprobs: true", "top_logprobs")
    scored = (lambda text, scores, first, offset: chat_logprobs(text, scores, first)) if body.logprobs else None
    if body.stream:
        return await stream(service, request, body, ids, new, started, _chunk, scored)
    gen = Generation(service, body, ids, new)
    out = await gen.result(service, request, started)
    return JSONResponse({"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                         "created": int(time.time()), "model": service.spec.name,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": gen.text.text},
                                      "logprobs": chat_logprobs(gen.text, gen.job.scores, 0) if body.logprobs else None,
                                      "finish_reason": gen.finish_reason}],
                         "usage": usage(len(ids), len(out))})


def _prompt(service: Service, messages) -> list[int]:
    """The ids of ``messages`` rendered by the template, typed special tokens kept as text."""
    text = service.chat.render([m.model_dump(exclude_none=True) for m in messages])
    contents = [part for m in messages for part in ([m.content] if isinstance(m.content, str) else
                                                    [p.text for p in m.content])]
    return service.chat_encoder.encode(text, contents)


def _chunk(text: str, reason: str | None, first: bool, fields: dict) -> tuple[str, dict]:
    """(id prefix, fields) of one streamed chat chunk: the role first, then the text; ``fields``:
    the choice's others (``logprobs``)."""
    delta = ({"role": "assistant"} if first else {}) | ({"content": text} if text or reason is None else {})
    return "chatcmpl", {"object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": reason} | fields]}


routes = [("/v1/chat/completions", "POST", chat, True)]
