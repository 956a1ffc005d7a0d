"""GPU check: tfspec's ONNX graphs on onnxruntime's CUDA provider, proved and timed in one run.

On a machine with CUDA, torch's CUDA build and `onnxruntime-gpu` (`pip install -e ".[gpu]"`),
this exports the base shape (random weights) in float16, checks parity of the graphs on the
CUDA provider against the PyTorch module (float32, CPU: the independent reference; fp16
tolerance 5e-2, greedy tokens equal), then times greedy and beam-4 decoding at batch 1 and 16:
tfspec on onnxruntime CUDA (fp16) against PyTorch eager on CUDA (the KV-cached TorchDecoder,
fp16, SDPA) and CTranslate2 on CUDA (float16) when it loads, every engine emitting exactly
the same number of tokens. Prints a markdown table (tokens/s and ratios) for BENCHMARKS.md.

Without CUDA it says so in one line and exits 0, so it is safe to run anywhere.

    python tools/checks/gpu_check.py                 # ~2 minutes on an H100
    python tools/checks/gpu_check.py --spec big --rounds 5
    python tools/checks/gpu_check.py --dry-run-on-cpu --spec tiny --rounds 1   # the tool itself, anywhere
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TAKES = "~2 minutes on an H100"
"""How long a run takes (tools/README.md lists it)."""
SETTINGS = [(1, 1), (1, 4), (16, 1), (16, 4)]  # (batch, beam)


def cuda_missing() -> str | None:
    """Why this machine cannot run the check, or None."""
    import onnxruntime as ort
    import torch

    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} has no CUDA provider (install onnxruntime-gpu: tfspec[gpu])"
    return None


def engines(spec, model, on_gpu, work: Path, device: str) -> dict:
    """Name -> decode(src, beam, n): exactly n tokens per row, on ``device`` (the GPU; the CPU
    in a dry run), ``on_gpu`` the export opened there. Moves ``model`` there."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import TorchDecoder
    from tfspec.search import SearchOptions, search

    options = lambda beam, n: SearchOptions(beam=beam, alpha=0.6, min_length=n, max_length=n)
    out = {}
    graphs = on_gpu.decoder(static=True)
    dynamic = OnnxModel(work / "fp16", device=device, cuda_graphs=False).decoder()
    out["tfspec ORT CUDA graphs fp16"] = lambda src, beam, n: search(graphs, src, options(beam, n))
    out["tfspec ORT CUDA fp16"] = lambda src, beam, n: search(dynamic, src, options(beam, n))
    ct2 = ct2_engine(spec, model, work) if device == "cuda" else None  # from the float32 weights, before they move
    eager = TorchDecoder(model.to(device).half())
    out["PyTorch eager CUDA fp16"] = lambda src, beam, n: search(eager, src, options(beam, n))
    if ct2 is not None:
        out["CTranslate2 CUDA fp16"] = ct2
    return out


def ct2_engine(spec, model, work: Path):
    """CTranslate2 on CUDA in float16 with the same weights, or None (saying why)."""
    try:
        import ctranslate2
    except ImportError:
        print("CTranslate2 skipped: not installed (`pip install ctranslate2`)")
        return None
    if ctranslate2.get_cuda_device_count() == 0:
        print("CTranslate2 skipped: this build sees no CUDA device")
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_decode import ct2_model, vocabulary

    ct2_model(model, spec, work / "ct2")
    words, index = vocabulary(spec), {w: i for i, w in enumerate(vocabulary(spec))}
    tr = ctranslate2.Translator(str(work / "ct2"), device="cuda", compute_type="float16")

    def run(src, beam, n):
        res = tr.translate_batch([[words[i] for i in row] for row in src], beam_size=beam, length_penalty=0.6,
                                 max_decoding_length=n, min_decoding_length=n)
        return [[index[t] for t in r.hypotheses[0]] for r in res]
    try:  # the wheel finds its CUDA libraries (cuBLAS of its own CUDA major) only when it first runs
        run(np.full((1, 4), 4), 1, 2)
    except (RuntimeError, OSError) as e:
        print(f"CTranslate2 skipped: it loads but cannot run on CUDA here ({e})")
        return None
    return run


