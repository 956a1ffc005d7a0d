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
transformers'. Ratios > 1: tfspec is faster. The table shows the bytes of weights one step
reads (tfspec's step graph; every engine reads the same matrices) and the fraction of the
machine's read bandwidth, measured once per round (tools/bandwidth.py), each engine reaches.

    python tools/bench_generate.py                      # ~4 minutes on 2 quiet cores
    python tools/bench_generate.py --layers 4 --rounds 2  # a quick look
    python tools/bench_generate.py --experts 8 --top-k 2  # Mixtral-shaped: 8 experts of d_ff, 2 per token

With ``--experts``, transformers writes a MixtralForCausalLM instead; onnxruntime-genai's format
carries no mixture of experts and CTranslate2's converter registers no Mixtral, so both sit out;
the bytes a step reads count the chosen experts only (the active parameters' share).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bandwidth import cpu_name, fraction, read_bandwidth, weights_read_per_step
from bench_decode import cpu_seconds
from tfspec import build_graph, load_spec
from tfspec.analysis import analyze_params
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.runtime import spinning
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.search import SearchOptions, search

SETTINGS = (1, 8)  # batch sizes


def write_llama(args, directory: Path):
    """A random LlamaForCausalLM (MixtralForCausalLM with ``--experts``) and a word-level
    tokenizer for its ids, saved by transformers."""
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
    return model, [w for w, _ in sorted(words.items(), key=lambda kv: kv[1])]


def engines(args, hf_dir: Path, hf_model, words: list[str], work: Path) -> dict:
    """Name -> generate(prompts (B, L) with BOS first, n) -> exactly n new token ids per row."""
    import ctranslate2
    import onnxruntime
    import onnxruntime_genai as og
    from ctranslate2.converters import TransformersConverter

    from tfspec.backends.onnx.genai import export_genai

    tfspec = Path(sys.executable).with_name("tfspec")
    subprocess.run([str(tfspec), "import", str(hf_dir), "-o", str(work / "imported"), "--quiet"], check=True)
    spec = load_spec(work / "imported")
    model = build_module(spec).eval()
    load_weights(model, work / "imported" / "model.safetensors")
    export(model, work / "onnx", parity=False)
    export(model, work / "fused", parity=False, fused=True)  # the in-place cache (docs/export-onnx.md)
    dec, fused = (OnnxModel(work / d, device="cpu", threads=args.threads).decoder() for d in ("onnx", "fused"))
    if not args.experts:  # genai's format carries no mixture of experts
        export_genai(model, work / "genai", parity=False)
        config = og.Config(str(work / "genai"))  # the threads and spinning tfspec's sessions get
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {
            "intra_op_num_threads": args.threads, **dict(spinning(onnxruntime.__version__))}}}}))
        genai_model = og.Model(config)
    options = lambda n: SearchOptions(beam=1, min_length=n, max_length=n, max_extra=n)
    if not args.experts:  # CTranslate2's converter registers no Mixtral (4.8.5: MixtralConfig refused)
        TransformersConverter(str(hf_dir)).convert(str(work / "ct2"), force=True)
        gen = ctranslate2.Generator(str(work / "ct2"), device="cpu", intra_threads=args.threads, inter_threads=1)
    index = {w: i for i, w in enumerate(words)}

    def ct2(prompts, n):
        res = gen.generate_batch([[words[i] for i in row] for row in prompts], max_length=n, min_length=n,
                                 sampling_topk=1, include_prompt_in_result=False)
        return [[index[t] for t in r.sequences[0]] for r in res]

    def genai(prompts, n):
        params = og.GeneratorParams(genai_model)
        params.set_search_options(batch_size=len(prompts), min_length=prompts.shape[1] + n,
                                  max_length=prompts.shape[1] + n)
        generator = og.Generator(genai_model, params)
        generator.append_tokens(prompts.astype(np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        return [generator.get_sequence(i)[prompts.shape[1]:].tolist() for i in range(len(prompts))]

    def hf(prompts, n):
        with torch.inference_mode():
            out = hf_model.generate(torch.from_numpy(prompts), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                    pad_token_id=0)
        return out[:, prompts.shape[1]:].tolist()

    others = {} if args.experts else {"ORT GenAI": genai, "CTranslate2": ct2}
    return {"tfspec ORT": lambda prompts, n: search(dec, None, options(n), prompts),
            "tfspec ORT fused": lambda prompts, n: search(fused, None, options(n), prompts),
            "transformers": hf, **others}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("vocab", 32000), ("d-model", 768), ("d-ff", 2048), ("layers", 12), ("heads", 12),
                          ("kv-heads", 4), ("prompt", 32), ("new", 64), ("rounds", 3), ("threads", 2),
                          ("experts", 0), ("top-k", 2)):
        p.add_argument(f"--{name}", type=int, default=default)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    prompts = {b: np.hstack([np.ones((b, 1), np.int64), rng.integers(3, args.vocab, (b, args.prompt))])
               for b in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="bench-generate-") as tmp:
        hf_model, words = write_llama(args, Path(tmp) / "hf")
        runs = engines(args, Path(tmp) / "hf", hf_model, words, Path(tmp))
        ref = runs["transformers"](prompts[8], args.new)
        total = sum(map(len, ref))
        print(f"greedy tokens equal to transformers' (8 prompts x {args.new}): " + ", ".join(
            f"{name} {sum(a == b for r, o in zip(ref, run(prompts[8], args.new)) for a, b in zip(r, o))}/{total}"
            for name, run in runs.items() if name != "transformers"))
        times, order, reads = {}, list(runs), []
        step_bytes = weights_read_per_step(Path(tmp) / "onnx" / "decoder.onnx")
        if args.experts:  # a token reads its chosen experts only
            report = analyze_params(build_graph(load_spec(Path(tmp) / "imported")))
            step_bytes = step_bytes * report.active // report.total
        cpu, wall = cpu_seconds(), time.perf_counter()
        for r in range(args.rounds):
            reads.append(read_bandwidth(args.threads, rounds=3))  # in the rounds: under the same load
            for batch in SETTINGS:
                for name in order[r % len(order):] + order[:r % len(order)]:
                    start = time.perf_counter()
                    runs[name](prompts[batch], args.new)
                    times.setdefault((batch, name), []).append(time.perf_counter() - start)
        (busy, steal, mine), wall = cpu_seconds() - cpu, time.perf_counter() - wall
    params = sum(t.numel() for t in hf_model.parameters())
    shape = f"Mixtral, {args.experts} experts (top {args.top_k})" if args.experts else "Llama"
    print(f"\n{shape} {params / 1e6:.0f}M ({args.layers} layers, d_model {args.d_model}, {args.heads} heads / "
          f"{args.kv_heads} kv, vocab {args.vocab}): prompt {args.prompt} -> exactly {args.new} new tokens, greedy, "
          f"fp32, {args.threads} threads, median of {args.rounds}; meanwhile other processes used "
          f"{max(busy - mine, 0) / wall:.2f} and the hypervisor stole {steal / wall:.2f} cores; "
          f"{cpu_name()}; read bandwidth {statistics.median(reads) / 1e9:.1f} GB/s, "
          f"weights read per step {step_bytes / 1e6:.0f} MB")
    names = list(runs)
    ratios = [(t, n) for t in names if t.startswith("tfspec") for n in names if not n.startswith("tfspec")]
    print("| batch | " + " | ".join(f"{n} (tok/s)" for n in names) + " | " +
          " | ".join(f"{t} / {n}" for t, n in ratios) + " | % of read bandwidth: " + ", ".join(names) + " |")
    print("|---|" + "---|" * (len(names) + len(ratios) + 1))
    for batch in SETTINGS:
        speed = {n: batch * args.new / statistics.median(times[batch, n]) for n in names}
        print(f"| {batch} | " + " | ".join(f"{speed[n]:.0f}" for n in names) + " | " +
              " | ".join(f"{speed[t] / speed[n]:.2f}" for t, n in ratios) + " | " +
              ", ".join(f"{fraction(step_bytes, speed[n] / batch, statistics.median(reads)):.0%}" for n in names) + " |")


if __name__ == "__main__":
    main()
