"""The HTTP application: routes, errors and limits over one exported model and its ``Batcher``.

Every answer to bad input is a JSON error in OpenAI's shape (``{"error": {"message", "type",
"param", "code"}}``, ``param`` naming the field), so OpenAI clients raise it as their own error
type; a 500 only ever means a bug in tfspec.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tfspec.errors import TfspecError
from tfspec.search import SearchOptions
from tfspec.serve.batcher import Batcher, Job, QueueFull
from tfspec.serve.metrics import Metrics
from tfspec.serve.scheduler import ContinuousBatcher, continuous
from tfspec.serve.schemas import TranslateRequest


@dataclass(frozen=True)
class ServeConfig:
    directory: Path
    max_batch_tokens: int = 8192
    """Source (or prompt) tokens decoded together at most; one larger request goes alone."""
    max_queue: int = 256
    """Requests waiting at most; more are answered 503 with Retry-After."""
    timeout: float = 60.0
    """Seconds from arrival to answer; later: 504, and the request's work is cancelled."""
    threads: int | None = None
    """onnxruntime threads (default: all cores)."""
    max_body: int = 4 * 2**20
    """Bytes in one request body; more: 413."""
    batching: str = "continuous"
    """Decoder-only exports: ``continuous`` (prompts join and leave the running batch between
    steps, where the step graph allows: ``scheduler.continuous``) or ``static`` (a batch runs to
    its end before the next starts; kept to measure the difference)."""


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return JSONResponse({"error": {"message": self.message, "type": kind, "param": self.param, "code": None}},
                            self.status, headers=self.headers)


