"""`tfspec serve` as a real process on 127.0.0.1: concurrent clients get exactly what `tfspec translate`
gives for the same lines and options, bad input is a JSON error naming its field (never a 500,
fuzzed), overload sheds with 503 + Retry-After, a late request is 504 and its work stops, SIGTERM
drains; a decoder-only export answers the `openai` client with `tfspec generate`'s greedy text."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def request(url: str, body=None, timeout: float = 60):
    """(status, parsed JSON or text, headers) of a GET (``body`` None) or a POST of ``body``
    (bytes as they are, anything else as JSON); error statuses are answers too."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=timeout) as r:
            status, raw, headers = r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        status, raw, headers = e.code, e.read(), e.headers
    try:
        return status, json.loads(raw), headers
    except ValueError:
        return status, raw.decode(), headers


class Server:
    """``tfspec serve DIR flags...`` on a free port, ready when constructed."""

    def __init__(self, directory, *flags, tmp):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url, self.log = f"http://127.0.0.1:{port}", tmp / f"serve-{port}.log"
        self.process = subprocess.Popen([sys.executable, "-m", "tfspec", "serve", str(directory), "--port", str(port),
                                         "--threads", "1", *map(str, flags)], stderr=self.log.open("w"))
        for _ in range(600):
            assert self.process.poll() is None, self.log.read_text()
            try:
                if request(self.url + "/ready", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"not ready in 60s: {self.log.read_text()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tfspec.cli import main

    out = tmp_path_factory.mktemp("serve") / "tiny"
    assert main(["export", "tiny", "-o", str(out), "--no-check", "--seed", "3"]) == 0
    return out


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    s = Server(tiny, "--max-batch-tokens", 4096, tmp=tmp_path_factory.mktemp("log"))
    yield s
    assert s.stop() == 0


def lines(count: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, 1000, rng.integers(1, 30)).tolist() for _ in range(count)]


def test_64_concurrent_clients_get_translates_outputs(tiny, server, cli, tmp_path):
    sources = lines(64)
    sources[5] = []  # an empty line stays empty
    options = {"beam": 2, "alpha": 0.6, "max_extra": 6}
    (tmp_path / "in.txt").write_text("".join(" ".join(map(str, s)) + "\n" for s in sources))
    code, out, err = cli("translate", tiny, tmp_path / "in.txt", "--beam", 2, "--max-extra", 6)
    assert code == 0, err
    want = [[int(t) for t in line.split()] for line in out.splitlines()]
    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(lambda s: request(server.url + "/v1/translate", {"ids": [s], **options}), sources))
    assert [a[0] for a in answers] == [200] * 64
    assert [a[1]["ids"][0] for a in answers] == want
    metrics = request(server.url + "/metrics")[1]
    batched = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
               if line.startswith("tfspec_batch_requests_")}
    assert batched["tfspec_batch_requests_sum"] > batched["tfspec_batch_requests_count"]  # requests shared batches
    assert 'tfspec_requests_total{route="/v1/translate",status="200"}' in metrics
    assert "tfspec_queue_depth" in metrics and "tfspec_tokens_generated_total" in metrics


def test_probes_and_several_lines_in_one_request(server):
    assert request(server.url + "/health")[:2] == (200, {"status": "alive"})
    assert request(server.url + "/ready")[:2] == (200, {"ready": True, "model": "tiny"})
    status, body, _ = request(server.url + "/v1/translate", {"ids": [[5, 6, 7], [], [9]], "beam": 1, "max_extra": 2})
    assert status == 200 and [len(out) <= n + 3 for out, n in zip(body["ids"], (3, 0, 1))] == [True] * 3
    assert body["ids"][1] == [] and "text" not in body  # no tokenizer: ids only


