"""Decoder-only generation: an imported Llama (or Mixtral) on tfspec vs transformers vs CTranslate2.

transformers writes a Llama-shaped model with random weights (default ~110M parameters:
d_model 768, 12 layers, 12 heads sharing 4 key/value heads, SwiGLU 2048, 32000 tokens) and a
word-level tokenizer for it; then every engine starts from that directory, as a user would:
tfspec imports it (`tfspec import`), exports its ONNX graphs (standard, and `--fused` with
the in-place cache) and generates with its KV-cached search on onnxruntime; onnxruntime-genai
runs the same weights exported by tfspec in its format (`export --format genai`: its own
decoding loop, the same onnxruntime); CTranslate2 converts it
(`TransformersConverter`) and runs `Generator.generate_batch`; transformers runs `generate`
(KV cache, SDPA). Prompts of 32 random
tokens after BOS, exactly 64 new tokens (greedy; end of sentence forbidden before), batch 1 and
8, float32, the same threads for all. Before timing, every engine's tokens are compared with
transformers' (each in a process of its own). Every engine is timed in a fresh process of its
own every round (tools/bench/isolated.py), rounds rotate which goes first, and each peer also runs
bare, in a process that imports nothing but it (tools/bench/peer_bare.py): a peer column more than 10%
below its bare speed marks the table INVALID and the tool exits with status 1. Ratios > 1:
tfspec is faster. The table shows the bytes of weights one step reads (tfspec's step graph;
every engine reads the same matrices) and the fraction of the machine's read bandwidth,
measured once per round (tools/bench/bandwidth.py), each engine reaches.

    python tools/bench/bench_generate.py                      # ~4 minutes on 2 quiet cores (3 rounds)
    python tools/bench/bench_generate.py --layers 4 --rounds 2  # a quick look
    python tools/bench/bench_generate.py --experts 8 --top-k 2  # Mixtral-shaped: 8 experts of d_ff, 2 per token
    python tools/bench/bench_generate.py --shape qwen2.5-0.5b    # against llama.cpp and ORT GenAI int4 (below)
    python tools/bench/bench_generate.py --shape llama-3.2-1b --quick   # a smoke run: 2 layers, 1 round

With ``--shape`` (tools/bench/llm_engines.py), random weights in a published model's shape go to
tfspec (fp32, --int8, --int4; `export --fused`), llama.cpp (F32, Q8_0, Q4_0 by its own converter
and quantiser: tools/bench/to_gguf.py; batch 8 through its batched decoding, each row a sequence of
one context) and ONNX Runtime GenAI's int4 model builder: decode tokens/s at batch 1 and 8,
prefill tokens/s of a --prefill-token prompt, each engine's peak RSS, the bytes of weights a
step reads in each engine's own files and the fraction of the bandwidth at batch 1.

With ``--experts``, transformers writes a MixtralForCausalLM instead; onnxruntime-genai's format
carries no mixture of experts and CTranslate2's converter registers no Mixtral, so both sit out;
the bytes a step reads count the chosen experts only (the active parameters' share).

Needs, beyond the README's install: CTranslate2 (``pip install ctranslate2``, a benchmark-only
dependency; not with ``--experts`` or ``--shape``); with ``--shape``, llama.cpp (its converter's
source tree and a Python with llama-cpp-python: tools/bench/to_gguf.py says where and how) and
onnxruntime-genai's model builder with what it imports (``onnx-ir``: the dev and genai extras
install it). Each is checked before anything is written (tools/bench/needs.py): a missing one is an
``error:`` line saying how to get it, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bandwidth import cpu_name, fraction, weights_read_per_step
from bench_decode import cpu_seconds
from isolated import Job, conditions, interleave, with_bare
from llm_engines import SHAPES
from needs import imports, module, path, require
from peer_bare import BARE_LIMIT, fastest_ct2, generate, invalid
from tfspec import build_graph, load_spec
from tfspec.analysis import analyze_params
from tfspec.backends.onnx import export

TAKES = "~4 minutes on 2 quiet cores (3 rounds); `--shape qwen2.5-0.5b --rounds 2` ~22 minutes with its exports"
"""How long a run takes (tools/README.md lists it)."""
SETTINGS = (1, 8)  # batch sizes


def write_llama(args, directory: Path) -> tuple[int, list[str]]:
    """A random LlamaForCausalLM (MixtralForCausalLM with ``--experts``) and a word-level
    tokenizer for its ids, saved by transformers: (its parameters, the token of each id)."""
    import torch
    import transformers
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    family = "Mixtral" if args.experts else "Llama"
    moe = {"num_local_experts": args.experts, "num_experts_per_tok": args.top_k} if args.experts else {}
    config = getattr(transformers, f"{family}Config")(
        vocab_size=args.vocab, hidden_size=args.d_model, intermediate_size=args.d_ff, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2, **moe)
    torch.manual_seed(0)
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    model.save_pretrained(directory)
    words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, args.vocab)}}
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(words, unk_token="<unk>")),
                                                     bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tokenizer.save_pretrained(directory)
    return sum(t.numel() for t in model.parameters()), [w for w, _ in sorted(words.items(), key=lambda kv: kv[1])]


def prepare(args, hf_dir: Path, words: list[str], work: Path) -> dict[str, Job]:
    """Name -> the job generating with that engine (``generate`` in tools/bench/peer_bare.py: each
    process times every batch, or with ``check`` gives its tokens), each run in a process of
    its own (tools/bench/isolated.py); here only tfspec's import and exports and CTranslate2's
    conversion are made. "<peer> bare": the peer in a process that imports nothing else."""
    import onnxruntime

    from tfspec.backends.onnx.variants.genai import export_genai
    from tfspec.backends.onnx.runtime import spinning
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights

    tfspec = Path(sys.executable).with_name("tfspec")
    subprocess.run([str(tfspec), "import", str(hf_dir), "-o", str(work / "imported"), "--quiet"], check=True)
    model = build_module(load_spec(work / "imported")).eval()
    load_weights(model, work / "imported" / "model.safetensors")
    export(model, work / "onnx", parity=False)
    export(model, work / "fused", parity=False, fused=True)  # the in-place cache (docs/export-onnx.md)
    jobs = {"tfspec ORT": Job("bench_generate", "ours", ("onnxruntime",), {"directory": str(work / "onnx")}),
            "tfspec ORT fused": Job("bench_generate", "ours", ("onnxruntime",), {"directory": str(work / "fused")}),
            "transformers": Job("peer_bare", "hf_generate", ("torch", "transformers"), {"model": str(hf_dir)})}
    if not args.experts:  # genai's format carries no mixture of experts
        export_genai(model, work / "genai", parity=False)  # the threads and spinning tfspec's sessions get:
        jobs["ORT GenAI"] = Job("peer_bare", "genai_generate", ("onnxruntime_genai",), {
            "model": str(work / "genai"), "session_options": dict(spinning(onnxruntime.__version__))})
    if not args.experts:  # CTranslate2's converter registers no Mixtral (4.8.5: MixtralConfig refused)
        from ctranslate2.converters import TransformersConverter
        TransformersConverter(str(hf_dir)).convert(str(work / "ct2"), force=True)
        (work / "ct2" / "words.json").write_text(json.dumps(words))
        jobs["CTranslate2"] = Job("peer_bare", "ct2_generate", ("ctranslate2",), {"model": str(work / "ct2")})
    return with_bare(jobs, [name for name in jobs if not name.startswith("tfspec")])


def ours(threads: int, directory: str, prompts: dict, n: int, check: str | None = None, prefill: str | None = None):
    """In a worker: ``peer_bare.generate`` for tfspec's KV-cached greedy search on onnxruntime."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.search import SearchOptions, search

    dec = OnnxModel(directory, device="cpu", threads=threads).decoder()
    return generate(lambda rows, k: search(dec, None, SearchOptions(beam=1, min_length=k, max_length=k, max_extra=k),
                                           rows), prompts, n, check, prefill)


