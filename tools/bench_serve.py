"""`tfspec serve` under load, from 127.0.0.1: throughput at saturation against offline
`decode_all` on the same lines, p50/p99 latency at 50% and 90% of that capacity (Poisson
arrivals), and 4x overload (statuses, lost requests, the server's resident memory).

    nice -n 10 .venv/bin/python tools/bench_serve.py [--lines 512] [--seconds 20] [--threads 1]

Each request carries one line (the way a service sees traffic); the offline run decodes all
lines in one `decode_all` call with the same --max-batch-tokens. The client is plain asyncio
(one connection per request, HTTP/1.1), so it costs little of the cores the server uses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

OPTIONS = {"beam": 4, "alpha": 0.6, "max_extra": 10}


async def post(port: int, body: dict) -> tuple[int, float]:
    """(status, seconds) of one POST /v1/translate; status 0 when the connection failed."""
    started, data = time.perf_counter(), json.dumps(body).encode()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/translate HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
        head = await reader.readline()
        await reader.read()
        writer.close()
        return int(head.split()[1]), time.perf_counter() - started
    except (OSError, IndexError, ValueError):
        return 0, time.perf_counter() - started


async def closed_loop(port: int, lines: list, clients: int) -> float:
    """Lines per second with ``clients`` each sending its next line as soon as one is answered."""
    todo = iter(lines)

    async def client():
        for line in todo:
            status, _ = await post(port, {"ids": [line], **OPTIONS})
            assert status == 200, status
    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return len(lines) / (time.perf_counter() - started)


async def open_loop(port: int, lines: list, rate: float, seconds: float) -> list[tuple[int, float]]:
    """Poisson arrivals at ``rate`` per second for ``seconds``: (status, latency) of each."""
    rng, tasks, at = random.Random(0), [], time.perf_counter()
    end = at + seconds
    while at < end:
        at += rng.expovariate(rate)
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        tasks.append(asyncio.ensure_future(post(port, {"ids": [rng.choice(lines)], **OPTIONS})))
    return await asyncio.gather(*tasks)


def rss(pid: int) -> float:
    """Resident memory of ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def offline(directory: Path, lines: list, threads: int, max_batch_tokens: int) -> float:
    from tfspec.backends.onnx import OnnxModel
    from tfspec.evaluate import decode_all
    from tfspec.search import SearchOptions

    model = OnnxModel(directory, threads=threads)
    eos, limit = model.spec.vocab.eos_id, model.spec.positional.max_len
    options = SearchOptions(beam=OPTIONS["beam"], alpha=OPTIONS["alpha"], max_extra=OPTIONS["max_extra"],
                            max_length=limit - 1)
    sources = [line + [eos] for line in lines]
    decode_all(model.decoder(), sources[:32], options, max_batch_tokens, batch_type="tokens")  # warm
    started = time.perf_counter()
    decode_all(model.decoder(), sources, options, max_batch_tokens, batch_type="tokens")
    return len(lines) / (time.perf_counter() - started)


def start(directory: Path, threads: int, *flags) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "tfspec", "serve", str(directory), "--port", str(port),
                                "--threads", str(threads), *map(str, flags)])
    for _ in range(600):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1).status == 200:
                return process, port
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not get ready in 60 s")


def latency(results) -> str:
    ok = sorted(t for s, t in results if s == 200)
    return f"p50 {1000 * np.percentile(ok, 50):.0f} ms, p99 {1000 * np.percentile(ok, 99):.0f} ms ({len(ok)} requests)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, help="an export directory (default: tiny, exported here)")
    p.add_argument("--lines", type=int, default=512)
    p.add_argument("--seconds", type=float, default=20, help="length of each open-loop run")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime threads, offline and served")
    p.add_argument("--max-batch-tokens", type=int, default=2048)
    args = p.parse_args()
    directory = args.dir
    if directory is None:
        directory = Path(tempfile.mkdtemp()) / "tiny"
        subprocess.run([sys.executable, "-m", "tfspec", "export", "tiny", "-o", str(directory), "--no-check"],
                       check=True, capture_output=True)
    rng = np.random.default_rng(0)
    lines = [rng.integers(4, 1000, rng.integers(5, 30)).tolist() for _ in range(args.lines)]
    base = offline(directory, lines, args.threads, args.max_batch_tokens)
    print(f"offline decode_all: {base:.1f} lines/s (beam {OPTIONS['beam']}, {args.threads} thread(s))")
    process, port = start(directory, args.threads, "--max-batch-tokens", args.max_batch_tokens,
                          "--max-queue", 256, "--timeout", 10)
    try:
        asyncio.run(closed_loop(port, lines[:64], 64))  # warm
        capacity = asyncio.run(closed_loop(port, lines, 128))
        print(f"served at saturation (128 clients): {capacity:.1f} lines/s = {capacity / base:.0%} of offline")
        for share in (0.5, 0.9):
            results = asyncio.run(open_loop(port, lines, share * capacity, args.seconds))
            print(f"{share:.0%} of capacity ({share * capacity:.1f}/s): {latency(results)}, "
                  f"statuses {sorted(set(s for s, _ in results))}")
        before = rss(process.pid)
        results = asyncio.run(open_loop(port, lines, 4 * capacity, args.seconds))
        after = rss(process.pid)
        counts = {s: sum(1 for r, _ in results if r == s) for s in sorted({r for r, _ in results})}
        print(f"4x overload ({4 * capacity:.1f}/s for {args.seconds:g}s): statuses {counts}; "
              f"lost (no answer): {counts.get(0, 0)}; {latency(results)}; server RSS {before:.0f} -> {after:.0f} MiB")
    finally:
        process.send_signal(signal.SIGTERM)
        print(f"SIGTERM: exit {process.wait(60)}")


if __name__ == "__main__":
    main()
