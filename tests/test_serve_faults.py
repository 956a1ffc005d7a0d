"""Faults and hostile load on `tfspec serve` (the command line, a process of its own), on an
imported random tiny Llama: a worker killed mid-stream (`--workers 2`) cuts only its own
streams while the other worker and the supervisor go on, with no 500 for later requests; one
request of 256 prompts is answered whole, each prompt as it is answered alone; a huge prompt is
413 naming it; the server's resident memory stays flat over repeated rounds of requests.
(A client leaving mid-stream frees its row: test_serve_streams; SIGTERM under load: test_serve
and test_serve_workers; slow bodies: test_serve_health.)"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_serve import Server, request

pytest.importorskip("starlette")

PROMPT = "Select the cell and click"
STREAM = {"model": "m", "prompt": PROMPT, "max_tokens": 50, "ignore_eos": True, "temperature": 0, "stream": True}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from serve_inprocess import llama_export

    return llama_export(tmp_path_factory.mktemp("llama"))


def started(pid: int) -> float:
    """A process's start time as prometheus_client's ``process_start_time_seconds`` gives it."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        ticks = float(f.read().split(b")")[-1].split()[19])
    with open("/proc/stat", "rb") as f:
        boot = next(float(line.split()[1]) for line in f if line.startswith(b"btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def worker_of(conn: http.client.HTTPConnection, pids: list[int]) -> int:
    """The pid of the worker that answers on ``conn`` (its /metrics' start time)."""
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    start = float(re.search(r"^process_start_time_seconds (\S+)", text, re.M).group(1))
    return min(pids, key=lambda pid: abs(started(pid) - start))


def test_a_worker_killed_mid_stream_cuts_only_its_streams(llama, tmp_path):
    server = Server(llama, "--workers", 2, tmp=tmp_path)
    try:
        for _ in range(600):  # the first answers once loaded; the second loads after it
            if found := re.search(r"listening on port \d+ \(pids (\d+), (\d+)\)", server.log.read_text()):
                break
            time.sleep(0.1)
        pids = [int(p) for p in found.groups()]
        host, port = server.url.removeprefix("http://").split(":")
        conns = {pid: [] for pid in pids}
        while len(conns[pids[0]]) < 2 or not conns[pids[1]]:  # connections on each worker (the kernel picks)
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            conns[worker_of(conn, pids)].append(conn)
        (busy, doomed), survivor = conns[pids[0]][:2], conns[pids[1]][0]
        heavy = {"model": "m", "prompt": [PROMPT] * 256, "max_tokens": 50, "ignore_eos": True, "temperature": 0}
        busy.request("POST", "/v1/completions", json.dumps(heavy), {"Content-Type": "application/json"})
        time.sleep(0.1)  # the heavy request decodes on the doomed worker (~1 s quiet): its stream is slow enough to cut
        streams = []
        for conn in (doomed, survivor):
            conn.request("POST", "/v1/completions", json.dumps(STREAM), {"Content-Type": "application/json"})
            streams.append(conn.getresponse())
            assert streams[-1].status == 200 and streams[-1].readline().startswith(b"data:")
        os.kill(pids[0], signal.SIGKILL)
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            streams[0].read()  # cut: the client sees its stream end without [DONE], never a 200 that lies
        assert streams[1].read().decode().rstrip().endswith("data: [DONE]")  # the other worker's goes on
        with ThreadPoolExecutor(8) as pool:
            later = list(pool.map(lambda _: request(server.url + "/v1/completions",
                                                    {"model": "m", "prompt": PROMPT, "max_tokens": 3})[0], range(24)))
        assert later == [200] * 24
        for _ in range(600):
            if "starting another" in server.log.read_text():
                break
            time.sleep(0.1)
        assert "starting another" in server.log.read_text()
    finally:
        assert server.stop() == 0


@pytest.fixture(scope="module")
def served(llama, tmp_path_factory):
    s = Server(llama, tmp=tmp_path_factory.mktemp("faults"))
    yield s
    assert s.stop() == 0


def test_256_prompts_in_one_request_are_answered_whole(served):
    prompts = [" ".join(PROMPT.split()[: 1 + i % 5]) + f" {i}" for i in range(256)]
    status, answer, _ = request(served.url + "/v1/completions",
                                {"model": "m", "prompt": prompts, "max_tokens": 4, "temperature": 0}, timeout=300)
    assert status == 200 and [c["index"] for c in answer["choices"]] == list(range(256))
    for i in (0, 101, 255):  # each as it is answered alone
        alone = request(served.url + "/v1/completions", {"model": "m", "prompt": prompts[i], "max_tokens": 4,
                                                           "temperature": 0})[1]
        assert answer["choices"][i]["text"] == alone["choices"][0]["text"]
    assert request(served.url + "/health")[0] == 200


def test_a_huge_prompt_is_413_naming_it(served):
    status, answer, _ = request(served.url + "/v1/completions", {"model": "m", "prompt": "word " * 19_000})
    assert status == 413 and answer["error"]["param"] == "prompt"
    status, answer, _ = request(served.url + "/v1/completions", {"model": "m", "prompt": ["hi", "word " * 19_000]})
    assert status == 413 and answer["error"]["param"] == "prompt.1"


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) * 1024


def test_memory_stays_flat_over_repeated_requests(served):
    bodies = [{"model": "m", "prompt": PROMPT, "max_tokens": 1 + i % 20, "temperature": (i % 3) / 2,
               "stream": i % 4 == 0, "logprobs": 2 if i % 5 == 0 else None, "seed": i} for i in range(48)]

    def round_():
        with ThreadPoolExecutor(12) as pool:
            assert set(pool.map(lambda b: request(served.url + "/v1/completions", b)[0], bodies)) == {200}
    for _ in range(2):  # warm: onnxruntime's arena and the allocator reach their working sizes
        round_()
    before = rss(served.process.pid)
    for _ in range(6):
        round_()
    assert rss(served.process.pid) - before < 16 * 2**20, (before, rss(served.process.pid))
