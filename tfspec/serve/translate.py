"""``POST /v1/translate``: ``tfspec translate`` over HTTP, for encoder-decoder exports."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tfspec.search import SearchOptions
from tfspec.serve.schemas import TranslateRequest
from tfspec.serve.service import Service
from tfspec.serve.tasks import TRANSLATE, require


async def translate(service: Service, request: Request, started: float) -> Response:
    body = await service.body(request, TranslateRequest)
    require(service, TRANSLATE)
    sources = service.sources(body)
    service.fits(len(sources), "ids" if body.ids is not None else "text")
    options = SearchOptions(beam=body.beam, alpha=body.alpha, max_extra=body.max_extra,
                            max_length=None if service.limit is None else service.limit - 1)
    outputs = [[] for _ in sources]
    if any(sources):
        outputs = await service.decode(request, sources, options, ("translate", options), started)
    answer = {"ids": outputs}
    if service.codec is not None:
        answer["text"] = [service.codec.decode(out) for out in outputs]
    return JSONResponse(answer)


routes = [("/v1/translate", "POST", translate, True)]