@pytest.mark.parametrize("body,status,param", [
    (b"{not json", 400, "body"),
    (b"\xff\xfe", 400, "body"),
    ({"ids": [[5, "6"]]}, 422, "ids.0.1"),
    ({"ids": [[5, True]]}, 422, "ids.0.1"),
    ({"ids": [[5, 6]], "bem": 2}, 422, "bem"),
    ({"ids": [[5, 6]], "beam": 0}, 422, "beam"),
    ({"ids": [[5, 100000]]}, 422, "ids.0.1"),
    ({"ids": [[5]], "text": ["a"]}, 422, None),
    ({"text": ["a"]}, 422, "text"),
    ({"ids": [[5] * 300]}, 413, "ids.0"),
    ({"ids": [[5]] * 257}, 422, "ids"),
    ([1, 2], 422, None),
])
def test_bad_input_is_a_json_error_naming_the_field(server, body, status, param):
    got, answer, _ = request(server.url + "/v1/translate", body)
    assert got == status and answer["error"]["param"] == param and answer["error"]["message"]


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 50000000\r\n\r\n")  # no body byte: none left unread to reset the socket
        answer = s.makefile("rb")
        status, headers = answer.readline(), {}
        while line := answer.readline().strip():
            name, _, value = line.partition(b":")
            headers[name.lower()] = value.strip()
        body = answer.read(int(headers[b"content-length"]))
    assert status.startswith(b"HTTP/1.1 413") and json.loads(body)["error"]["param"] == "body"


def test_wrong_route_and_model_kind_are_json_errors(server):
    assert request(server.url + "/v2/translate", {})[0] == 404
    status, answer, _ = request(server.url + "/v1/completions", {"model": "tiny", "prompt": "hi"})
    assert status == 400 and "/v1/translate" in answer["error"]["message"]


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
NEAR = st.fixed_dictionaries({}, optional={"ids": st.lists(st.lists(st.integers(-5, 1100), max_size=6), max_size=3),
                                           "text": JSON, "beam": JSON | st.integers(0, 3), "alpha": JSON,
                                           "max_extra": JSON | st.integers(-1, 3), "model": JSON, "prompt": JSON,
                                           "messages": st.lists(st.fixed_dictionaries({"role": JSON, "content": JSON}),
                                                                max_size=2),
                                           "logit_bias": JSON | st.dictionaries(st.text(max_size=6),
                                                                                st.integers(-101, 101), max_size=2),
                                           "stream_options": JSON, "logprobs": JSON | st.integers(-1, 21),
                                           "top_logprobs": JSON, "echo": JSON, "min_tokens": JSON | st.integers(-1, 30),
                                           "top_k": JSON, "presence_penalty": JSON, "ignore_eos": JSON})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=JSON | NEAR, route=st.sampled_from(["/v1/translate", "/v1/completions", "/v1/chat/completions"]))
def test_fuzzed_bodies_never_500(server, body, route):
    status, answer, _ = request(server.url + route, json.dumps(body).encode())  # NaN too: not JSON, 400
    assert status in (200, 400, 413, 422), answer


@pytest.fixture(scope="module")
def small(tiny, tmp_path_factory):
    """A server with a queue of 16 lines (two requests of 8) and a 2-second deadline."""
    s = Server(tiny, "--max-queue", 16, "--timeout", 2, "--max-batch-tokens", 64, tmp=tmp_path_factory.mktemp("log"))
    yield s
    assert s.stop() == 0


def test_overload_sheds_with_503_and_retry_after(small):
    body = {"ids": lines(8, seed=1), "beam": 2, "max_extra": 4}
    with ThreadPoolExecutor(48) as pool:
        answers = list(pool.map(lambda _: request(small.url + "/v1/translate", body), range(48)))
    statuses = [a[0] for a in answers]
    assert set(statuses) == {200, 503}, statuses
    shed = next(a for a in answers if a[0] == 503)
    assert shed[2]["Retry-After"] == "1" and "queue is full" in shed[1]["error"]["message"]
    assert len({json.dumps(a[1]) for a in answers if a[0] == 200}) == 1  # every accepted one decoded alike


def test_late_request_is_504_and_its_work_stops(small):
    heavy = {"ids": [list(range(4, 254))] * 16, "beam": 16, "max_extra": 1024}
    started = time.perf_counter()
    status, answer, _ = request(small.url + "/v1/translate", heavy)
    assert status == 504 and "timeout" in answer["error"]["message"]
    assert 1.9 < time.perf_counter() - started < 4
    started = time.perf_counter()  # the worker dropped the heavy batch: a small request is answered at once
    assert request(small.url + "/v1/translate", {"ids": [[5, 6]], "beam": 1, "max_extra": 2})[0] == 200
    assert time.perf_counter() - started < 1.5


