"""Decoding speed: tfspec on ONNX Runtime vs PyTorch eager vs CTranslate2, each in processes of its own.

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
are the stricter test). Engines in one process disturb each other (CTranslate2 ran ~10x slower
after PyTorch's threads had run beside it), so each engine and precision is timed in a fresh
process of its own every round (tools/bench/isolated.py: the same threads and warm-up for all, at
every setting, then one timed decode per setting), rounds rotate which engine goes first, and
the reference checks and bandwidth reads run in processes of their own. Medians are reported
as output tokens/s (batch x 64 / wall time, encoder included). Ratios > 1: tfspec's ORT path
is faster. "CTranslate2 bare" is CTranslate2 in a process that imports nothing but it
(tools/bench/peer_bare.py), in the same rounds: a CTranslate2 column more than 10% below it marks
the table INVALID and the tool exits with status 1.
CTranslate2 runs under its faster CPU backend, Intel MKL or its others (``CT2_USE_MKL``): each
is tried over every setting in a bare process first, and the choice is printed (on an AMX Xeon
its default, MKL, decoded `small` ~10x slower).

The memory limit is in the table: each cell shows the bytes of weights one step reads (tfspec's
step graph; CTranslate2 reads the same matrices) and the fraction of the read bandwidth each
engine reaches at that speed, the bandwidth being measured in the same run (tools/bench/bandwidth.py,
once per round) over a buffer of the step's size read again and again: from memory for a model
larger than the caches, from the last-level cache for one they hold (`small`'s 19 MB; the
memory figure is printed too). A batch-1 cell near 100% is bound by reading its weights: only
fewer bytes per step go faster there.

CTranslate2 is a benchmark-only dependency (`pip install ctranslate2`); without it that
engine is skipped.

    python tools/bench/bench_decode.py                  # every engine, base, 5 rounds: ~10 minutes on 2 quiet cores
    python tools/bench/bench_decode.py --quick          # batch 1 greedy, 3 rounds: a smoke test
    python tools/bench/bench_decode.py --engines ort23,ct2 --no-int8 --rounds 3
    python tools/bench/bench_decode.py --engines ort18,static --rounds 3   # the static step graph on CPU
    python tools/bench/bench_decode.py --spec small --engines ort18,generate   # generate.onnx against the Python search
    python tools/bench/bench_decode.py --engines ort18 --shortlist 1500   # a target-vocabulary shortlist of 1,500 ids

``--shortlist N`` adds "ORT op18 shortlist": the same export with a shortlist (``export
--shortlist``) under which every batch scores the same N target ids, what a real shortlist of
that size costs a step (``tools/bench/bench_translate.py --shortlist`` gives real sizes and BLEU).
Its outputs differ from the full vocabulary's by design, so it is left out of the token checks.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bandwidth import cpu_name, fraction, weights_read_per_step
from isolated import Job, interleave, with_bare
from peer_bare import BARE_LIMIT, fastest_ct2, invalid, timed
from tfspec import load_spec
from tfspec.backends.onnx import export
from tfspec.ir.positions import sinusoids
from tfspec.shortlist import FORMAT, Shortlist

TAKES = "~10 minutes on 2 quiet cores (the defaults; `--spec small --rounds 7` 1.9 min)"
"""How long a run takes (tools/README.md lists it)."""
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
    (directory / "words.json").write_text(json.dumps(words))  # peer_bare's id <-> token map


def prepare(args, spec, model, work: Path) -> dict[str, tuple[Job, Job]]:
    """Name -> (timing job, output job) of every engine, each run in a process of its own
    (tools/bench/isolated.py); here only the exports and CTranslate2's model directory are written."""
    jobs: dict[str, tuple[Job, Job]] = {}
    precisions = (("", False), (" int8", True)) if args.int8 else (("", False),)

    def ours(name, **engine):
        job = Job("bench_decode", "times", ("onnxruntime",) if engine["kind"] != "torch" else ("torch",),
                  {"engine": engine})
        jobs[name] = job, job.but(function="outputs")
    for key in args.engines:
        if key == "torch":
            ours(ENGINES[key], kind="torch", spec=args.spec, weights=str(work / "weights.pt"))
        elif key == "ct2" and ct2_ready(spec):
            ct2_model(model, spec, work / "ct2")
            for suffix, int8 in precisions:
                job = Job("peer_bare", "ct2_times", ("ctranslate2",),
                          {"model": str(work / "ct2"), "compute": "int8" if int8 else "float32"})
                jobs[ENGINES[key] + suffix] = job, job.but(function="ct2_outputs")
        elif key != "ct2":
            opset = int(key[3:]) if key in ("ort18", "ort23") else 18
            short = fixed_shortlist(spec, args.shortlist) if args.shortlist and key == "ort18" else None
            for suffix, int8 in precisions:  # int8: the product's path, `tfspec export --int8`
                d = work / (key + suffix.replace(" ", "-"))
                export(model, d, opset=opset, parity=False, int8=int8, static_cache=key == "static",
                       shortlist=short, fused=key == "fused", generate=key == "generate")
                ours(ENGINES[key] + suffix, kind="generate" if key == "generate" else "onnx", dir=str(d),
                     static=key == "static")
                if short is not None:
                    ours(SHORTLIST + suffix, kind="onnx", dir=str(d), shortlist=True)
    return jobs


