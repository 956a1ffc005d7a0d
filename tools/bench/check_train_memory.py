"""`tfspec report --train` against the measured peak of real training steps on the CPU.

Each case (spec, DDP on one process or FSDP on two under torchrun, with or without activation
checkpointing) runs in its own fresh process: it builds the model, wraps it as `tfspec train`
does (backends/torch/training/sharding.py), and runs three Adam steps on one fixed batch.

How the CPU peak is measured: the resident set's high-water mark (VmHWM) over a baseline taken
after the imports and the process group, reset first through /proc/self/clear_refs. glibc
keeps freed memory in its heap unless large blocks are mapped; the workers run with
MALLOC_MMAP_THRESHOLD_=65536, so every tensor above 64 KiB is its own mapping, returned to the
system when freed, and the resident set follows the live tensors (the PyTorch profiler's memory
view records allocations per op but no peak of live CPU memory; CUDA's max_memory_allocated has
no CPU twin). What the estimate leaves out (Python objects, gloo's buffers, small tensors below
the threshold) is part of the measured number.

    python tools/bench/check_train_memory.py            # every spec x 4 cases, estimate vs measured
    python tools/bench/check_train_memory.py --specs rotary-gqa sliding --lengths 512 1024 2048
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

TAKES = "~10 minutes (all five specs)"
"""How long a run takes (tools/README.md lists it)."""
ROOT = Path(__file__).resolve().parents[2]
SPECS = {  # spec file, batch rows, length: different shapes, one mixture of experts
    "small": ("specs/small.yaml", 8, 64),
    "tiny": ("specs/tiny.yaml", 16, 64),
    "gpt2": ("specs/zoo/gpt2.yaml", 2, 64),
    "bert-base": ("specs/zoo/bert-base.yaml", 4, 64),
    "moe": ("moe", 8, 64),
    "rotary-gqa": ("rotary-gqa", 2, 1024),
    "sliding": ("sliding", 2, 1024),
    "latent": ("latent", 2, 1024),
    "enc-dec": ("enc-dec", 2, 512),
}
CASES = [("ddp", 1, False), ("ddp", 1, True), ("fsdp", 2, False), ("fsdp", 2, True)]


def load(name: str):
    """A shipped spec; the mixture of experts (`small`'s decoder-only sibling with 4 experts, top
    2); a Llama-shaped rotary decoder with grouped-query attention at 1,024 tokens, where an
    L x L term would dominate if the estimate counted one for the fused kernel; its Mistral-
    shaped sibling with a 256-token sliding window; latent attention; or `small`, the
    encoder-decoder, with positions for 2,048 tokens."""
    from tfspec.spec import Spec, load_spec

    if name in SPECS and SPECS[name][0].endswith(".yaml"):
        return load_spec(ROOT / SPECS[name][0])
    if name == "enc-dec":  # small, its sinusoids long enough for 2,048 tokens
        data = load_spec(ROOT / "specs/small.yaml").model_dump(exclude_none=True)
        return Spec.model_validate(data | {"name": name, "positional": data["positional"] | {"max_len": 2048}})
    ffn = {"kind": "moe", "experts": 4, "top_k": 2, "d_ff": 512} if name == "moe" else "ffn"
    attention = {"sliding": {"kind": "restricted_self_attention", "r": 255, "causal": True},
                 "latent": {"kind": "latent_attention", "kv_lora_rank": 64, "qk_nope_head_dim": 48,
                            "qk_rope_head_dim": 16, "v_head_dim": 64}}.get(name, "causal_self_attention")
    data = {"name": name, "family": "decoder-only", "vocab": 8000, "d_model": 256, "heads": 4, "d_ff": 512,
            "dropout": 0.0, "norm": "pre", "positional": {"kind": "rotary", "max_len": 4096},
            "decoder": {"layers": 4, "block": [attention, ffn]}}
    if name in ("rotary-gqa", "sliding"):  # Llama's and Mistral's shapes: grouped heads, RMSNorm, SwiGLU
        data |= {"kv_heads": 2, "norm_type": "rms", "activation": "silu", "gated": True}
    return Spec.model_validate(data)


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def worker(spec_name: str, rows: int, length: int, shard: str, checkpoint: bool) -> None:
    """One case in this process: print the measured peak over the baseline as JSON (rank 0)."""
    import torch
    import torch.distributed as dist

    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.training.schedule import adam, smoothed_loss
    from tfspec.backends.torch.training.sharding import parallelize

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    spec = load(spec_name)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, spec.vocab.size, (3, rows, length), generator=generator)

    def steps(batches) -> None:
        model = build_module(spec)
        net = parallelize(model, torch.device("cpu"), world, shard, checkpoint)
        optimizer = adam(model.parameters())
        names = [n for n in ("src", "tgt") if n in model.graph.ports]
        for tokens in batches:
            logits = net(*[tokens] * len(names))
            loss, _ = smoothed_loss(logits, tokens, spec.vocab.pad_id, 0.1)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del logits, loss

    steps([ids[0, :1, :4]])  # the code and libraries a step touches become resident before the baseline
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    base = _rss("VmRSS")
    steps(ids)
    peak = _rss("VmHWM") - base
    if world > 1:
        peaks = [None] * world
        dist.all_gather_object(peaks, peak)
        peak = max(peaks)
        dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({"peak": peak}))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(spec_name: str, rows: int, length: int, shard: str, ranks: int, checkpoint: bool) -> int:
    """The case's measured peak per rank, in its own process (torchrun for several ranks)."""
    args = [__file__, "--worker", spec_name, str(rows), str(length), shard, "1" if checkpoint else "0"]
    if ranks > 1:
        args = ["-m", "torch.distributed.run", f"--nproc_per_node={ranks}", f"--master_port={_port()}", *args]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"{spec_name} {shard}: worker failed\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])["peak"]


def estimated(spec_name: str, rows: int, length: int, shard: str, ranks: int, checkpoint: bool) -> int:
    from tfspec.analysis.train_memory import Setup, estimate
    from tfspec.ir import build_graph

    setup = Setup(rows, length, shard=shard, ranks=ranks, checkpoint=checkpoint)
    return estimate(build_graph(load(spec_name)), setup).peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", nargs="*", default=list(SPECS), choices=list(SPECS))
    parser.add_argument("--lengths", nargs="*", type=int, help="sequence lengths to measure instead of each "
                        "spec's own (its batch rows kept)")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, rows, length, shard, ckpt = args.worker
        return worker(name, int(rows), int(length), shard, ckpt == "1")
    print("| spec | batch | shard | ranks | checkpointing | estimate MiB | measured MiB | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.specs:
        _, rows, own = SPECS[name]
        for length, (shard, ranks, checkpoint) in itertools.product(args.lengths or [own], CASES):
            guess = estimated(name, rows, length, shard, ranks, checkpoint)
            real = measure(name, rows, length, shard, ranks, checkpoint)
            print(f"| {name} | {rows}x{length} | {shard} | {ranks} | {'yes' if checkpoint else 'no'} | "
                  f"{guess / 2**20:.1f} | {real / 2**20:.1f} | {guess / real:.3f} |", flush=True)


if __name__ == "__main__":
    main()