def ours_seq2seq(threads: int, directory: str, prompts: dict, n: int, check: str | None = None,
                 prefill: str | None = None):
    """``ours`` for a seq2seq export: each prompt row a source, exactly ``n`` greedy target tokens."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.search import SearchOptions, search

    dec = OnnxModel(directory, device="cpu", threads=threads).decoder()
    options = lambda k: SearchOptions(beam=1, min_length=k, max_length=k, max_extra=k)  # noqa: E731
    return generate(lambda rows, k: search(dec, rows, options(k), src_mask=np.ones(rows.shape, dtype=bool)),
                    prompts, n, check, prefill)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("vocab", 32000), ("d-model", 768), ("d-ff", 2048), ("layers", 12), ("heads", 12),
                          ("kv-heads", 4), ("prompt", 32), ("new", 64), ("rounds", 3), ("threads", 2),
                          ("experts", 0), ("top-k", 2)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--shape", choices=sorted(SHAPES), help="a published LLM's shape (random weights) on tfspec "
                   "fp32/int8/int4 against llama.cpp F32/Q8_0/Q4_0 and ORT GenAI int4 (tools/bench/llm_engines.py), with "
                   "prefill at --prefill tokens and peak RSS; the sizes above are then ignored")
    p.add_argument("--layers-override", type=int, help="with --shape: this many layers instead of the published depth")
    p.add_argument("--prefill", type=int, default=512, help="with --shape: prompt tokens of the prefill column")
    p.add_argument("--quick", action="store_true", help="with --shape: a smoke run (2 layers, a 16,384-token vocabulary, 1 round, 16 "
                   "new tokens)")
    args = p.parse_args()
    require(needs(args))
    if args.shape:
        return published(args)
    with tempfile.TemporaryDirectory(prefix="bench-generate-") as tmp:
        work = Path(tmp)
        prompts, _ = save_prompts(work, args.vocab, args.prompt, args.prefill)
        params, words = write_llama(args, work / "hf")
        jobs = prepare(args, work / "hf", words, work)
        check = {"prompts": {}, "n": args.new, "check": prompts["8"]}
        ref = jobs["transformers"].but(kwargs=check).run(args.threads)[0]  # each check in a process of its own
        got = {name: job.but(kwargs=check).run(args.threads)[0] for name, job in jobs.items()
               if name != "transformers" and not name.endswith(" bare")}
        print(f"greedy tokens equal to transformers' (8 prompts x {args.new}): " + ", ".join(
            f"{name} {sum(a == b for r, o in zip(ref, out) for a, b in zip(r, o))}/{sum(map(len, ref))}"
            for name, out in got.items()))
        step_bytes = weights_read_per_step(work / "onnx" / "decoder.onnx")
        if args.experts:  # a token reads its chosen experts only
            report = analyze_params(build_graph(load_spec(work / "imported")))
            step_bytes = step_bytes * report.active // report.total
        reads, read = [], Job("bandwidth", "read_bandwidth", ("torch",), {"rounds": 3})
        timing = {name: job.but(kwargs={"prompts": prompts, "n": args.new}) for name, job in jobs.items()}
        if "CTranslate2" in timing:  # the peer at its faster backend, its bare control alike
            env, why = fastest_ct2(timing["CTranslate2"], args.threads)
            print(f"CTranslate2 backend, {why}")
            timing |= {name: timing[name].but(env=env) for name in ("CTranslate2", "CTranslate2 bare")}
        cpu, wall = cpu_seconds(), time.perf_counter()
        results = interleave(timing, args.rounds, args.threads, lambda: reads.append(read.run(args.threads)[0]))
        (busy, steal, mine), wall = cpu_seconds() - cpu, time.perf_counter() - wall
    shape = f"Mixtral, {args.experts} experts (top {args.top_k})" if args.experts else "Llama"
    print(f"\n{shape} {params / 1e6:.0f}M ({args.layers} layers, d_model {args.d_model}, {args.heads} heads / "
          f"{args.kv_heads} kv, vocab {args.vocab}): prompt {args.prompt} -> exactly {args.new} new tokens, greedy, "
          f"fp32, {args.threads} threads, median of {args.rounds}, each engine in a fresh process of its own every "
          f"round; meanwhile other processes used {max(busy - mine, 0) / wall:.2f} and the hypervisor stole "
          f"{steal / wall:.2f} cores; {cpu_name()}; {conditions()}; read bandwidth {statistics.median(reads) / 1e9:.1f} GB/s, "
          f"weights read per step {step_bytes / 1e6:.0f} MB")
    sys.exit(table(args, results, step_bytes, statistics.median(reads)))


def needs(args) -> list[str | None]:
    """What this run needs beyond the README's install (the module docstring), checked by ``require``."""
    if args.shape:
        from to_gguf import INSTALL, LLAMA_CPP_PYTHON, LLAMA_CPP_SOURCE

        return [imports("onnxruntime_genai.models.builder", 'pip install -e ".[cpu,dev]" (or tfspec[genai]) '
                        "installs onnx-ir, which onnxruntime-genai's model builder imports"),
                path(LLAMA_CPP_SOURCE / "convert_hf_to_gguf.py", INSTALL),
                imports("llama_cpp", INSTALL, python=LLAMA_CPP_PYTHON)]
    return [] if args.experts else [module("ctranslate2", "pip install ctranslate2 (a benchmark-only dependency)")]