def ct2_ready(spec) -> bool:
    """Whether CTranslate2 can run here and hold the spec (saying why not)."""
    if importlib.util.find_spec("ctranslate2") is None:
        print("CTranslate2 skipped: not installed (`pip install ctranslate2`, a benchmark-only dependency)")
        return False
    if not ct2_maps(spec):
        print(f"CTranslate2 skipped: the weight mapping here covers base-like specs only, not {spec.name}")
        return False
    return True


def runner(engine: dict, threads: int):
    """In a worker: decode(src (B, S), beam, n) -> exactly ``n`` ids per row, for the one engine
    this process runs (its thread count set here, explicitly)."""
    from tfspec.search import SearchOptions, search

    options = lambda beam, n: SearchOptions(beam=beam, alpha=0.6, min_length=n, max_length=n)  # noqa: E731
    if engine["kind"] == "torch":
        import torch

        from tfspec.backends.torch import TorchDecoder, build_module
        torch.set_num_threads(threads)
        model = build_module(load_spec(engine["spec"])).eval()
        model.load_state_dict(torch.load(engine["weights"]))
        dec = TorchDecoder(model)
    else:
        from tfspec.backends.onnx import OnnxModel
        onnx = OnnxModel(engine["dir"], device="cpu", threads=threads)  # intra_op threads
        if engine["kind"] == "generate":
            from tfspec.backends.onnx.runtime.generator import Generator
            gen = Generator(onnx)
            return lambda src, beam, n: gen(src, options(beam, n))
        dec = onnx.decoder(static=engine.get("static", False), shortlist=engine.get("shortlist", False))
    return lambda src, beam, n: search(dec, src, options(beam, n))


def times(threads: int, engine: dict, sources: dict, settings: list, n: int, repeat: int = 1) -> list[float]:
    """In a worker: seconds per decode at each setting, with peer_bare's loop and warm-up (the
    peer's own)."""
    run, src = runner(engine, threads), {int(b): np.load(path) for b, path in sources.items()}
    return timed([lambda b=b, m=m: run(src[b], m, n) for b, m in settings],
                 [lambda b=b, m=m: run(src[b], m, 8) for b, m in settings], repeat)


def outputs(threads: int, engine: dict, src: str, n: int) -> dict:
    """In a worker: greedy and beam-4 outputs for the sources in ``src`` (.npy)."""
    run, rows = runner(engine, threads), np.load(src)
    return {str(beam): [list(map(int, o)) for o in run(rows, beam, n)] for beam in (1, 4)}


def reference(threads: int, spec: str, weights: str, src: str, n: int, targets: str) -> dict:
    """In a process of its own: PyTorch eager's greedy and beam-4 outputs, and its
    log-probabilities of ``targets`` then </s> (what CTranslate2's score_batch returns)."""
    import torch

    from tfspec.backends.torch import build_module
    out = outputs(threads, {"kind": "torch", "spec": spec, "weights": weights}, src, n)
    model, vocab = build_module(load_spec(spec)).eval(), load_spec(spec).vocab
    model.load_state_dict(torch.load(weights))
    rows, tgt = np.load(src), np.load(targets)
    bos = np.full((len(rows), 1), vocab.bos_id)
    with torch.inference_mode():
        lp = torch.log_softmax(model(torch.from_numpy(rows), torch.from_numpy(np.hstack([bos, tgt]))), -1).numpy()
    out["scores"] = np.take_along_axis(lp, np.hstack([tgt, np.full_like(bos, vocab.eos_id)])[..., None],
                                       -1)[..., 0].tolist()
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


