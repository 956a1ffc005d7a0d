"""Probes and metrics: ``GET /health`` (the process is alive, its decoding thread running),
``GET /ready`` (loaded, not draining, decoding) and ``GET /metrics`` (Prometheus text); none of
them counts as a request in flight."""

from __future__ import annotations

from starlette.responses import JSONResponse, Response

from tfspec.serve.service import DEAD

async def health(service, request, started) -> Response:
    """Liveness: fails once the decoding thread is gone (nothing would be answered: restart)."""
    if not service.batcher.alive:
        return JSONResponse({"status": "dead", "reason": DEAD}, 503)
    return JSONResponse({"status": "alive"})


async def ready(service, request, started) -> Response:
    if service.draining:
        return JSONResponse({"ready": False, "reason": "draining"}, 503)
    if not service.batcher.alive:
        return JSONResponse({"ready": False, "reason": DEAD}, 503)
    return JSONResponse({"ready": True, "model": service.spec.name})


async def metrics(service, request, started) -> Response:
    return Response(service.metrics.text(), media_type="text/plain; version=0.0.4")


routes = [("/health", "GET", health, False), ("/ready", "GET", ready, False), ("/metrics", "GET", metrics, False)]