def save_prompts(work: Path, vocab: int, width: int, prefill: int) -> tuple[dict, str]:
    """(batch -> .npy of prompts of ``width`` random tokens after BOS, .npy of one prompt of
    ``prefill`` tokens)."""
    rng, prompts = np.random.default_rng(0), {}
    for b in SETTINGS:
        np.save(work / f"prompts-{b}.npy", np.hstack([np.ones((b, 1), np.int64), rng.integers(3, vocab, (b, width))]))
        prompts[str(b)] = str(work / f"prompts-{b}.npy")
    np.save(work / "prefill.npy", np.hstack([np.ones((1, 1), np.int64), rng.integers(3, vocab, (1, prefill - 1))]))
    return prompts, str(work / "prefill.npy")


def published(args) -> None:
    """``--shape``: every engine of tools/bench/llm_engines.py on one published shape, isolated."""
    import llm_engines

    if args.quick:
        args.layers_override, args.rounds, args.new = args.layers_override or 2, 1, 16
    with tempfile.TemporaryDirectory(prefix="bench-generate-", dir=os.environ.get("BENCH_TMP")) as tmp:
        work = Path(tmp)
        params, vocab = llm_engines.write_published(args.shape, args.layers_override, work / "hf",
                                                    16384 if args.quick else None)
        prompts, prefill = save_prompts(work, vocab, args.prompt, args.prefill)
        jobs, reads = llm_engines.prepare(work / "hf", work)
        jobs, why = llm_engines.llama_buffers(jobs, {"prompts": {}, "n": 2, "check": prompts["1"]}, args.threads)
        print(why)
        print(llm_engines.checked(jobs, work / "hf", {"prompts": {}, "n": args.new, "check": prompts["8"]},
                                  args.threads))
        reads_bw, read = [], Job("bandwidth", "read_bandwidth", ("torch",), {"rounds": 3})
        timing = {n: job.but(kwargs={"prompts": prompts, "n": args.new, "prefill": prefill}) for n, job in jobs.items()}
        cpu, wall = cpu_seconds(), time.perf_counter()
        results = interleave(timing, args.rounds, args.threads, lambda: reads_bw.append(read.run(args.threads)[0]))
        (busy, steal, mine), wall = cpu_seconds() - cpu, time.perf_counter() - wall
    layers = args.layers_override or SHAPES[args.shape][1]["num_hidden_layers"]
    print(f"\n{args.shape} shape{' (smoke run: vocabulary 16,384)' if args.quick else ''}, random weights, {params / 1e6:.0f}M parameters ({layers} layers): prompt "
          f"{args.prompt} -> exactly {args.new} new tokens, greedy, {args.threads} threads, median of {args.rounds}, "
          f"each engine in a fresh process of its own every round; meanwhile other processes used "
          f"{max(busy - mine, 0) / wall:.2f} and the hypervisor stole {steal / wall:.2f} cores; {cpu_name()}; {conditions()}; read "
          f"bandwidth {statistics.median(reads_bw) / 1e9:.1f} GB/s")
    rows = llm_engines.table(results, reads, statistics.median(reads_bw), SETTINGS, args.new, args.prefill)
    print("\n".join(rows))
    sys.exit(1 if any(r.startswith("INVALID") for r in rows) else 0)


