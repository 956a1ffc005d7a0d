"""Decoding speed: tfspec on ONNX Runtime vs PyTorch eager vs CTranslate2, in one run.

Every engine decodes with the same random base-shaped weights (6+6 layers, d_model 512, 8
heads, d_ff 2048, shared 37000-token vocabulary): tfspec's exported ONNX graphs run by
onnxruntime (opset 18, attention spelled out; opset 23, the fused Attention op; generate.onnx,
the search inside the graph), tfspec's KV-cached PyTorch eager decoder, and CTranslate2 with a
TransformerSpec built from the same arrays. Sources are 32 random tokens; every engine must emit
exactly 64 tokens (end of sentence forbidden before), so all do the same work. Greedy and beam 4, batch 1 and 16, fp32
and int8 (CTranslate2 compute_type int8; tfspec's `export --int8`: onnxruntime's dynamic
quantisation of every MatMul and Gemm weight, per channel, 7-bit range).

Before timing, CTranslate2 is checked to compute the same model: its greedy tokens must equal
tfspec's, and its teacher-forced log-probabilities of random targets (score_batch) must match
the PyTorch module's (a random model's greedy path barely depends on its input, so the scores
are the stricter test). Timing is interleaved (each engine once per round, per setting, after
a warm-up), medians are reported as output tokens/s (batch x 64 / wall time, encoder
included). Ratios > 1: tfspec's ORT path is faster.

The memory limit is in the table: the machine's read bandwidth is measured in the same run
(tools/bandwidth.py, once per round), and each cell shows the bytes of weights one step reads (tfspec's step
graph; CTranslate2 reads the same matrices) and the fraction of the bandwidth each engine
reaches at that speed. A batch-1 cell near 100% is bound by memory: only fewer bytes per step
go faster there.

CTranslate2 is a benchmark-only dependency (`pip install ctranslate2`); without it that
engine is skipped.

    python tools/bench_decode.py                  # everything, ~7 minutes on 2 quiet cores
    python tools/bench_decode.py --quick          # batch 1 greedy, 3 rounds: a smoke test
    python tools/bench_decode.py --engines ort23,ct2 --no-int8 --rounds 3
    python tools/bench_decode.py --engines ort18,static --rounds 3   # the static step graph on CPU
    python tools/bench_decode.py --spec small --engines ort18,generate   # generate.onnx against the Python search
    python tools/bench_decode.py --engines ort18 --shortlist 1500   # a target-vocabulary shortlist of 1,500 ids

``--shortlist N`` adds "ORT op18 shortlist": the same export with a shortlist (``export
--shortlist``) under which every batch scores the same N target ids, what a real shortlist of
that size costs a step (``tools/bench_translate.py --shortlist`` gives real sizes and BLEU).
Its outputs differ from the full vocabulary's by design, so it is left out of the token checks.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from bandwidth import cpu_name, fraction, read_bandwidth, weights_read_per_step
from tfspec import load_spec
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.generator import Generator
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.ir.positions import sinusoids
from tfspec.search import SearchOptions, search
from tfspec.shortlist import FORMAT, Shortlist

ENGINES = {"ort18": "ORT op18", "ort23": "ORT op23", "fused": "ORT op18 fused", "static": "ORT op18 static",
           "generate": "ORT generate.onnx",
           "torch": "PyTorch eager", "ct2": "CTranslate2"}
"""``static``: the static step graph (``export --static-cache``) on CPU, where CUDA graphs are not.
``generate``: generate.onnx (``export --generate``), the same search inside one graph, run by one
``session.run`` per batch (opset 18, as ``ort18``, whose Python search it is compared with).
``fused``: ``export --fused`` (onnxruntime's MultiHeadAttention and SkipSimplifiedLayerNormalization, and the
in-place cache's step graph, ``decoder_inplace``, where the model allows), opset 18."""
SHORTLIST = "ORT op18 shortlist"
SETTINGS = [(1, 1), (16, 1), (1, 4), (16, 4)]  # (batch, beam)


def vocabulary(spec) -> list[str]:
    v = spec.vocab
    special = {v.pad_id: "<blank>", v.bos_id: "<s>", v.eos_id: "</s>", v.unk_id: "<unk>"}
    return [special.get(i, f"w{i}") for i in range(v.size)]


def ct2_model(model, spec, directory: Path, words: list[str] | None = None) -> None:
    """Write a CTranslate2 model with the module's weights (post- or pre-norm with final norms,
    tied embeddings); ``words`` names the vocabulary's tokens (default: placeholders)."""
    from ctranslate2.specs import TransformerSpec, common_spec

    w = {name: p.detach().cpu().float().numpy() for name, p in model.named_parameters()}
    pre = spec.norm == "pre"
    ct = TransformerSpec.from_config((spec.encoder.layers, spec.decoder.layers), spec.heads, pre_norm=pre,
                                     activation=getattr(common_spec.Activation, spec.activation.upper()))
    table = sinusoids(spec.positional.max_len, spec.d_model).astype(np.float32)  # interleaved sin/cos, from 0
    embed = w["encoder.embed.weight"]
    for stack in (ct.encoder, ct.decoder):
        stack.scale_embeddings = spec.embed_scale  # x sqrt(d_model)
        stack.position_encodings.encodings = table  # CT2's own table would be [sin | cos] halves
    ct.encoder.embeddings[0].weight = ct.decoder.embeddings.weight = ct.decoder.projection.weight = embed

    def linear(spec_, prefix, weight, bias):
        spec_.weight, spec_.bias = w[prefix + weight], w[prefix + bias]

    def norm(spec_, prefix):
        spec_.gamma, spec_.beta = w[prefix + ".weight"], w[prefix + ".bias"]

    for stack, layers in (("encoder", ct.encoder.layer), ("decoder", ct.decoder.layer)):
        for i, layer in enumerate(layers):
            p = f"{stack}.layers.{i}."
            attn = layer.self_attention  # linear[0]: fused [q; k; v], like tfspec's w_qkv
            linear(attn.linear[0], p + "self_attn.", "w_qkv", "b_qkv")
            linear(attn.linear[1], p + "self_attn.", "w_o", "b_o")
            norm(attn.layer_norm, p + "self_attn_norm")  # before the sub-layer (pre) or after the residual
            if stack == "decoder":  # linear[0]: q, linear[1]: fused [k; v], like tfspec's w_kv
                for j, (weight, bias) in enumerate((("w_q", "b_q"), ("w_kv", "b_kv"), ("w_o", "b_o"))):
                    linear(layer.attention.linear[j], p + "cross_attn.", weight, bias)
                norm(layer.attention.layer_norm, p + "cross_attn_norm")
            linear(layer.ffn.linear_0, p + "ffn.", "w_1", "b_1")
            linear(layer.ffn.linear_1, p + "ffn.", "w_2", "b_2")
            norm(layer.ffn.layer_norm, p + "ffn_norm")
    if pre:  # pre-norm stacks end with a norm of their own
        norm(ct.encoder.layer_norm, "encoder.norm")
        norm(ct.decoder.layer_norm, "decoder.norm")
    ct.config.layer_norm_epsilon = spec.norm_eps
    ct.config.decoder_start_token = "<s>"  # tfspec's decoder starts from bos; no </s> added to sources
    words = words or vocabulary(spec)
    ct.register_source_vocabulary(words)
    ct.register_target_vocabulary(words)
    ct.validate()
    ct.optimize(quantization=None)
    directory.mkdir(parents=True, exist_ok=True)
    ct.save(str(directory))


def engines(args, spec, model, work: Path) -> dict[str, Callable]:
    """Name -> decode(src (B, S) int64, beam, length) -> exactly ``length`` token ids per row."""
    options = lambda beam, n: SearchOptions(beam=beam, alpha=0.6, min_length=n, max_length=n)
    out: dict[str, Callable] = {}
    for key in args.engines:
        if key == "generate":
            dirs = {"": work / key} | ({" int8": work / f"{key}-int8"} if args.int8 else {})
            for suffix, d in dirs.items():
                export(model, d, opset=18, parity=False, int8=bool(suffix), generate=True)
                gen = Generator(OnnxModel(d, device="cpu", threads=args.threads))
                out[ENGINES[key] + suffix] = lambda src, beam, n, gen=gen: gen(src, options(beam, n))
        elif key.startswith("ort") or key in ("static", "fused"):
            opset, static = (18, key == "static") if key in ("static", "fused") else (int(key[3:]), False)
            fused = key == "fused"
            short = fixed_shortlist(spec, args.shortlist) if args.shortlist and key == "ort18" else None
            export(model, work / key, opset=opset, parity=False, static_cache=static, shortlist=short, fused=fused)
            dirs = {"": work / key}
            if args.int8:  # the product's int8 path: `tfspec export --int8`
                export(model, work / f"{key}-int8", opset=opset, parity=False, int8=True, static_cache=static,
                       shortlist=short, fused=fused)
                dirs[" int8"] = work / f"{key}-int8"
            for suffix, d in dirs.items():
                onnx = OnnxModel(d, device="cpu", threads=args.threads)
                decoders = {ENGINES[key]: onnx.decoder(static=static)}
                if short is not None:
                    decoders[SHORTLIST] = onnx.decoder(shortlist=True)
                for name, dec in decoders.items():
                    out[name + suffix] = lambda src, beam, n, dec=dec: search(dec, src, options(beam, n))
        elif key == "torch":
            dec = TorchDecoder(model)
            out[ENGINES[key]] = lambda src, beam, n: search(dec, src, options(beam, n))
        elif key == "ct2":
            try:
                import ctranslate2
            except ImportError:
                print("CTranslate2 skipped: not installed (`pip install ctranslate2`, a benchmark-only dependency)")
                continue
            if not ct2_maps(spec):
                print(f"CTranslate2 skipped: the weight mapping here covers base-like specs only, not {spec.name}")
                continue
            ct2_model(model, spec, work / "ct2")
            words, index = vocabulary(spec), {w: i for i, w in enumerate(vocabulary(spec))}
            for suffix, compute in (("", "float32"), (" int8", "int8")) if args.int8 else (("", "float32"),):
                tr = ctranslate2.Translator(str(work / "ct2"), device="cpu", compute_type=compute,
                                            intra_threads=args.threads, inter_threads=1)

                def run(src, beam, n, tr=tr):  # no </s> appended to sources; outputs start after <s>
                    res = tr.translate_batch([[words[i] for i in row] for row in src], beam_size=beam,
                                             length_penalty=0.6, max_decoding_length=n, min_decoding_length=n)
                    return [[index[t] for t in r.hypotheses[0]] for r in res]
                out[ENGINES[key] + suffix] = run
                out[ENGINES[key] + suffix].translator = tr
    return out


def fixed_shortlist(spec, size: int) -> Shortlist:
    """A shortlist under which every batch scores the same ``size`` target ids (the specials
    and random others): no source token adds a candidate."""
    v = spec.vocab
    specials = np.array(sorted({*v.stop_ids, v.bos_id, v.unk_id, v.pad_id}))
    others = np.random.default_rng(0).choice(np.setdiff1d(np.arange(v.tgt_size), specials), size - len(specials),
                                             replace=False)
    return Shortlist(np.zeros(v.size + 1, np.int64), np.zeros(0, np.int64), np.union1d(specials, others),
                     {"format": FORMAT, "per_source": "0", "frequent": str(size), "pairs": "0"})


def ct2_maps(spec) -> bool:
    """Whether ``ct2_model`` covers the spec: the paper's layout, post- or pre-norm."""
    return (spec.positional.kind, spec.tie_embeddings, spec.bias, spec.output_bias, spec.final_norm) \
        == ("sinusoidal", "all", True, False, None) and spec.norm in ("post", "pre")


def cpu_seconds() -> np.ndarray:
    """CPU seconds so far: busy on the whole machine, taken by the hypervisor (steal), used by
    this process (Linux /proc/stat; NaN elsewhere). Over the timed rounds, busy - mine is what
    other processes took; steal is what other virtual machines on the host took."""
    mine = sum(os.times()[:4])
    try:
        with open("/proc/stat") as f:
            user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
        tick = os.sysconf("SC_CLK_TCK")
        return np.array([(user + nice + system + irq + softirq) / tick, steal / tick, mine])
    except (OSError, ValueError):
        return np.array([np.nan, np.nan, mine])


def verify(runs, model, spec, src, rng, n: int) -> None:
    """Token agreement of every engine with PyTorch eager (greedy and beam 4), and CT2's
    teacher-forced log-probabilities against the PyTorch module's."""
    dec = TorchDecoder(model)
    for beam in (1, 4):
        ref = search(dec, src, SearchOptions(beam=beam, min_length=n, max_length=n))
        total = sum(map(len, ref))
        print(f"{'greedy' if beam == 1 else 'beam 4'} tokens equal to PyTorch eager's ({len(src)} sources x {n}): "
              + ", ".join(f"{name} {sum(a == b for r, o in zip(ref, run(src, beam, n)) for a, b in zip(r, o))}/{total}"
                          for name, run in runs.items() if name != ENGINES["torch"] and SHORTLIST not in name))
    ct2 = runs.get(ENGINES["ct2"])
    if ct2 is not None:
        words = vocabulary(spec)
        tgt = rng.integers(4, spec.vocab.size, (len(src), 48))
        scored = ct2.translator.score_batch([[words[i] for i in r] for r in src], [[words[i] for i in r] for r in tgt])
        bos = np.full((len(src), 1), spec.vocab.bos_id)
        with torch.inference_mode():
            lp = torch.log_softmax(model(torch.from_numpy(src), torch.from_numpy(np.hstack([bos, tgt]))), -1).numpy()
        want = np.take_along_axis(lp, np.hstack([tgt, np.full_like(bos, spec.vocab.eos_id)])[..., None], -1)[..., 0]
        diff = np.abs(want - np.array([s.log_probs for s in scored])).max()
        print(f"CTranslate2 score_batch vs PyTorch log-probs, {len(src)} random targets x 49 tokens: "
              f"max |diff| {diff:.2e}" + ("  <- NOT THE SAME MODEL: fix ct2_model()" if diff > 1e-3 else ""))


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return int(text)


def batch_beam_cells(text: str) -> list[tuple[int, int]]:
    """``--settings``' BATCHxBEAM cells, each two positive integers."""
    try:
        found = [tuple(int(v) for v in cell.split("x")) for cell in text.split(",")]
    except ValueError:
        found = []
    if not found or any(len(c) != 2 or min(c) < 1 for c in found):
        raise argparse.ArgumentTypeError(f"{text!r}: expected BATCHxBEAM cells such as 1x1,16x4")
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="base")
    p.add_argument("--engines", default="ort18,ort23,generate,torch,ct2",
                   help="comma-separated subset of " + ",".join(ENGINES) + " (default: all)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds; each runs every engine once per setting")
    p.add_argument("--threads", type=int, default=2, help="threads for every engine (default 2)")
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--out-len", type=int, default=64, help="output tokens, exactly (end of sentence forbidden before)")
    p.add_argument("--no-int8", dest="int8", action="store_false", help="skip the int8 engines")
    p.add_argument("--quick", action="store_true", help="batch 1 greedy only, 3 rounds, no int8: a smoke test")
    p.add_argument("--settings", type=batch_beam_cells,
                   help="comma-separated BATCHxBEAM cells, e.g. 1x1,16x4 (default: all four)")
    p.add_argument("--repeat", type=positive, default=1, metavar="N",
                   help="decodes per engine, setting and round, back to back (default 1): N > 1 times the steady "
                        "state, after the first decode has brought an engine's weights back into the caches")
    p.add_argument("--fastest", action="store_true",
                   help="report each cell's fastest round and the highest read bandwidth, not the medians: on a busy "
                        "machine the least disturbed ones")
    p.add_argument("--shortlist", type=int, default=0, metavar="N",
                   help="with ort18: also decode with a shortlist of N target ids per batch (module docstring)")
    args = p.parse_args()
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if unknown := set(args.engines) - set(ENGINES):
        p.error(f"unknown engines {sorted(unknown)}; choose from {','.join(ENGINES)}")
    settings = SETTINGS[:1] if args.quick else SETTINGS
    if args.settings:
        settings = args.settings
    if args.quick:
        args.rounds, args.int8 = min(args.rounds, 3), False
    torch.set_num_threads(args.threads)
    spec = load_spec(args.spec)
    torch.manual_seed(0)
    model = build_module(spec).eval()
    rng = np.random.default_rng(0)
    sources = {b: rng.integers(4, spec.vocab.size, (b, args.src_len)) for b in sorted({b for b, _ in settings})}

    with tempfile.TemporaryDirectory(prefix="bench-decode-") as work:
        runs = engines(args, spec, model, Path(work))
        verify(runs, model, spec, rng.integers(4, spec.vocab.size, (4, args.src_len)), rng, args.out_len)
        times = {(s, name): [] for s in settings for name in runs}
        for (batch, beam) in settings:  # warm-up: sessions, arenas and caches at every batch shape
            for run in runs.values():
                run(sources[batch], beam, 8)
        cpu, wall, order, reads = cpu_seconds(), time.perf_counter(), list(runs), []
        for r in range(args.rounds):
            reads.append(read_bandwidth(args.threads, rounds=3))  # in the rounds: under the same load
            for (batch, beam) in settings:
                for name in order[r % len(order):] + order[:r % len(order)]:  # rotated: no engine always first
                    start = time.perf_counter()
                    for _ in range(args.repeat):
                        runs[name](sources[batch], beam, args.out_len)
                    times[(batch, beam), name].append((time.perf_counter() - start) / args.repeat)
        (busy, steal, mine), wall = cpu_seconds() - cpu, time.perf_counter() - wall
        ort = next((k for k in args.engines if k.startswith("ort") or k in ("static", "fused")), None)  # weights
        step_bytes = {} if ort is None else {
            suffix: weights_read_per_step(Path(work) / (ort + suffix.replace(" ", "-")) / "decoder.onnx")
            for suffix in (("", " int8") if args.int8 else ("",))}
    bandwidth = (max if args.fastest else statistics.median)(reads)  # --fastest: the least disturbed read too

    import onnxruntime
    ct2_version = __import__("ctranslate2").__version__ if any("CTranslate2" in n for n in runs) else "-"
    summary = min if args.fastest else statistics.median
    print(f"\n{spec.name}: src {args.src_len} -> exactly {args.out_len} tokens, {args.threads} threads, "
          f"{'fastest' if args.fastest else 'median'} of "
          f"{args.rounds} rounds{f' of {args.repeat} decodes back to back' if args.repeat > 1 else ''}, "
          f"{wall / 60:.1f} min; meanwhile other processes used {max(busy - mine, 0) / wall:.2f} and the "
          f"hypervisor stole {steal / wall:.2f} of the {os.cpu_count()} cores; onnxruntime "
          f"{onnxruntime.__version__}, torch {torch.__version__}, ctranslate2 {ct2_version}, "
          f"{cpu_name()}; read bandwidth {bandwidth / 1e9:.1f} GB/s "
          f"({args.threads} threads, {'fastest' if args.fastest else 'median'} of one measurement per round)")
    names = [ENGINES[k] for k in args.engines if ENGINES[k] in runs] + ([SHORTLIST] if SHORTLIST in runs else [])
    orts = [n for n in names if n.startswith("ORT")]
    ratios = [(o, ref) for ref in (ENGINES["ct2"], ENGINES["torch"]) if ref in names for o in orts]
    ratios += [(SHORTLIST, ENGINES["ort18"])] if SHORTLIST in runs else []
    ratios += [(ENGINES["generate"], ENGINES["ort18"])] if {ENGINES["generate"], ENGINES["ort18"]} <= set(names) else []
    head = ["setting", "precision"] + [f"{n} (tok/s)" for n in names] + [f"{o} / {r}" for o, r in ratios]
    head += ["weights/step (MB)", "% of read bandwidth: " + ", ".join(names)] if step_bytes else []
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for (batch, beam) in settings:
        for suffix in ("", " int8") if args.int8 else ("",):
            speed = {n: batch * args.out_len / summary(times[(batch, beam), n + suffix])
                     for n in names if (n + suffix) in runs}
            cells = [f"{speed[n]:.0f}" if n in speed else "-" for n in names]
            cells += [f"{speed[o] / speed[r]:.2f}" if o in speed and r in speed else "-" for o, r in ratios]
            if suffix in step_bytes:
                cells += [f"{step_bytes[suffix] / 1e6:.0f}", ", ".join(
                    f"{fraction(step_bytes[suffix], speed[n] / batch, bandwidth):.0%}" if n in speed and n != SHORTLIST
                    else "-" for n in names)]  # the shortlist reads fewer rows than the step graph holds
            setting = f"batch {batch}, {'greedy' if beam == 1 else f'beam {beam}'}"
            print(f"| {setting} | {'int8' if suffix else 'fp32'} | " + " | ".join(cells) + " |")
    spread = {n: statistics.median(max(t) / min(t) for (_, name), t in times.items() if name == n) for n in runs}
    print("Noise: slowest / fastest round, median over settings: "
          + ", ".join(f"{n} {v:.2f}" for n, v in spread.items()))


if __name__ == "__main__":
    main()
