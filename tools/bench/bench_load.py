"""`tfspec serve` beside llama.cpp's server (llama-cpp-python's ``llama_cpp.server``) under the
same load from an outside load generator, guidellm, on the same model: throughput, time to first
token and inter-token latency percentiles at several request rates, and the saturation point.

    .venv/bin/python tools/bench/bench_load.py --guidellm /path/to/venv/bin/guidellm \\
        --llama-python /path/to/llama-venv/bin/python \\
        [--hidden 512] [--layers 8] [--rates 1,2,4,8] [--seconds 30] [--threads 1] [--out DIR]

The model is a random Llama (seed 0) with a sentencepiece tokenizer trained on the sample
corpus (llama.cpp's converter refuses BPE tokenizers it does not know by their pre-tokenizer's
hash), saved by transformers, then imported and exported by tfspec (``--fused``: the in-place step
graph, what docs/serve.md advises for serving) and converted to a float32
GGUF by llama.cpp's own ``convert_hf_to_gguf.py`` (tools/bench/to_gguf.py; $LLAMA_CPP_SOURCE names its
tree): the same weights at the same precision.
Weights are random, so every request runs to its ``max_tokens`` (guidellm sends ``ignore_eos``
too), as a load test wants.

Each server runs in its own process on the first ``--threads`` cores and guidellm on the next
(``os.sched_setaffinity``; on a machine with no core to spare, nothing is pinned). guidellm is
installed in a venv of its own (it has many dependencies): ``python -m venv V && V/bin/pip
install guidellm==0.8.1``. For each engine guidellm first runs its ``throughput`` profile (all
requests at once: the saturation throughput), then Poisson arrivals at each of ``--rates``;
the table holds output tokens per second, TTFT and ITL p50/p99 and guidellm's error count.

Both engines must do the same work: llama-cpp-python's server by default ends the stream it is
sending as soon as another request arrives (``interrupt_requests``, turned off here) and ignores
``ignore_eos`` (its requests forbid the end-of-sequence token by ``logit_bias``). guidellm counts
the tokens asked for where a server sends no usage, so the table's ``short`` column counts
requests that streamed fewer than 90% of them; any makes the table INVALID (exit status 1).
llama.cpp's own speed is measured last, in a bare process on the server's cores (its C API, one
prompt and its tokens, ``tools/bench/peer_bare.py``), and printed beside its server's single-stream
speed: below 90% of it, the table is INVALID too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_serve import pinned, split_cores
from isolated import Job
from peer_bare import BARE_LIMIT, invalid
from to_gguf import convert


def build(directory: Path, hidden: int, layers: int, positions: int) -> tuple[Path, Path, Path]:
    """(tfspec export, GGUF file, transformers directory) of one random Llama (module docstring)."""
    import sentencepiece
    import torch
    import transformers

    from tfspec.data import read_split, sample_dir

    hf, directory = directory / "hf", directory
    hf.mkdir(parents=True, exist_ok=True)
    lines = [en for en, _ in read_split(sample_dir(), "train")]
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(hf / "tokenizer"),
                                             vocab_size=2000, model_type="bpe", unk_id=0, bos_id=1, eos_id=2,
                                             pad_id=-1, minloglevel=2)
    (hf / "tokenizer.vocab").unlink()
    transformers.LlamaTokenizer.from_pretrained(hf).save_pretrained(hf)  # tokenizer.json beside tokenizer.model
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=2000, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                                      num_hidden_layers=layers, num_attention_heads=max(hidden // 64, 1),
                                      max_position_embeddings=positions, bos_token_id=1, eos_token_id=2)
    transformers.LlamaForCausalLM(config).save_pretrained(hf)
    for command in (["import", hf, "-o", directory / "ours", "--quiet"],
                    ["export", directory / "ours", "-o", directory / "onnx", "--fused", "--no-check"]):
        subprocess.run([sys.executable, "-m", "tfspec", *map(str, command)], check=True, capture_output=True)
    return directory / "onnx", directory / "model.gguf", hf


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(engine: str, args, paths: dict, cores: set[int] | None):
    """The ``engine``'s server (``tfspec`` or ``llama.cpp``) on ``cores``, its URL once it answers."""
    port, log = free_port(), Path(tempfile.mkdtemp()) / f"{engine}.log"
    if engine == "tfspec":
        command = [sys.executable, "-m", "tfspec", "serve", str(paths["onnx"]), "--port", str(port),
                   "--threads", str(args.threads)]
    else:  # one request at a time (llama-cpp-python's server), the model's context for the longest
        command = [args.llama_python, "-m", "llama_cpp.server", "--model", str(paths["gguf"]), "--port", str(port),
                   "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
                   "--n_ctx", str(args.positions), "--model_alias", "hf", "--interrupt_requests", "false"]
    with pinned(cores):
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        for _ in range(1200):
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).status == 200:
                    break
            if process.poll() is not None:
                raise SystemExit(f"{engine} exited:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()


EOS_BIAS = ",extras.body.logit_bias.2=-100"
"""llama.cpp's server ignores ``ignore_eos``: its requests forbid the end-of-sequence token (id 2)
by ``logit_bias`` instead, so that every request of both engines decodes ``--output-tokens``."""


def guidellm(args, engine: str, url: str, profile: list[str], hf: Path, out: Path,
             cores: set[int] | None) -> list[dict]:
    """guidellm's benchmarks of ``profile`` against ``url`` (its JSON report's ``benchmarks``)."""
    data = f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},output_tokens={args.output_tokens}"
    extras = EOS_BIAS if engine == "llama.cpp" else ""
    command = [args.guidellm, "run", "--backend",
               f"kind=openai_http,target={url},request_format=/v1/completions,validate_backend=false{extras}",
               "--profile", *profile, "--constraint", f"kind=max_duration,seconds={args.seconds}",
               "--data", data, "--tokenizer", f"kind=huggingface_auto,model={hf}",
               "--output", f"kind=json,path={out}", "--disable-progress"]
    with pinned(cores):
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"guidellm failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return json.loads(out.read_text())["benchmarks"]