class Service:
    """The model, its tokenizer and batcher, and the server's state (draining, in flight)."""

    def __init__(self, config: ServeConfig):
        from tfspec.backends.onnx import OnnxModel
        from tfspec.data.codecs import HFCodec, open_codec
        from tfspec.serve.chat import read_chat_template

        self.config = config
        self.model = OnnxModel(config.directory, threads=config.threads)
        self.spec = self.model.spec
        self.decoder_only = self.spec.family == "decoder-only"
        self.codec = open_codec(Path(config.directory), self.spec.vocab)
        self.limit = self.spec.positional.limit
        self.chat = read_chat_template(Path(config.directory)) \
            if self.decoder_only and isinstance(self.codec, HFCodec) else None
        """``/v1/chat/completions``' template: where a tokenizer.json (what templates are written for) has one."""
        self.metrics = Metrics()
        decoder = self.model.decoder()
        if self.decoder_only and config.batching == "continuous" and not continuous(decoder):
            decoder = self.model.decoder(in_place=False)  # rows join and leave over the standard cache only
        self.ragged = getattr(decoder, "takes_masks", False)
        """Prompts of different lengths share a batch (the step graph takes masks)."""
        self.continuous = self.decoder_only and config.batching == "continuous" and continuous(decoder)
        if self.continuous:
            self.batcher = ContinuousBatcher(decoder, config.max_batch_tokens, config.max_queue, self.metrics.batch)
        else:
            self.batcher = Batcher(decoder, self.decoder_only, config.max_batch_tokens, config.max_queue,
                                   self.metrics.batch)
        self.metrics.queue.set_function(lambda: self.batcher.depth)
        self.draining = False
        self.inflight = 0
        self.stopped = asyncio.Event()
        """Set when a drain's grace is spent: what is still in flight answers 503 and is cancelled."""

    async def body(self, request: Request, model):
        """The request body parsed as ``model``: 413 over ``max_body``, 400 if not JSON, 422 if
        it does not fit the model (the first error's field named)."""
        limit = self.config.max_body
        if int(request.headers.get("content-length") or 0) > limit:
            raise ApiError(413, f"the body is over {limit:,} bytes", "body")
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > limit:
                raise ApiError(413, f"the body is over {limit:,} bytes", "body")
        try:
            return model.model_validate_json(bytes(raw))
        except ValidationError as e:
            first = e.errors(include_url=False)[0]
            if first["type"] == "json_invalid":
                raise ApiError(400, f"the body is not JSON: {first['msg']}", "body") from None
            field = ".".join(map(str, first["loc"])) or None
            raise ApiError(422, f"{field or 'body'}: {first['msg']}", field) from None

    async def decode(self, request: Request, sources: list[list[int]], options: SearchOptions, key: tuple,
                     started: float, sink=None) -> list[list[int]]:
        """Queue ``sources`` and wait for their outputs, up to the deadline and while the client
        stays; either way out, the work is cancelled. ``sink`` is given each token as it is
        decoded (one greedy or sampled prompt)."""
        if self.draining:
            raise ApiError(503, "the server is shutting down", headers={"Retry-After": "1"})
        job = Job(sources, options, key, asyncio.get_running_loop().create_future(), sink)
        try:
            self.batcher.submit(job)
        except QueueFull:
            raise ApiError(503, f"the queue is full ({self.config.max_queue} requests); retry shortly",
                           headers={"Retry-After": "1"}) from None
        left = self.config.timeout - (time.perf_counter() - started)
        gone = asyncio.ensure_future(_disconnected(request))
        stopped = asyncio.ensure_future(self.stopped.wait())
        try:
            done, _ = await asyncio.wait({job.future, gone, stopped}, timeout=max(left, 0),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            stopped.cancel()
        if job.future in done:
            outputs = job.future.result()
            self.metrics.generated.inc(sum(map(len, outputs)))
            return outputs
        job.cancelled = True
        if gone in done:
            raise ApiError(499, "the client closed the request")
        if stopped in done:
            raise ApiError(503, "the server stopped before this request finished (its drain's grace was spent); "
                                "cancelled", headers={"Retry-After": "1"})
        raise ApiError(504, f"not answered within the server's timeout ({self.config.timeout:g}s); cancelled")

    def sources(self, body: TranslateRequest) -> list[list[int]]:
        """Source ids with EOS, as ``tfspec translate`` reads its lines; empty lines stay empty."""
        vocab = self.spec.vocab
        if body.text is not None:
            if self.codec is None:
                raise ApiError(422, "this model has no tokenizer: send token ids as 'ids'", "text")
            try:
                sources = [self.codec.encode(line) if line.strip() else [] for line in body.text]
            except TfspecError as e:
                raise ApiError(422, str(e), "text") from None
        else:
            for i, line in enumerate(body.ids):
                bad = next((j for j, t in enumerate(line) if not 0 <= t < vocab.size), None)
                if bad is not None:
                    raise ApiError(422, f"token id {line[bad]} is outside the vocabulary (0..{vocab.size - 1})",
                                   f"ids.{i}.{bad}")
            sources = [line + [vocab.eos_id] if line else [] for line in body.ids]
        field = "text" if body.text is not None else "ids"
        for i, ids in enumerate(sources):
            if self.limit is not None and len(ids) > self.limit:
                raise ApiError(413, f"{len(ids)} tokens (with EOS), more than the model's {self.limit} positions",
                               f"{field}.{i}")
        return sources


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body was read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


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


async def health(service, request, started) -> Response:
    return JSONResponse({"status": "alive"})


async def ready(service, request, started) -> Response:
    if service.draining:
        return JSONResponse({"ready": False, "reason": "draining"}, 503)
    return JSONResponse({"ready": True, "model": service.spec.name})


async def metrics(service, request, started) -> Response:
    return Response(service.metrics.text(), media_type="text/plain; version=0.0.4")


async def translate(service: Service, request: Request, started: float) -> Response:
    body = await service.body(request, TranslateRequest)
    if service.decoder_only:
        raise ApiError(400, f"{service.spec.name} is decoder-only: POST /v1/completions")
    sources = service.sources(body)
    options = SearchOptions(beam=body.beam, alpha=body.alpha, max_extra=body.max_extra,
                            max_length=None if service.limit is None else service.limit - 1)
    outputs = [[] for _ in sources]
    if any(sources):
        outputs = await service.decode(request, sources, options, ("translate", options), started)
    answer = {"ids": outputs}
    if service.codec is not None:
        answer["text"] = [service.codec.decode(out) for out in outputs]
    return JSONResponse(answer)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return ApiError(exc.status_code, exc.detail, headers=exc.headers).response()


def create_app(config: ServeConfig, service: Service | None = None) -> Starlette:
    """The application over ``config.directory`` (its model loaded now, before serving)."""
    from tfspec.serve.chat import routes as chat_routes
    from tfspec.serve.openai import routes as openai_routes

    service = service or Service(config)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        service.batcher.start()
        yield
        service.batcher.stop()

    routes = [Route("/health", endpoint(service, "/health", health, False)),
              Route("/ready", endpoint(service, "/ready", ready, False)),
              Route("/metrics", endpoint(service, "/metrics", metrics, False)),
              Route("/v1/translate", endpoint(service, "/v1/translate", translate), methods=["POST"])]
    routes += [Route(path, endpoint(service, path, handler), methods=[method])
               for path, method, handler in openai_routes + chat_routes]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error})
    app.state.service = service
    return app
