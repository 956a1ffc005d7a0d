"""`tfspec serve --workers 2`: two processes behind one port, each with its own model and
queue; together they give `tfspec translate`'s outputs, each counts the requests it answered,
SIGTERM drains both with nothing in flight lost, and a bad export stops at one `error:` line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_serve import Server, lines, request

pytest.importorskip("uvicorn")

COUNTED = 'tfspec_requests_total{route="/v1/translate",status="200"}'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tfspec.cli import main

    out = tmp_path_factory.mktemp("workers") / "tiny"
    assert main(["export", "tiny", "-o", str(out), "--no-check", "--seed", "5"]) == 0
    return out


def served_counts(url: str, tries: int = 60) -> dict[float, float]:
    """Translations answered, by the start time of the worker that answers ``/metrics`` (the
    kernel picks one per connection: asked often enough, each answers)."""
    seen = {}
    for _ in range(tries):
        text = request(url + "/metrics")[1]
        value = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                 if line.startswith((COUNTED, "process_start_time_seconds "))}
        seen[value["process_start_time_seconds"]] = value.get(COUNTED, 0.0)
        if len(seen) == 2:
            break
    return seen


def test_two_workers_answer_as_translate_does_and_drain_on_sigterm(tiny, cli, tmp_path):
    sources = lines(48, seed=4)
    options = {"beam": 2, "alpha": 0.6, "max_extra": 6}
    (tmp_path / "in.txt").write_text("".join(" ".join(map(str, s)) + "\n" for s in sources))
    code, out, err = cli("translate", tiny, tmp_path / "in.txt", "--beam", 2, "--max-extra", 6)
    assert code == 0, err
    want = [[int(t) for t in line.split()] for line in out.splitlines()]

    server = Server(tiny, "--workers", 2, "--grace", 60, "--max-queue", 1024, tmp=tmp_path)  # 8 x 64 lines at once
    try:
        for _ in range(300):  # the first answers once loaded; the second loads after it
            if "2 workers listening" in server.log.read_text():
                break
            time.sleep(0.1)
        with ThreadPoolExecutor(48) as pool:
            answers = list(pool.map(lambda s: request(server.url + "/v1/translate", {"ids": [s], **options}), sources))
        assert [a[0] for a in answers] == [200] * 48
        assert [a[1]["ids"][0] for a in answers] == want
        counts = served_counts(server.url)
        assert len(counts) == 2 and sum(counts.values()) == 48 and min(counts.values()) > 0, counts

        pids = re.search(r"listening on port \d+ \(pids (\d+), (\d+)\)", server.log.read_text()).groups()
        os.kill(int(pids[0]), signal.SIGKILL)  # a worker dies (out of memory, say): another takes its place
        for _ in range(300):
            if "starting another" in server.log.read_text() and len(served_counts(server.url, 8).keys() - counts):
                break
            time.sleep(0.1)
        after = served_counts(server.url)
        assert len(after) == 2 and len(after.keys() & counts.keys()) == 1 and 0.0 in after.values(), (counts, after)

        # in flight for seconds even on a quiet machine, so that the late request meets a draining server
        heavy = {"ids": lines(64, seed=5), "beam": 4, "max_extra": 200}
        with ThreadPoolExecutor(8) as pool:
            running = [pool.submit(request, server.url + "/v1/translate", heavy) for _ in range(8)]
            time.sleep(0.3)
            server.process.send_signal(signal.SIGTERM)
            time.sleep(0.1)
            late = request(server.url + "/v1/translate", {"ids": [[5]]})
            drained = [f.result() for f in running]
        assert late[0] == 503 and late[2]["Retry-After"] == "1"
        assert [a[0] for a in drained] == [200] * 8  # in flight on either worker: none lost
        assert server.process.wait(90) == 0  # at once when none is in flight
    finally:
        server.stop()


def test_a_bad_export_stops_at_one_error_line(tmp_path):
    (tmp_path / "tfspec.json").write_text("{")
    done = subprocess.run([sys.executable, "-m", "tfspec", "serve", str(tmp_path), "--port", "0", "--workers", "2"],
                          capture_output=True, text=True, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "tfspec.json" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