def short(bench: dict, tokens: int) -> int:
    """Requests counted successful that streamed fewer than 90% of ``tokens`` (one event a token).
    guidellm counts a request's asked-for tokens where the server sends no usage: a stream cut
    short (llama-cpp-python's server ends the running stream when another request arrives, unless
    told ``--interrupt_requests false``) would count as a full one."""
    return sum(r["info"]["timings"]["token_iterations"] < 0.9 * tokens for r in bench["requests"]["successful"])


def row(engine: str, bench: dict, tokens: int) -> dict:
    """One table row of a guidellm benchmark: output tokens/s, TTFT and ITL p50/p99 (ms), requests."""
    m, strategy = bench["metrics"], bench["config"]["strategy"]
    pct = lambda name, p: m[name]["successful"]["percentiles"][p]  # noqa: E731
    label = strategy["type_"] + (f"@{strategy['rate']:g}/s" if strategy.get("rate") else "")
    made = bench["scheduler_metrics"]["requests_made"]
    return {"engine": engine, "load": label, "tok_s": m["output_tokens_per_second"]["successful"]["mean"],
            "ttft_p50": pct("time_to_first_token_ms", "p50"), "ttft_p99": pct("time_to_first_token_ms", "p99"),
            "itl_p50": pct("inter_token_latency_ms", "p50"), "itl_p99": pct("inter_token_latency_ms", "p99"),
            "ok": made["successful"], "errors": made["errored"], "incomplete": made["incomplete"],
            "short": short(bench, tokens)}


def table(rows: list[dict]) -> str:
    head = "| engine | load | output tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | ok / errors / cut / short |"
    lines = [head, "|" + " --- |" * 6]
    for r in rows:
        lines.append(f"| {r['engine']} | {r['load']} | {r['tok_s']:.1f} | {r['ttft_p50']:.0f} / {r['ttft_p99']:.0f} "
                     f"| {r['itl_p50']:.1f} / {r['itl_p99']:.1f} | {r['ok']} / {r['errors']} / {r['incomplete']} / {r['short']} |")
    return "\n".join(lines)


