"""The HTTP application: each route group's handlers (``probes``, ``translate``, ``completions``,
``chat``) behind one wrapper that answers their ``ApiError`` as JSON and counts and times every
request by route and status."""

from __future__ import annotations

import contextlib
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tfspec.serve import chat, completions, probes, translate
from tfspec.serve.errors import ApiError
from tfspec.serve.service import ServeConfig, Service


def endpoint(service: Service, route: str, handler, counted: bool = True):
    """``handler`` with its errors answered as JSON, counted and timed by route and status."""
    async def run(request: Request) -> Response:
        started = time.perf_counter()
        service.inflight += counted
        try:
            response = await handler(service, request, started)
        except ApiError as e:
            response = e.response()
        finally:
            service.inflight -= counted
        service.metrics.requests.labels(route, str(response.status_code)).inc()
        service.metrics.latency.labels(route).observe(time.perf_counter() - started)
        return response
    return run


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
              for group in (probes, translate, completions, chat) for path, method, handler, counted in group.routes]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error})
    app.state.service = service
    return app