def verify(jobs: dict, args, spec, work: Path, rng) -> None:
    """Token agreement of every engine with PyTorch eager (greedy and beam 4), and CT2's
    teacher-forced log-probabilities against the PyTorch module's: the reference and each
    engine's outputs each in a process of its own, none of them one that times."""
    src, tgt = work / "check.npy", work / "targets.npy"
    np.save(src, rng.integers(4, spec.vocab.size, (4, args.src_len)))
    np.save(tgt, rng.integers(4, spec.vocab.size, (4, 48)))
    ref, _ = Job("bench_decode", "reference", ("torch",), {"spec": args.spec, "weights": str(work / "weights.pt"),
                                                          "src": str(src), "n": args.out_len, "targets": str(tgt)}
                 ).run(args.threads)
    got = {name: check.but(kwargs={"src": str(src), "n": args.out_len} | (
        {"targets": str(tgt)} if name == ENGINES["ct2"] else {})).run(args.threads)[0]
        for name, (_, check) in jobs.items() if name != ENGINES["torch"] and SHORTLIST not in name}
    for beam in ("1", "4"):
        total = sum(map(len, ref[beam]))
        print(f"{'greedy' if beam == '1' else 'beam 4'} tokens equal to PyTorch eager's (4 sources x {args.out_len}): "
              + ", ".join(f"{name} {sum(a == b for r, o in zip(ref[beam], out[beam]) for a, b in zip(r, o))}/{total}"
                          for name, out in got.items()))
    if ENGINES["ct2"] in got:
        diff = np.abs(np.array(ref["scores"]) - np.array(got[ENGINES["ct2"]]["scores"])).max()
        print(f"CTranslate2 score_batch vs PyTorch log-probs, 4 random targets x 49 tokens: "
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
    import torch

    from tfspec.backends.torch import build_module
    spec = load_spec(args.spec)
    torch.manual_seed(0)
    model = build_module(spec).eval()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="bench-decode-") as tmp:
        work = Path(tmp)
        sources = {}
        for b in sorted({b for b, _ in settings}):
            np.save(work / f"src-{b}.npy", rng.integers(4, spec.vocab.size, (b, args.src_len)))
            sources[str(b)] = str(work / f"src-{b}.npy")
        torch.save(model.state_dict(), work / "weights.pt")
        jobs = prepare(args, spec, model, work)
        verify(jobs, args, spec, work, rng)
        common = {"sources": sources, "settings": settings, "n": args.out_len, "repeat": args.repeat}
        timing = {name: job.but(kwargs=common) for name, (job, _) in jobs.items()}
        for name in [n for n in timing if n.startswith(ENGINES["ct2"])]:  # the peer at its fastest backend
            env, why = fastest_ct2(timing[name], args.threads)
            timing[name] = timing[name].but(env=env)
            print(f"CTranslate2 backend, {why}")
        timing = with_bare(timing, [ENGINES["ct2"] + suffix for suffix in ("", " int8")],
                           lambda peer: peer.replace(ENGINES["ct2"], ENGINES["ct2"] + " bare"))
        ort = next((k for k in args.engines if k.startswith("ort") or k in ("static", "fused")), None)  # weights
        step_bytes = {} if ort is None else {
            suffix: weights_read_per_step(work / (ort + suffix.replace(" ", "-")) / "decoder.onnx")
            for suffix in (("", " int8") if args.int8 else ("",))}
        reads, read = [], Job("bandwidth", "read_bandwidths", ("torch",), {"sizes": step_bytes})
        cpu, wall = cpu_seconds(), time.perf_counter()
        results = interleave(timing, args.rounds, args.threads, lambda: reads.append(read.run(args.threads)[0]))
        (busy, steal, mine), wall = cpu_seconds() - cpu, time.perf_counter() - wall
        times = {(tuple(s), name): [r[i] for r in results[name]] for name in timing for i, s in enumerate(settings)}
    pick = max if args.fastest else statistics.median  # --fastest: the least disturbed reads too
    bandwidth = {key: pick(r[key] for r in reads) for key in reads[0]}
    sys.exit(report(args, spec, settings, timing, times, step_bytes, bandwidth, wall, busy - mine, steal))


