"""tfspec's emitted PyTorch module vs torch.nn.Transformer, side by side in one run.

Both get the same base-shaped model (6+6 layers, d_model 512, 8 heads, d_ff 2048), the same
embedding + sinusoid + tied projection around the stack, the same padded batches, and run
interleaved so machine noise hits both alike. Reports medians and the tfspec/reference ratio
(< 1 means tfspec is faster).

    python tools/bench/bench_torch.py                  # base shape, batch 16 x 32 tokens
    python tools/bench/bench_torch.py --spec tiny --batch 64
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from tfspec import load_spec
from tfspec.backends.torch import build_module
from tfspec.ir.positions import sinusoids


class Reference(torch.nn.Module):
    """torch.nn.Transformer with the paper's embedding, positions and tied projection."""

    def __init__(self, spec):
        super().__init__()
        self.d = spec.d_model
        self.embed = torch.nn.Embedding(spec.vocab.size, spec.d_model)
        self.core = torch.nn.Transformer(spec.d_model, spec.heads, spec.encoder.num_layers, spec.decoder.num_layers,
                                         spec.d_ff, dropout=spec.dropout, batch_first=True)

    def forward(self, src, tgt):
        pe = torch.from_numpy(sinusoids(max(src.shape[1], tgt.shape[1]), self.d)).float().to(src.device)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=src.device, dtype=torch.bool)
        h = self.core(self.embed(src) * math.sqrt(self.d) + pe[: src.shape[1]],
                      self.embed(tgt) * math.sqrt(self.d) + pe[: tgt.shape[1]], tgt_mask=mask, tgt_is_causal=True,
                      src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0)
        return F.linear(h, self.embed.weight)


def batch(spec, n: int, src_len: int, tgt_len: int, gen, dense: bool = False):
    src = torch.randint(4, spec.vocab.size, (n, src_len), generator=gen)
    tgt = torch.randint(4, spec.vocab.size, (n, tgt_len), generator=gen)
    for i in range(0 if dense else n):  # realistic ragged batches: each sequence keeps 60-100% of the length
        src[i, int(src_len * (0.6 + 0.4 * i / n)):] = 0
        tgt[i, int(tgt_len * (0.6 + 0.4 * i / n)):] = 0
    return src, tgt


def timed(fn, device: str) -> float:
    """Wall time of ``fn``, waiting for the GPU's queued work on both sides."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="base")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--tgt-len", type=int, default=32)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--dense", action="store_true", help="no padding (nn.Transformer's fast path then skips nothing)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: both models on the GPU, bfloat16 autocast as `tfspec train` uses there")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    spec = load_spec(args.spec)
    models = {"tfspec": build_module(spec).to(args.device), "nn.Transformer": Reference(spec).to(args.device)}
    src, tgt = batch(spec, args.batch, args.src_len, args.tgt_len, torch.Generator().manual_seed(0), args.dense)
    src, tgt = src.to(args.device), tgt.to(args.device)
    autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.device == "cuda")
    optims = {k: torch.optim.Adam(m.parameters(), lr=1e-4) for k, m in models.items()}

    def infer(model):
        model.eval()
        with torch.inference_mode(), autocast():
            model(src, tgt)

    def train(name):
        model = models[name]
        model.train()
        with autocast():
            logits = model(src, tgt)
        loss = F.cross_entropy(logits.float().flatten(0, 1), tgt.flatten(), ignore_index=0, label_smoothing=0.1)
        loss.backward()
        optims[name].step()
        optims[name].zero_grad(set_to_none=True)

    results = {}
    for task, run in (("inference forward", lambda n: infer(models[n])), ("training step", train)):
        for name in models:  # warm-up
            run(name)
        times = {name: [] for name in models}
        for _ in range(args.repeats):
            for name in models:
                times[name].append(timed(lambda: run(name), args.device))
        results[task] = {name: statistics.median(t) for name, t in times.items()}

    padding = "dense" if args.dense else "ragged"
    print(f"{spec.name}: batch {args.batch} x src {args.src_len} / tgt {args.tgt_len} tokens ({padding}), "
          f"{args.threads} threads, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if args.device == 'cuda' else platform.processor() or platform.machine()}")
    print("| task | tfspec (ms) | nn.Transformer (ms) | tfspec / nn.Transformer |\n|---|---|---|---|")
    for task, r in results.items():
        print(f"| {task} | {1e3 * r['tfspec']:.1f} | {1e3 * r['nn.Transformer']:.1f} | "
              f"{r['tfspec'] / r['nn.Transformer']:.2f} |")


if __name__ == "__main__":
    main()
