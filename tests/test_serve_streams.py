"""Streamed completions of `tfspec serve` (in this process, tests/serve_inprocess.py): admission
is decided before the first byte (a full queue or a drain answers 503 + Retry-After, never a 200
whose stream carries the error), and a stream counts as in flight until its last chunk, so a
drain waits for it and its metrics are recorded when it ends."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("starlette")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from serve_inprocess import InProcess, chat_export
    from tfspec.serve.service import ServeConfig

    directory, _ = chat_export(tmp_path_factory.mktemp("streams"))
    s = InProcess(ServeConfig(directory, threads=1, max_queue=1))
    yield s
    s.stop()


def opened(url: str, body: dict, timeout: float = 30):
    """The response to a POST of ``body`` as JSON, error statuses included, not yet read."""
    try:
        return urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode()), timeout=timeout)
    except urllib.error.HTTPError as e:
        return e


def post(url: str, body: dict, timeout: float = 30) -> tuple[int, dict, str]:
    """(status, headers with lower-case names, body text) of a POST, read to its end."""
    with opened(url, body, timeout) as r:
        return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()


STREAM = {"model": "gpt2", "prompt": "Select the cell", "max_tokens": 8, "temperature": 0, "stream": True}


def test_streams_meet_a_full_queue_and_a_drain_with_503_before_any_byte(served):
    served.slowed.delay = 0.05  # one step outlasts the 8 arrivals: one runs, one waits, the rest are shed
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: post(served.url + "/v1/completions", STREAM), range(8)))
        served.service.draining = True
        drained = post(served.url + "/v1/completions", STREAM)
    finally:
        served.service.draining, served.slowed.delay = False, 0.0
    statuses = sorted(a[0] for a in answers)
    assert set(statuses) == {200, 503}, statuses
    for status, headers, text in answers:
        if status == 503:
            assert headers["retry-after"] == "1" and "queue is full" in json.loads(text)["error"]["message"]
        else:
            assert text.endswith("data: [DONE]\n\n") and '"error"' not in text
    assert drained[0] == 503 and drained[1]["retry-after"] == "1" and "shutting down" in drained[2]


def counted(service, route: str, status: str) -> float:
    return service.metrics.requests.labels(route, status)._value.get()


def test_a_stream_is_in_flight_until_its_last_chunk(served):
    service = served.service
    before = counted(service, "/v1/completions", "200")
    served.slowed.delay = 0.03
    try:
        with opened(served.url + "/v1/completions", STREAM | {"max_tokens": 20}) as r:
            lines = (line.decode().rstrip("\n") for line in r)
            first = next(line for line in lines if line.startswith("data:"))
            open_inflight = service.inflight
            started = time.perf_counter()
            rest = [line for line in lines if line.startswith("data:")]
            took = time.perf_counter() - started
    finally:
        served.slowed.delay = 0.0
    assert r.status == 200 and json.loads(first.removeprefix("data: "))["choices"]
    assert open_inflight == 1 and rest[-1] == "data: [DONE]"
    for _ in range(50):  # the response's end reaches the client a moment before the server's bookkeeping
        if service.inflight == 0:
            break
        time.sleep(0.01)
    assert service.inflight == 0 and counted(service, "/v1/completions", "200") == before + 1
    assert took > 0.1  # the stream stayed open while the later tokens were decoded


def test_a_drain_waits_for_an_open_stream(served):
    from serve_inprocess import InProcess
    from tfspec.serve.service import ServeConfig

    s = InProcess(ServeConfig(served.service.config.directory, threads=1), grace=2)  # uvicorn cuts after 0.5 s
    s.slowed.delay = 0.03
    try:
        with opened(s.url + "/v1/completions", STREAM | {"max_tokens": 30, "ignore_eos": True}) as r:
            lines = (line.decode().rstrip("\n") for line in r)
            next(line for line in lines if line.startswith("data:"))
            s.drain()  # SIGTERM: the server stops once nothing is in flight
            rest = [line for line in lines if line.startswith("data:")]
        s.thread.join(10)
    finally:
        s.stop()
    assert rest[-1] == "data: [DONE]" and len(rest) > 5 and not s.thread.is_alive()


def test_a_stream_whose_client_leaves_is_no_longer_in_flight(served):
    service = served.service
    served.slowed.delay = 0.03
    try:
        r = opened(served.url + "/v1/completions", STREAM | {"max_tokens": 60, "ignore_eos": True})
        next(line for line in r if line.startswith(b"data:"))
        assert service.inflight == 1
        r.close()  # the client goes away mid-stream
        for _ in range(200):
            if service.inflight == 0:
                break
            time.sleep(0.01)
        steps = served.slowed.steps
        time.sleep(0.3)
        assert served.slowed.steps - steps <= 1  # its row left the batch (at most the step under way ends)
    finally:
        served.slowed.delay = 0.0
    assert service.inflight == 0 and service.batcher.depth == 0