def report(args, spec, settings, runs, times, step_bytes, bandwidth, wall, others, steal) -> int:
    """Print the table; 1 (the exit status) when a peer column ran below its bare speed."""
    version = importlib.metadata.version
    ct2_version = version("ctranslate2") if any("CTranslate2" in n for n in runs) else "-"
    summary = min if args.fastest else statistics.median
    print(f"\n{spec.name}: src {args.src_len} -> exactly {args.out_len} tokens, {args.threads} threads, "
          f"{'fastest' if args.fastest else 'median'} of "
          f"{args.rounds} rounds{f' of {args.repeat} decodes back to back' if args.repeat > 1 else ''}, "
          f"each engine in a fresh process of its own every round, "
          f"{wall / 60:.1f} min; meanwhile other processes used {max(others, 0) / wall:.2f} and the "
          f"hypervisor stole {steal / wall:.2f} of the {os.cpu_count()} cores; onnxruntime "
          f"{version('onnxruntime')}, torch {version('torch')}, ctranslate2 {ct2_version}, "
          f"{cpu_name()}; read bandwidth ({args.threads} threads, {'fastest' if args.fastest else 'median'} of one "
          f"measurement per round) {bandwidth['memory'] / 1e9:.1f} GB/s from memory"
          + "".join(f", {bandwidth[s] / 1e9:.1f} GB/s over the {b / 1e6:.0f} MB of the{s or ' fp32'} step"
                    for s, b in step_bytes.items()))
    names = [n for n in runs if not n.endswith(" int8")]
    orts = [n for n in names if n.startswith("ORT")]
    ratios = [(o, ref) for ref in (ENGINES["ct2"], ENGINES["torch"]) if ref in names for o in orts]
    ratios += [(SHORTLIST, ENGINES["ort18"])] if SHORTLIST in runs else []
    ratios += [(ENGINES["generate"], ENGINES["ort18"])] if {ENGINES["generate"], ENGINES["ort18"]} <= set(names) else []
    head = ["setting", "precision"] + [f"{n} (tok/s)" for n in names] + [f"{o} / {r}" for o, r in ratios]
    head += ["weights/step (MB)", "% of the read bandwidth over the step's bytes: " + ", ".join(names)] \
        if step_bytes else []
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    invalid_cells = []
    for (batch, beam) in settings:
        for suffix in ("", " int8") if args.int8 else ("",):
            speed = {n: batch * args.out_len / summary(times[(batch, beam), n + suffix])
                     for n in names if (n + suffix) in runs}
            cells = [f"{speed[n]:.0f}" if n in speed else "-" for n in names]
            cells += [f"{speed[o] / speed[r]:.2f}" if o in speed and r in speed else "-" for o, r in ratios]
            if suffix in step_bytes:
                cells += [f"{step_bytes[suffix] / 1e6:.0f}", ", ".join(
                    f"{fraction(step_bytes[suffix], speed[n] / batch, bandwidth[suffix]):.0%}"
                    if n in speed and n != SHORTLIST
                    else "-" for n in names)]  # the shortlist reads fewer rows than the step graph holds
            setting = f"batch {batch}, {'greedy' if beam == 1 else f'beam {beam}'}"
            print(f"| {setting} | {'int8' if suffix else 'fp32'} | " + " | ".join(cells) + " |")
            bare = f"{ENGINES['ct2']} bare"
            if bare in speed and (why := invalid(f"{ENGINES['ct2']}{suffix} ({setting})", speed[ENGINES["ct2"]],
                                                 speed[bare])):
                invalid_cells.append(why)
    spread = {n: statistics.median(max(t) / min(t) for (_, name), t in times.items() if name == n) for n in runs}
    print("Noise: slowest / fastest round, median over settings: "
          + ", ".join(f"{n} {v:.2f}" for n, v in spread.items()))
    for why in invalid_cells:
        print(why + f" (limit {BARE_LIMIT:.0%}): this table is INVALID, the peer was slowed by its conditions")
    return 1 if invalid_cells else 0


if __name__ == "__main__":
    main()
