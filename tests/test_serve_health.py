"""Exhaustion and health of `tfspec serve`: a dead decoding thread makes /ready and /health
fail (and refuses work), a 500 is counted in /metrics, the queue counts prompts and a cancelled
job leaves it at once, a body sent too slowly is cut off (slowloris), busy connections over
the limit are refused, and `--port 0` prints the port it bound."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("transformers")

PROMPT = "Select the cell and click"


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from serve_inprocess import chat_export

    return chat_export(tmp_path_factory.mktemp("health"))[0]


@pytest.fixture
def served(export):
    from serve_inprocess import InProcess
    from tfspec.serve.service import ServeConfig

    s = InProcess(ServeConfig(export, threads=1, max_queue=2, body_timeout=0.5))
    yield s
    s.stop()


def test_a_dead_decoding_thread_fails_the_probes_and_refuses_work(served):
    from test_serve import request

    assert request(served.url + "/ready")[0] == 200 and request(served.url + "/health")[0] == 200
    served.service.batcher.stop()  # as if the thread had died
    ready, health = request(served.url + "/ready"), request(served.url + "/health")
    assert ready[0] == 503 and ready[1]["ready"] is False and "decoding thread" in ready[1]["reason"]
    assert health[0] == 503 and health[1]["status"] == "dead"
    status, answer, headers = request(served.url + "/v1/completions", {"model": "m", "prompt": PROMPT}, timeout=5)
    assert status == 503 and "decoding thread" in answer["error"]["message"]


def test_a_500_is_counted_in_metrics(served, monkeypatch):
    from test_serve import request

    def boom(text):
        raise RuntimeError("secret detail")
    monkeypatch.setattr(served.service.codec, "prompt", boom)
    status, answer, _ = request(served.url + "/v1/completions", {"model": "m", "prompt": PROMPT})
    assert status == 500 and answer["error"]["type"] == "server_error"
    assert "secret detail" not in answer["error"]["message"]  # logged, not told
    assert 'tfspec_requests_total{route="/v1/completions",status="500"} 1.0' in request(served.url + "/metrics")[1]


def test_the_queue_counts_prompts_and_frees_a_cancelled_slot_at_once():
    from tfspec.search import SearchOptions
    from tfspec.serve.batcher import Batcher, Job, QueueFull

    loop = asyncio.new_event_loop()
    batcher = Batcher(None, True, 4096, 4)  # never started: the queue alone
    job = lambda n: Job([[1, 2]] * n, SearchOptions(), (), loop.create_future())  # noqa: E731
    three = job(3)
    batcher.submit(three)
    with pytest.raises(QueueFull):
        batcher.submit(job(2))
    assert batcher.depth == 3
    batcher.cancel(three)
    assert batcher.depth == 0
    batcher.submit(job(4))
    loop.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the bug's traceback, shown
def test_a_dying_decoding_thread_answers_what_waits_at_once():
    from tfspec.search import SearchOptions
    from tfspec.serve.batcher import Batcher, Job, Stopped

    loop = asyncio.new_event_loop()
    batcher = Batcher(None, True, 4096, 4)
    job = Job([[1, 2]], SearchOptions(), (), loop.create_future())
    batcher.submit(job)
    batcher._next = lambda: 1 / 0  # a bug in the decoding thread
    batcher.start()
    try:
        with pytest.raises(Stopped):
            loop.run_until_complete(asyncio.wait_for(job.future, 5))
    finally:
        loop.close()
    batcher.thread.join(5)
    assert not batcher.alive and batcher.depth == 0


def test_more_prompts_than_the_queue_holds_is_413(served):
    from test_serve import request

    status, answer, _ = request(served.url + "/v1/completions", {"model": "m", "prompt": [PROMPT] * 3})
    assert status == 413 and answer["error"]["param"] == "prompt" and "--max-queue" in answer["error"]["message"]


def test_a_body_sent_too_slowly_is_cut_off(served):
    host, port = served.url.removeprefix("http://").split(":")
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"model\"")
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408") and b'"param":"body"' in answer.replace(b" ", b"")
    assert time.perf_counter() - started < 5


def test_port_0_prints_the_port_it_bound(export, tmp_path):
    from test_serve import request

    log = tmp_path / "serve.log"
    process = subprocess.Popen([sys.executable, "-m", "tfspec", "serve", str(export), "--port", "0", "--threads", "1"],
                               stderr=log.open("w"))
    try:
        for _ in range(300):
            found = re.search(r"on http://127\.0\.0\.1:(\d+)", log.read_text())
            if found or process.poll() is not None:
                break
            time.sleep(0.1)
        assert found and int(found.group(1)) != 0, log.read_text()
        assert request(f"http://127.0.0.1:{found.group(1)}/ready")[0] == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0


def test_connections_over_max_connections_are_refused_at_once_while_all_are_busy(export, tmp_path):
    """Connections whose requests are in progress (here: headers sent, the body awaited) hold
    ``--max-connections``: a request on one more is answered 503 at once, and once they close
    requests are served again. The 503 says so as every refusal does (JSON, Retry-After). Idle
    connections never hold it (``test_serve_slow_clients``)."""
    from test_serve import Server, request

    server = Server(export, "--max-connections", 3, tmp=tmp_path)
    host, port = server.url.removeprefix("http://").split(":")
    try:
        busy = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
        for s in busy:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        time.sleep(0.3)  # read by the server's event loop
        refused = request(server.url + "/v1/completions", {"model": "m", "prompt": PROMPT, "max_tokens": 2})
        for s in busy:
            s.close()
        time.sleep(0.3)
        served = request(server.url + "/v1/completions", {"model": "m", "prompt": PROMPT, "max_tokens": 2})
    finally:
        assert server.stop() == 0
    assert refused[0] == 503 and served[0] == 200
    assert refused[2]["Retry-After"] == "1" and "--max-connections" in refused[1]["error"]["message"]