def same_tokens(runs: dict, sources: dict) -> list:
    """The static step graph (replayed as CUDA graphs) against the growing-cache one, token
    for token, on the timed sources: 80 tokens each, so the static cache also grows once
    (64 slots to 128) between captured steps. An engine that fails is reported as a failed
    check and left out of the timing, so the other columns still come."""
    from tfspec.checks import Check

    checks = []
    ours, theirs = (runs[n] for n in ("tfspec ORT CUDA graphs fp16", "tfspec ORT CUDA fp16"))
    for (batch, beam) in SETTINGS:
        try:
            a = ours(sources[batch], beam, 80)
        except Exception as e:  # noqa: BLE001 - a check reports what broke and goes on
            print(f"  FAILED CUDA graphs, batch {batch}, beam {beam}: {type(e).__name__}: {str(e)[:300]}")
            del runs["tfspec ORT CUDA graphs fp16"]
            return checks + [Check("CUDA graphs decode (error above)", float("inf"), 0)]
        differ = sum(x != y for x, y in zip(a, theirs(sources[batch], beam, 80)))
        checks.append(Check(f"CUDA graphs vs growing cache, batch {batch}, beam {beam}, 80 tokens "
                            "(sentences that differ)", float(differ), 0))
        print(f"  {checks[-1]}")
    return checks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="base")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--out-len", type=int, default=64)
    p.add_argument("--dry-run-on-cpu", action="store_true",
                   help="run every step on the CPU instead (no capture, no CTranslate2): tests this tool "
                        "where there is no GPU; its timings mean nothing")
    args = p.parse_args()
    device = "cpu" if args.dry_run_on_cpu else "cuda"
    if device == "cuda" and (why := cuda_missing()) is not None:
        print(f"gpu_check: nothing to check here: {why}")
        return 0
    import torch

    synchronize = torch.cuda.synchronize if device == "cuda" else lambda: None

    from tfspec import load_spec
    from tfspec.backends.onnx import OnnxModel, export
    from tfspec.backends.parity.onnx import check_parity
    from tfspec.backends.torch import build_module

    spec = load_spec(args.spec)
    torch.manual_seed(0)
    model = build_module(spec).eval()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        export(model, work / "fp16", fp16=True, parity=False, static_cache=True)
        on_gpu = OnnxModel(work / "fp16", device=device)
        where = torch.cuda.get_device_name() if device == "cuda" else "a dry run on the CPU"
        print(f"{spec.name}: {on_gpu.describe()}, {where}; CUDA graphs {'captured' if on_gpu.graphs else 'not'}")
        checks = check_parity(on_gpu, model, tolerance=5e-2)
        for check in checks:
            print(f"  {check}")
        runs = engines(spec, model, on_gpu, work, device)
        sources = {b: rng.integers(4, spec.vocab.size, (b, args.src_len)) for b, _ in SETTINGS}
        checks += same_tokens(runs, sources)
        times = {(s, name): [] for s in SETTINGS for name in runs}
        for (batch, beam) in SETTINGS:
            for run in runs.values():
                run(sources[batch], beam, 8)  # warm-up
        for _ in range(args.rounds):
            for (batch, beam) in SETTINGS:
                for name, run in runs.items():
                    synchronize()
                    start = time.perf_counter()
                    run(sources[batch], beam, args.out_len)
                    synchronize()
                    times[(batch, beam), name].append(time.perf_counter() - start)
    names = list(runs)
    ours = names[0]
    head = ["setting"] + [f"{n} (tok/s)" for n in names] + [f"{ours} / {n}" for n in names[1:]]
    print(f"\n{spec.name}: src {args.src_len} -> exactly {args.out_len} tokens, median of {args.rounds} rounds")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for (batch, beam) in SETTINGS:
        speed = {n: batch * args.out_len / statistics.median(times[(batch, beam), n]) for n in names}
        cells = [f"{speed[n]:.0f}" for n in names] + [f"{speed[ours] / speed[n]:.2f}" for n in names[1:]]
        print(f"| batch {batch}, {'greedy' if beam == 1 else f'beam {beam}'} | " + " | ".join(cells) + " |")
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