def test_sigterm_drains_in_flight_requests(tiny, tmp_path):
    s = Server(tiny, "--grace", 20, tmp=tmp_path)
    body = {"ids": lines(16, seed=2), "beam": 4, "max_extra": 30}
    with ThreadPoolExecutor(8) as pool:
        running = [pool.submit(request, s.url + "/v1/translate", body) for _ in range(8)]
        time.sleep(0.3)
        s.process.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        ready = request(s.url + "/ready")[0]
        late = request(s.url + "/v1/translate", {"ids": [[5]]})
        answers = [f.result() for f in running]
    assert ready == 503 and late[0] == 503 and late[2]["Retry-After"] == "1"
    assert [a[0] for a in answers] == [200] * 8  # none of the in-flight requests lost
    assert s.process.wait(20) == 0


def test_requests_left_when_the_grace_is_spent_get_503_not_a_cancelled_task(tiny, tmp_path):
    s = Server(tiny, "--grace", 2, "--max-queue", 512, tmp=tmp_path)  # the queue counts lines: 6 x 64
    heavy = {"ids": lines(64, seed=5), "beam": 4, "max_extra": 200}  # ~2 s each on a quiet core
    with ThreadPoolExecutor(6) as pool:
        running = [pool.submit(request, s.url + "/v1/translate", heavy) for _ in range(6)]
        time.sleep(0.3)
        s.process.send_signal(signal.SIGTERM)
        answers = [f.result() for f in running]
    assert {a[0] for a in answers} <= {200, 503}
    cut = [a for a in answers if a[0] == 503]
    assert cut and all("grace" in a[1]["error"]["message"] and a[2]["Retry-After"] == "1" for a in cut)
    assert s.process.wait(10) == 0
    assert "Traceback" not in s.log.read_text()


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """(ONNX export of an imported random tiny Llama with its tokenizer.json, its server)."""
    from test_generate_cli import saved_model
    from tfspec.cli import main

    pytest.importorskip("openai")
    tmp = tmp_path_factory.mktemp("llama")
    model, tok = saved_model("llama", tmp / "hf")
    tok.save(str(tmp / "hf" / "tokenizer.json"))
    assert main(["import", str(tmp / "hf"), "-o", str(tmp / "ours"), "--quiet"]) == 0
    assert main(["export", str(tmp / "ours"), "-o", str(tmp / "onnx"), "--no-check"]) == 0
    s = Server(tmp / "onnx", tmp=tmp)
    yield tmp / "onnx", s
    assert s.stop() == 0


PROMPTS = ["Select the cell and click", "Click", "The help page of the menu shows the list of all the options"]


def test_openai_client_completions_equal_tfspec_generate(llama, cli):
    import openai

    directory, s = llama
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="none")
    models = client.models.list().data
    assert len(models) == 1 and models[0].owned_by == "tfspec"
    name = models[0].id
    want = [cli("generate", directory, "--prompt", p, "--max-new-tokens", 12)[1].rstrip("\n") for p in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:  # prompts of three lengths share batches
        got = list(pool.map(lambda p: client.completions.create(model=name, prompt=p, max_tokens=12, temperature=0),
                            PROMPTS))
    assert [p + c.choices[0].text for p, c in zip(PROMPTS, got)] == want
    assert got[0].usage.completion_tokens > 5 and got[0].choices[0].finish_reason in ("stop", "length")
    chunks = list(client.completions.create(model=name, prompt=PROMPTS[0], max_tokens=12, temperature=0, stream=True))
    assert PROMPTS[0] + "".join(c.choices[0].text for c in chunks) == want[0]
    assert len(chunks) > 3 and chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_openai_client_sampling_stop_and_errors(llama):
    import openai

    client = openai.OpenAI(base_url=llama[1].url + "/v1", api_key="none", max_retries=0)
    name = client.models.list().data[0].id
    draw = [client.completions.create(model=name, prompt=PROMPTS[0], max_tokens=10, temperature=1.5, seed=7)
            for _ in range(2)]
    assert draw[0].choices[0].text == draw[1].choices[0].text  # a seed repeats its draws
    full = client.completions.create(model=name, prompt=PROMPTS[0], max_tokens=12, temperature=0).choices[0].text
    stop = full.strip()[2:4]
    cut = client.completions.create(model=name, prompt=PROMPTS[0], max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].text == full[: full.index(stop)] and cut.choices[0].finish_reason == "stop"
    with pytest.raises(openai.UnprocessableEntityError) as e:
        client.completions.create(model=name, prompt=PROMPTS[0], max_tokens=0)
    assert e.value.body["param"] == "max_tokens"
