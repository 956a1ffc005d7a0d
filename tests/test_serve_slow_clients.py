"""Slow clients against `--max-connections` (tfspec/serve/connections.py): sockets that send
nothing, headers trickled a line at a time, bodies trickled a byte at a time. None holds a
connection for ever: each is closed at its deadline (`--header-timeout`, `--body-timeout`)
however it trickles, and a connection opened over the limit closes the one idle the longest, so
a client that sends its request is answered at once while slow ones hold every slot. All on
127.0.0.1; every loop is bounded."""

from __future__ import annotations

import resource
import select
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("starlette")
pytest.importorskip("transformers")

PROMPT = "Select the cell and click"
DEADLINE = 1.0
"""--header-timeout and --body-timeout of the in-process server."""
HEADERS = [b"GET /health HTTP/1.1\r\n"] + [b"X-Slow: 1\r\n"] * 1000
"""A request whose headers never end."""


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from serve_inprocess import chat_export

    return chat_export(tmp_path_factory.mktemp("slow"))[0]


@pytest.fixture
def served(export):
    from serve_inprocess import InProcess
    from tfspec.serve.service import ServeConfig

    s = InProcess(ServeConfig(export, threads=1, max_connections=4, header_timeout=DEADLINE, body_timeout=DEADLINE))
    s.address = ("127.0.0.1", int(s.url.rsplit(":", 1)[1]))
    yield s
    s.stop()


def readable(sock: socket.socket, seconds: float) -> bool:
    """Whether ``sock`` has data (or its end) within ``seconds``: poll, not select, which
    refuses descriptors past 1,024 (the test holding 1,000 idle sockets opens them)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(seconds * 1000))


def trickle(address, chunks: list[bytes], every: float, limit: float) -> tuple[float | None, bytes]:
    """A slow client: ``chunks`` sent one every ``every`` seconds. (Seconds until the server
    closed the connection, None if still open after ``limit``; what it answered.)"""
    started, answer = time.monotonic(), b""
    with socket.create_connection(address, timeout=5) as sock:
        for chunk in chunks:
            if time.monotonic() - started > limit:
                return None, answer
            if readable(sock, every):
                try:
                    data = sock.recv(65536)
                except ConnectionError:
                    data = b""
                if not data:
                    return time.monotonic() - started, answer
                answer += data
            try:
                sock.sendall(chunk)
            except OSError:  # closed under it
                return time.monotonic() - started, answer
    return None, answer


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (which sends nothing) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def health_within(url: str, seconds: float) -> int:
    from test_serve import request

    started = time.monotonic()
    status = request(url + "/health", timeout=seconds)[0]
    assert time.monotonic() - started < seconds
    return status


def test_idle_sockets_never_keep_a_client_out_and_close_at_the_header_deadline(served):
    from test_serve import request

    idle = [socket.create_connection(served.address, timeout=5) for _ in range(8)]  # twice --max-connections
    try:
        time.sleep(0.2)  # accepted
        assert health_within(served.url, 1.0) == 200
        assert request(served.url + "/v1/completions", {"model": "m", "prompt": PROMPT, "max_tokens": 2})[0] == 200
        assert all(closed_within(s, DEADLINE + 1) for s in idle)
    finally:
        for s in idle:
            s.close()


def test_headers_trickled_a_line_at_a_time_are_cut_at_the_header_deadline(served):
    """Five clients sending a header line every 0.2 s, one more than --max-connections: a
    request is answered meanwhile, and each trickler is closed by its deadline."""
    with ThreadPoolExecutor(5) as pool:
        slow = [pool.submit(trickle, served.address, HEADERS, 0.2, DEADLINE + 4) for _ in range(5)]
        time.sleep(0.5)
        assert health_within(served.url, 1.0) == 200
        closed = [f.result()[0] for f in slow]
    assert all(t is not None and t < DEADLINE + 1 for t in closed), closed


def test_a_body_trickled_a_byte_at_a_time_is_cut_whatever_reads_it(served):
    """A body that a route reads is cut at --body-timeout (408); one a route does not read (a
    GET's) is cut at the next request's header deadline, though its bytes keep coming. Four
    such clients fill --max-connections with requests in progress; once cut, requests are served."""
    from test_serve import request

    post = [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"] + [b"x"] * 1000
    get = [b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"] + [b"x"] * 1000
    with ThreadPoolExecutor(4) as pool:
        slow = [pool.submit(trickle, served.address, chunks, 0.1, DEADLINE + 4) for chunks in [post] * 3 + [get]]
        outcomes = [f.result() for f in slow]
    assert all(t is not None and t < DEADLINE + 1.5 for t, _ in outcomes), outcomes
    assert all(answer.startswith(b"HTTP/1.1 408") for _, answer in outcomes[:3]), outcomes
    assert outcomes[3][1].startswith(b"HTTP/1.1 200"), outcomes
    assert request(served.url + "/v1/completions", {"model": "m", "prompt": PROMPT, "max_tokens": 2})[0] == 200


def test_a_thousand_idle_sockets_and_a_trickler_leave_health_and_completions_answered(export, tmp_path):
    """`tfspec serve` with its defaults (--max-connections 1000) holding 1,000 idle sockets
    and a client trickling its headers still answers /health within 1 s, and a completion
    within its normal time (three times the slowest of five without them, or a second more)."""
    from test_serve import Server, request

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200  # this process holds the sockets too
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"this process may open {hard} files; the test needs {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    server = Server(export, tmp=tmp_path)
    address = ("127.0.0.1", int(server.url.rsplit(":", 1)[1]))
    ask = {"model": "m", "prompt": PROMPT, "max_tokens": 8, "temperature": 0}

    def completion() -> float:
        started = time.monotonic()
        assert request(server.url + "/v1/completions", ask, timeout=30)[0] == 200
        return time.monotonic() - started
    idle = []
    try:
        normal = max(completion() for _ in range(5))
        idle = [socket.create_connection(address, timeout=5) for _ in range(1000)]
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(trickle, address, HEADERS, 0.3, 6)
            time.sleep(1.0)  # all accepted
            assert health_within(server.url, 1.0) == 200
            assert completion() < max(3 * normal, normal + 1)
            slow.result()
    finally:
        for s in idle:
            s.close()
        assert server.stop() == 0
