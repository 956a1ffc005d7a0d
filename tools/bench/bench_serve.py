"""`tfspec serve` under load, from 127.0.0.1: throughput at saturation against offline
`decode_all` on the same lines, p50/p99 latency at 50% and 90% of that capacity (Poisson
arrivals), and 4x overload (statuses, lost requests, the server's resident memory).

    nice -n 10 .venv/bin/python tools/bench/bench_serve.py [--spec small|tiny] [--lines 512] [--seconds 20] [--threads 1]
    nice -n 10 .venv/bin/python tools/bench/bench_serve.py --batching 4,8 [--hidden 256] [--layers 4]
    nice -n 10 .venv/bin/python tools/bench/bench_serve.py --replicas 2
    nice -n 10 .venv/bin/python tools/bench/bench_serve.py --workers 2 --rounds 3

Each request carries one line (the way a service sees traffic); the offline run decodes all
lines in one `decode_all` call with the same --max-batch-tokens. The client is plain asyncio
(one connection per request, HTTP/1.1), so it costs little of the cores the server uses.

The offline run, each server and the load generator (this process) are processes of their own
(tools/bench/isolated.py says why); where the machine has a core beyond the server's threads, the
server and the offline run are pinned to cores of their own and the load generator to the next
one (``os.sched_setaffinity``), and the tool prints which.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
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

from bandwidth import cpu_name
from isolated import Job

OPTIONS = {"beam": 4, "alpha": 0.6, "max_extra": 10}


async def post(port: int, body: dict, path: str = "/v1/translate") -> tuple[int, float, dict | None]:
    """(status, seconds, answer) of one POST; status 0 when the connection failed."""
    started, data = time.perf_counter(), json.dumps(body).encode()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST %s HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
        head = await reader.readline()
        rest = await reader.read()
        writer.close()
        answer = json.loads(rest.partition(b"\r\n\r\n")[2] or b"null") if b" 200 " in head else None
        return int(head.split()[1]), time.perf_counter() - started, answer
    except (OSError, IndexError, ValueError):
        return 0, time.perf_counter() - started, None


async def closed_loop(port: int | list[int], lines: list, clients: int) -> float:
    """Lines per second with ``clients`` each sending its next line as soon as one is answered
    (to one server, or spread over several: client i talks to port i mod n, the balancer)."""
    todo, ports = iter(lines), port if isinstance(port, list) else [port]

    async def client(i: int):
        for line in todo:
            status, _, _ = await post(ports[i % len(ports)], {"ids": [line], **OPTIONS})
            assert status == 200, status
    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return len(lines) / (time.perf_counter() - started)


async def open_loop(port: int, bodies: list, rate: float, seconds: float, path: str = "/v1/translate") -> list:
    """Poisson arrivals at ``rate`` per second for ``seconds``, each a body drawn from ``bodies``
    (the same draws for the same arguments): (status, latency, answer) of each."""
    rng, tasks, at = random.Random(0), [], time.perf_counter()
    end = at + seconds
    while at < end:
        at += rng.expovariate(rate)
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        tasks.append(asyncio.ensure_future(post(port, rng.choice(bodies), path)))
    return await asyncio.gather(*tasks)


def cpu(pid: int) -> float:
    """CPU seconds ``pid`` has used, all its threads together: what the server costs per line,
    whatever else the machine runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(map(int, fields[11:13])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def rss(pid: int) -> float:
    """Resident memory of ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def offline(threads: int, directory: str, lines: list, max_batch_tokens: int) -> tuple[float, float]:
    """In a worker: (lines per second, CPU seconds per line) of one ``decode_all`` over ``lines``."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.evaluate import decode_all
    from tfspec.search import SearchOptions

    model = OnnxModel(directory, threads=threads)
    eos, limit = model.spec.vocab.eos_id, model.spec.positional.max_len
    options = SearchOptions(beam=OPTIONS["beam"], alpha=OPTIONS["alpha"], max_extra=OPTIONS["max_extra"],
                            max_length=limit - 1)
    sources = [line + [eos] for line in lines]
    decode_all(model.decoder(), sources[:32], options, max_batch_tokens, batch_type="tokens")  # warm
    started, used = time.perf_counter(), time.process_time()
    decode_all(model.decoder(), sources, options, max_batch_tokens, batch_type="tokens")
    return len(lines) / (time.perf_counter() - started), (time.process_time() - used) / len(lines)


def split_cores(server_threads: int) -> tuple[set[int] | None, set[int] | None]:
    """(server cores, load generator cores): where the machine has a core beyond the servers'
    threads, those threads get cores of their own and the load generator the next one, so that
    neither takes the other's; else (None, None): nothing pinned."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) <= server_threads:
        return None, None
    return set(cores[:server_threads]), {cores[server_threads]}


@contextlib.contextmanager
def pinned(cores: set[int] | None):
    """This process, and the processes it starts meanwhile, on ``cores`` (None: unchanged)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores or before)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def start(directory: Path, threads: int, *flags, cores: set[int] | None = None) -> tuple[subprocess.Popen, int]:
    """A `tfspec serve` process on ``cores`` (None: any) and its port, once it is ready."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(tempfile.mkdtemp()) / "serve.log"
    with pinned(cores):
        process = subprocess.Popen([sys.executable, "-m", "tfspec", "serve", str(directory), "--port", str(port),
                                    "--threads", str(threads), *map(str, flags)], stderr=log.open("w"))
    for _ in range(600):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1).status == 200 and (
                    "--workers" not in flags or "workers listening" in log.read_text()):
                return process, port
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the server did not get ready in 60 s")


def latency(results) -> str:
    ok = sorted(t for s, t, _ in results if s == 200)
    return f"p50 {1000 * np.percentile(ok, 50):.0f} ms, p99 {1000 * np.percentile(ok, 99):.0f} ms ({len(ok)} requests)"


def llama(directory: Path, hidden: int, layers: int) -> Path:
    """A random Llama (``hidden`` wide, ``layers`` deep, 256 positions) with a BPE tokenizer
    trained on the sample corpus, imported and exported to ``directory``/onnx: what
    /v1/completions serves (weights are random: greedy runs to ``max_tokens``, as load tests want)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from tfspec.data import read_split, sample_dir

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok.train_from_iterator([en for en, _ in read_split(sample_dir(), "train")],
                            trainers.BpeTrainer(vocab_size=2000, special_tokens=["<unk>", "<s>", "</s>"],
                                                show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden,
                                      intermediate_size=hidden * 8 // 3, num_hidden_layers=layers,
                                      num_attention_heads=hidden // 64, max_position_embeddings=256,
                                      bos_token_id=1, eos_token_id=2)
    transformers.LlamaForCausalLM(config).save_pretrained(directory / "hf")
    tok.save(str(directory / "hf" / "tokenizer.json"))
    for command in (["import", directory / "hf", "-o", directory / "ours", "--quiet"],
                    ["export", directory / "ours", "-o", directory / "onnx", "--no-check"]):
        subprocess.run([sys.executable, "-m", "tfspec", *map(str, command)], check=True, capture_output=True)
    return directory / "onnx"


def compare_batching(directory: Path, rates: list[float], seconds: float, threads: int, max_batch_tokens: int,
                     cores: set[int] | None):
    """Continuous against batch-at-a-time batching under the same Poisson arrivals of greedy
    completions (corpus prompts, max_tokens drawn from 4..64): generated tokens per second of
    wall time (first arrival to last answer) and p50/p99 latency."""
    from tfspec.data import read_split, sample_dir

    rng = random.Random(1)
    bodies = [{"model": "m", "prompt": en, "max_tokens": rng.randint(4, 64), "temperature": 0}
              for en, _ in read_split(sample_dir(), "dev")]
    for rate in rates:  # the two back to back at each rate: a shared machine's load drifts less between them
        for batching in ("static", "continuous"):
            process, port = start(directory, threads, "--batching", batching, "--max-batch-tokens", max_batch_tokens,
                                  "--max-queue", 4096, "--timeout", 600, cores=cores)
            try:
                asyncio.run(open_loop(port, bodies, 20, 1, "/v1/completions"))  # warm
                started = time.perf_counter()
                results = asyncio.run(open_loop(port, bodies, rate, seconds, "/v1/completions"))
                wall = time.perf_counter() - started
                tokens = sum(a["usage"]["completion_tokens"] for s, _, a in results if s == 200)
                print(f"{batching:>10} batching, {rate:g} requests/s: {tokens / wall:.0f} tokens/s, "
                      f"{latency(results)}, statuses {sorted({r[0] for r in results})}", flush=True)
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(60)


def replicas(directory: Path, lines: list, count: int, threads: int, max_batch_tokens: int,
             cores: set[int] | None) -> None:
    """Saturation throughput of ``count`` servers of ``threads`` onnxruntime threads each, the
    load client spreading its connections over them (a balancer's round robin)."""
    servers = [start(directory, threads, "--max-batch-tokens", max_batch_tokens, cores=cores) for _ in range(count)]
    try:
        ports = [port for _, port in servers]
        asyncio.run(closed_loop(ports, lines[:64], 64))  # warm
        rate = asyncio.run(closed_loop(ports, lines, 128))
        print(f"{count} replica(s) x {threads} thread(s), 128 clients: {rate:.1f} lines/s", flush=True)
    finally:
        for process, _ in servers:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


def workers(directory: Path, lines: list, count: int, threads: int, max_batch_tokens: int,
            cores: set[int] | None) -> None:
    """Saturation throughput of ``tfspec serve --workers count --threads threads`` on one port."""
    process, port = start(directory, threads, *(("--workers", count) if count > 1 else ()),
                          "--max-batch-tokens", max_batch_tokens, cores=cores)
    try:
        asyncio.run(closed_loop(port, lines[:64], 64))  # warm (the last worker has loaded: start waits for it)
        rate = asyncio.run(closed_loop(port, lines, 128))
        print(f"--workers {count} --threads {threads}, 128 clients: {rate:.1f} lines/s", flush=True)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, help="an export directory (default: --spec exported here, random weights)")
    p.add_argument("--spec", default="small", help="the spec exported without --dir: small (d_model 256, what users "
                   "serve on CPUs) or tiny (d_model 64, where HTTP's fixed cost per request shows most)")
    p.add_argument("--lines", type=int, default=512)
    p.add_argument("--seconds", type=float, default=20, help="length of each open-loop run")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime threads, offline and served")
    p.add_argument("--max-batch-tokens", type=int, default=2048)
    p.add_argument("--batching", metavar="RATES", help="instead: continuous vs static batching of completions at "
                   "these Poisson rates (comma-separated requests/s) on a random Llama (--hidden, --layers)")
    p.add_argument("--replicas", type=int, help="instead: saturation of 1 server x N threads against N servers "
                   "x 1 thread (translate, load spread over them)")
    p.add_argument("--workers", type=int, help="instead: saturation of 1 server x N threads against --workers N "
                   "(N processes on one port, 1 thread each)")
    p.add_argument("--clients", type=int, default=128, help="closed-loop clients at saturation")
    p.add_argument("--rounds", type=int, default=1, help="--workers: times each setting runs, alternated")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args()
    server, client = split_cores(args.replicas or args.workers or args.threads)
    print(f"{cpu_name()}; " + (f"server(s) and the offline run pinned to cores {sorted(server)}, the load generator "
                               f"to core {sorted(client)[0]}" if server else
                               f"not pinned: {len(os.sched_getaffinity(0))} cores, none beyond the servers' threads"))
    if args.batching:
        directory = args.dir or llama(Path(tempfile.mkdtemp()), args.hidden, args.layers)
        os.sched_setaffinity(0, client or os.sched_getaffinity(0))  # this process is the load generator
        return compare_batching(directory, [float(r) for r in args.batching.split(",")], args.seconds, args.threads,
                                args.max_batch_tokens, server)
    directory = args.dir
    if directory is None:
        directory = Path(tempfile.mkdtemp()) / args.spec
        subprocess.run([sys.executable, "-m", "tfspec", "export", args.spec, "-o", str(directory), "--no-check"],
                       check=True, capture_output=True)
    rng = np.random.default_rng(0)
    lines = [rng.integers(4, 1000, rng.integers(5, 30)).tolist() for _ in range(args.lines)]
    os.sched_setaffinity(0, client or os.sched_getaffinity(0))  # this process is the load generator
    if args.replicas:
        replicas(directory, lines, 1, args.replicas, args.max_batch_tokens, server)
        return replicas(directory, lines, args.replicas, 1, args.max_batch_tokens, server)
    if args.workers:
        for _ in range(args.rounds):  # alternated: a shared machine's load drifts less between the two
            workers(directory, lines, 1, args.workers, args.max_batch_tokens, server)
            workers(directory, lines, args.workers, 1, args.max_batch_tokens, server)
        return None
    with pinned(server):  # in a process of its own, on the server's cores
        (base, base_cpu), _ = Job("bench_serve", "offline", ("onnxruntime",), {
            "directory": str(directory), "lines": lines, "max_batch_tokens": args.max_batch_tokens}).run(args.threads)
    print(f"offline decode_all: {base:.1f} lines/s, {1000 * base_cpu:.2f} CPU ms per line "
          f"(beam {OPTIONS['beam']}, {args.threads} thread(s))")
    requests = [{"ids": [line], **OPTIONS} for line in lines]
    process, port = start(directory, args.threads, "--max-batch-tokens", args.max_batch_tokens,
                          "--max-queue", 256, "--timeout", 10, cores=server)
    try:
        asyncio.run(closed_loop(port, lines[:64], 64))  # warm
        used = cpu(process.pid)
        capacity = asyncio.run(closed_loop(port, lines, args.clients))
        served_cpu = (cpu(process.pid) - used) / len(lines)
        print(f"served at saturation ({args.clients} clients): {capacity:.1f} lines/s = {capacity / base:.0%} of "
              f"offline; server {1000 * served_cpu:.2f} CPU ms per line = offline's x{served_cpu / base_cpu:.2f}")
        for share in (0.5, 0.9):
            results = asyncio.run(open_loop(port, requests, share * capacity, args.seconds))
            print(f"{share:.0%} of capacity ({share * capacity:.1f}/s): {latency(results)}, "
                  f"statuses {sorted(set(r[0] for r in results))}")
        before = rss(process.pid)
        results = asyncio.run(open_loop(port, requests, 4 * capacity, args.seconds))
        after = rss(process.pid)
        counts = {s: sum(1 for r in results if r[0] == s) for s in sorted({r[0] for r in results})}
        print(f"4x overload ({4 * capacity:.1f}/s for {args.seconds:g}s): statuses {counts}; "
              f"lost (no answer): {counts.get(0, 0)}; {latency(results)}; server RSS {before:.0f} -> {after:.0f} MiB")
    finally:
        process.send_signal(signal.SIGTERM)
        print(f"SIGTERM: exit {process.wait(60)}")


if __name__ == "__main__":
    main()