def llama_bare(args, gguf: Path, out: Path, cores: set[int] | None) -> float:
    """llama.cpp's own speed, tokens/s: one ``--prompt-tokens`` prompt then ``--output-tokens``
    greedy tokens through its C API in a process that imports nothing else (tools/bench/peer_bare.py
    under ``python -I``, median of its timed runs), on the server's cores: the control its
    server's column is held to."""
    import numpy as np

    prompt = out / "bare-prompt.npy"
    np.save(prompt, np.random.default_rng(0).integers(3, 2000, size=(1, args.prompt_tokens)))
    job = Job("peer_bare", "llama_generate", ("llama_cpp",), {"model": str(gguf), "prompts": {"1": str(prompt)},
                                                              "n": args.output_tokens}, bare=True, python=args.llama_python)
    with pinned(cores):
        seconds = job.run(args.threads)[0]["seconds"][0]
    return args.output_tokens / seconds


def served_alone(rows: list[dict], engine: str) -> float:
    """Tokens/s of one stream of ``engine``'s server: 1000 / its median inter-token latency at the
    lowest Poisson rate (llama-cpp-python's server decodes one request at a time at every load)."""
    lowest = min((r for r in rows if r["engine"] == engine and "@" in r["load"]),
                 key=lambda r: float(r["load"].split("@")[1].removesuffix("/s")))
    return 1000 / lowest["itl_p50"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--guidellm", required=True, help="the guidellm executable (a venv of its own)")
    p.add_argument("--llama-python", help="the python of a venv with llama-cpp-python[server] (omit: tfspec only)")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--positions", type=int, default=1024)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--rates", default="1,2,4,8", help="Poisson request rates (requests/s)")
    p.add_argument("--seconds", type=float, default=30, help="each benchmark's duration")
    p.add_argument("--threads", type=int, default=1, help="each server's threads (and pinned cores)")
    p.add_argument("--out", type=Path, help="where the model and reports go (default: a temporary directory)")
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp())
    onnx, gguf, hf = build(out / "model", args.hidden, args.layers, args.positions)
    engines = ["tfspec"]
    if args.llama_python:
        convert(hf, gguf, "f32")  # llama.cpp's converter run by this interpreter (its torch, transformers)
        engines.append("llama.cpp")
    servers, loader = split_cores(args.threads)
    print(f"server cores {sorted(servers) if servers else 'any'}, guidellm {sorted(loader) if loader else 'any'}; "
          f"{args.prompt_tokens} prompt + {args.output_tokens} output tokens, {args.seconds:g} s per load",
          file=sys.stderr)
    rows = []
    for engine in engines:
        with server(engine, args, {"onnx": onnx, "gguf": gguf}, servers) as url:
            for profile, name in ((["kind=throughput,max_concurrency=32"], "throughput"),
                                  (["kind=poisson,rate=1", "--override", "profile.rate", args.rates], "poisson")):
                report = out / f"{engine}-{name}.json"
                rows += [row(engine, b, args.output_tokens)
                         for b in guidellm(args, engine, url, profile, hf, report, loader)]
        print(table([r for r in rows if r["engine"] == engine]), file=sys.stderr)
    print(table(rows))
    (out / "rows.json").write_text(json.dumps(rows, indent=1))
    if any(r["short"] for r in rows):
        raise SystemExit("INVALID: requests counted successful streamed fewer tokens than asked (column 'short')")
    if args.llama_python:
        bare, alone = llama_bare(args, gguf, out, servers), served_alone(rows, "llama.cpp")
        print(f"llama.cpp bare: {bare:.1f} tok/s (prompt included); its server, one stream (1000 / ITL p50): "
              f"{alone:.1f} tok/s")
        if why := invalid("llama.cpp's server", alone, bare):
            raise SystemExit(why + f" (limit {BARE_LIMIT:.0%}): this table is INVALID, the peer was slowed")


if __name__ == "__main__":
    main()