def table(args, results: dict, step_bytes: int, bandwidth: float) -> int:
    """Print the table; 1 (the exit status) when a peer column ran below its bare speed."""
    names = list(results)
    ratios = [(t, n) for t in names if t.startswith("tfspec") for n in names
              if not n.startswith("tfspec") and not n.endswith(" bare")]
    print("| batch | " + " | ".join(f"{n} (tok/s)" for n in names) + " | " +
          " | ".join(f"{t} / {n}" for t, n in ratios) + " | % of read bandwidth: " + ", ".join(names) + " |")
    print("|---|" + "---|" * (len(names) + len(ratios) + 1))
    invalid_cells = []
    for i, batch in enumerate(SETTINGS):
        speed = {n: batch * args.new / statistics.median(r["seconds"][i] for r in results[n]) for n in names}
        print(f"| {batch} | " + " | ".join(f"{speed[n]:.0f}" for n in names) + " | " +
              " | ".join(f"{speed[t] / speed[n]:.2f}" for t, n in ratios) + " | " +
              ", ".join(f"{fraction(step_bytes, speed[n] / batch, bandwidth):.0%}" for n in names) + " |")
        invalid_cells += [why for n in names if f"{n} bare" in speed
                          and (why := invalid(f"{n} (batch {batch})", speed[n], speed[f"{n} bare"]))]
    for why in invalid_cells:
        print(why + f" (limit {BARE_LIMIT:.0%}): this table is INVALID, the peer was slowed by its conditions")
    return 1 if invalid_cells else 0

if __name__ == "__main__":
    main()
