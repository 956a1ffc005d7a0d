"""The HTTP application: each route group's handlers (``probes``, ``translate``, ``completions``,
``chat``, ``audio``, ``embeddings``; which of them an export answers: ``tasks``) behind one wrapper that answers their ``ApiError`` as JSON and counts and times every
request by route and status."""

from __future__ import annotations

import contextlib
import logging
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tfspec.serve.audio import routes as audio_routes
from tfspec.serve.chat import routes as chat_routes
from tfspec.serve.completions import routes as completion_routes
from tfspec.serve.embeddings import routes as embedding_routes
from tfspec.serve.errors import ApiError
from tfspec.serve.probes import routes as probe_routes
from tfspec.serve.service import ServeConfig, Service
from tfspec.serve.translate import routes as translate_routes

log = logging.getLogger("tfspec.serve")


def endpoint(service: Service, route: str, handler, counted: bool = True):
    """``handler`` with its errors answered as JSON, counted and timed by route and status. A
    request is in flight (``Service.inflight``, what a drain waits for) until its answer's last
    byte: a stream's until its last chunk, when its metrics are recorded too."""
    async def run(request: Request) -> Response:
        started = time.perf_counter()
        service.inflight += counted

        def done(status: int) -> None:
            service.inflight -= counted
            service.metrics.requests.labels(route, str(status)).inc()
            service.metrics.latency.labels(route).observe(time.perf_counter() - started)
        try:
            response = await handler(service, request, started)
        except ApiError as e:
            response = e.response()
        except Exception:  # a bug: logged, answered and counted as the 500 it is
            log.exception("%s %s", request.method, route)
            response = ApiError(500, "internal error: a bug in tfspec (the server logged it)").response()
        except BaseException:
            service.inflight -= counted
            raise
        if isinstance(response, StreamingResponse):
            response.body_iterator = _held(response.body_iterator, lambda: done(response.status_code))
        else:
            done(response.status_code)
        return response
    return run


async def _held(chunks, done):
    """``chunks``, then ``done()`` however the stream ends (its last chunk sent, or the client gone)."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        done()


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return ApiError(exc.status_code, exc.detail, headers=exc.headers).response()


def create_app(config: ServeConfig, service: Service | None = None) -> Starlette:
    """The application over ``config.directory`` (its model loaded now, before serving)."""
    service = service or Service(config)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        service.batcher.start()
        yield
        service.batcher.stop()

    routes = [Route(path, endpoint(service, path, handler, counted), methods=[method])
              for path, method, handler, counted in probe_routes + translate_routes + completion_routes + chat_routes
              + audio_routes + embedding_routes]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error})
    app.state.service = service
    return app
