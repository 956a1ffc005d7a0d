"""bench_generate.py --shape: a published LLM's shape on tfspec (fp32, int8, int4) against
llama.cpp (F32, Q8_0, Q4_0) and ONNX Runtime GenAI's int4 model builder, on the same weights.

transformers writes random weights in the shape of a published checkpoint (SHAPES) with a
sentencepiece tokenizer trained on tfspec's sample corpus (llama.cpp's converter refuses BPE
tokenizers it does not know; ids are fed directly, so the tokenizer only has to convert). From
that directory, as a user would: `tfspec import` then `tfspec export --fused` (fp32, `--int8`,
`--int4`), llama.cpp's own converter and quantiser (tools/bench/to_gguf.py), and
`python -m onnxruntime_genai.models.builder -p int4 -e cpu`. Every engine is then timed in a
fresh process of its own (tools/bench/isolated.py): llama.cpp in the Python that has llama-cpp-python
($LLAMA_CPP_PYTHON), which holds nothing of tfspec. This module imports no engine; the bytes a
llama.cpp step reads come from its GGUF reader, gguf (llama.cpp's gguf-py, in $LLAMA_CPP_SOURCE).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from to_gguf import LLAMA_CPP_PYTHON, LLAMA_CPP_SOURCE, add_sentencepiece, gguf_files
from isolated import Job, with_bare

SHAPES = {
    "qwen2.5-0.5b": ("Qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
                                   rope_theta=1000000.0, rms_norm_eps=1e-6)),
    "llama-3.2-1b": ("Llama", dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True,
                                   rope_theta=500000.0, rms_norm_eps=1e-5, rope_scaling={
                                       "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    "tinyllama-1.1b": ("Llama", dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                     num_attention_heads=32, num_key_value_heads=4, rms_norm_eps=1e-5)),
}
"""Published configurations (Qwen/Qwen2.5-0.5B, meta-llama/Llama-3.2-1B, TinyLlama-1.1B)."""


def write_published(shape: str, layers: int | None, directory: Path, vocab: int | None = None) -> tuple[int, int]:
    """Random weights in ``shape`` (``layers`` and ``vocab`` overriding its depth and vocabulary,
    for a smoke run), saved by transformers with a trained sentencepiece tokenizer: (parameters,
    vocabulary size)."""
    import torch
    import transformers

    family, config = SHAPES[shape]
    config = dict(config, **({"num_hidden_layers": layers} if layers else {}), **({"vocab_size": vocab} if vocab else {}))
    config = getattr(transformers, f"{family}Config")(max_position_embeddings=4096, bos_token_id=1,
                                                      eos_token_id=2, **config)
    torch.manual_seed(0)
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    model.save_pretrained(directory)
    sample = Path(__file__).resolve().parents[2] / "tfspec" / "data" / "sample"
    add_sentencepiece(directory, (sample / "train.en").read_text().splitlines())
    return sum(t.numel() for t in model.parameters()), config.vocab_size


def tfspec_exports(hf_dir: Path, work: Path) -> dict[str, Path]:
    """Name -> directory of tfspec's exports (fp32, int8, and int4 where this tfspec has
    `export --int4`), made by the CLI as a user would: fp32 and int8 with `--fused` (the faster
    CPU graphs); int4 is written streamed, which `--fused` cannot rewrite, so its graphs are plain."""
    tfspec = str(Path(sys.executable).with_name("tfspec"))
    subprocess.run([tfspec, "import", str(hf_dir), "-o", str(work / "imported"), "--quiet"], check=True)
    flags = {"tfspec fp32": ["--fused"], "tfspec int8": ["--fused", "--int8"]}
    if "--int4" in subprocess.run([tfspec, "export", "--help"], capture_output=True, text=True).stdout:
        flags["tfspec int4"] = ["--int4"]
    out = {}
    for name, extra in flags.items():
        out[name] = work / name.replace(" ", "-")
        subprocess.run([tfspec, "export", str(work / "imported"), "-o", str(out[name]), "--no-check", *extra],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def genai_int4(hf_dir: Path, out: Path) -> Path:
    """ONNX Runtime GenAI's model builder at int4 on CPU (its defaults: blocks of 32, the
    output projection quantised too), from the same directory."""
    done = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(out),
                           "-p", "int4", "-e", "cpu", "-c", str(out.with_name("genai-cache"))],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"onnxruntime_genai.models.builder failed:\n{done.stderr[-3000:]}")
    return out


def prepare(hf_dir: Path, work: Path) -> tuple[dict[str, Job], dict[str, int]]:
    """(name -> generating job, name -> bytes of weights a decoding step reads) for every engine;
    the peers (llama.cpp, GenAI) also bare (tools/bench/peer_bare.py under ``python -I``)."""
    import onnxruntime

    from tfspec.backends.onnx.runtime import spinning

    jobs, reads = {}, {}
    for name, directory in tfspec_exports(hf_dir, work).items():
        jobs[name] = Job("bench_generate", "ours", ("onnxruntime",), {"directory": str(directory)})
        reads[name] = onnx_bytes(directory / "decoder.onnx")
    for kind, path in gguf_files(hf_dir, work / "gguf").items():
        name = f"llama.cpp {kind.upper()}"
        jobs[name] = Job("peer_bare", "llama_generate", ("llama_cpp",), {"model": str(path)}, python=LLAMA_CPP_PYTHON)
        reads[name] = gguf_bytes(path)
    genai = genai_int4(hf_dir, work / "genai-int4")
    jobs["ORT GenAI int4"] = Job("peer_bare", "genai_generate", ("onnxruntime_genai",), {
        "model": str(genai), "session_options": dict(spinning(onnxruntime.__version__))})
    reads["ORT GenAI int4"] = onnx_bytes(genai / "model.onnx")
    return with_bare(jobs, [n for n in jobs if not n.startswith("tfspec")]), reads


def onnx_bytes(graph: Path) -> int:
    """``bandwidth.weights_read_per_step`` of an ONNX graph (external data not loaded)."""
    from bandwidth import weights_read_per_step

    return weights_read_per_step(graph)


def gguf_bytes(path: Path) -> int:
    """Bytes of weights a llama.cpp step reads: every tensor of the GGUF file but the token
    embedding table, unless the output projection is that table (tied: no `output.weight`)."""
    sys.path.insert(0, str(LLAMA_CPP_SOURCE / "gguf-py"))
    from gguf import GGUFReader  # llama.cpp's gguf-py, not this directory's gguf.py

    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    tied = "output.weight" not in tensors
    return sum(n for name, n in tensors.items() if tied or name != "token_embd.weight")


def llama_buffers(jobs: dict[str, Job], check: dict, threads: int) -> tuple[dict, str]:
    """(``jobs`` with llama.cpp's extra buffer types off where they crash, a line saying so):
    on a 2-core AMX Xeon, llama.cpp 0.3.36 built with GGML_NATIVE segfaulted in llama_decode on
    every quantised file with them on (F32 ran); off, the peer loses its repacked kernels."""
    off = {}
    for name, job in jobs.items():
        if job.function == "llama_generate" and not name.endswith(" bare"):
            try:
                job.but(kwargs=check).run(threads)
            except SystemExit:
                off[name] = True
    jobs = {n: j.but(kwargs={"extra_buffers": False}) if n.removesuffix(" bare") in off else j for n, j in jobs.items()}
    return jobs, (f"llama.cpp: extra buffer types (repacking, AMX) crashed on {', '.join(off)}; those run without "
                  "them (slower than llama.cpp's best on this CPU)" if off else "llama.cpp: extra buffer types on")


def checked(jobs: dict[str, Job], hf_dir: Path, check: dict, threads: int) -> str:
    """A line: greedy tokens of the float32 engines equal to transformers' (each in a process
    of its own); the quantised ones differ by design on random weights."""
    hf = Job("peer_bare", "hf_generate", ("torch", "transformers"), {"model": str(hf_dir)})
    ref = hf.but(kwargs=check).run(threads)[0]
    got = {name: job.but(kwargs=check).run(threads)[0] for name, job in jobs.items() if name in FP32}
    return "greedy tokens equal to transformers' (float32 engines): " + ", ".join(
        f"{name} {sum(a == b for r, o in zip(ref, out) for a, b in zip(r, o))}/{sum(map(len, ref))}"
        for name, out in got.items())


FP32 = ("tfspec fp32", "llama.cpp F32")
PAIRS = (("tfspec int4", "llama.cpp Q4_0"), ("tfspec int4", "ORT GenAI int4"), ("tfspec int8", "llama.cpp Q8_0"),
         ("tfspec fp32", "llama.cpp F32"))
"""The comparisons the table states as ratios (> 1: tfspec faster)."""


def table(results: dict, reads: dict, bandwidth: float, batches, new: int, prefill: int) -> list[str]:
    """Markdown rows: every engine's decode tok/s at each batch, prefill tok/s, peak RSS, bytes
    read per step and the fraction of the bandwidth at batch 1; then the ratios and bare checks."""
    import statistics

    from peer_bare import invalid

    med = {n: [statistics.median(r["seconds"][i] for r in runs) for i in range(len(batches) + 1)]
           for n, runs in results.items()}
    speed = {n: [b * new / s for b, s in zip(batches, m)] + [prefill / m[-1]] for n, m in med.items()}
    rows = ["| engine | " + " | ".join(f"decode b{b} (tok/s)" for b in batches) +
            f" | prefill {prefill} (tok/s) | peak RSS (MiB) | weights read / token (MB) | b1 % of bandwidth |",
            "|---|" + "---|" * (len(batches) + 4)]
    for n, s in speed.items():
        base = n.removesuffix(" bare")
        rss = max(r["rss"] for r in results[n]) / 2**20
        rows.append(f"| {n} | " + " | ".join(f"{v:.1f}" for v in s[:-1]) + f" | {s[-1]:.0f} | {rss:.0f} | "
                    f"{reads[base] / 1e6:.0f} | {reads[base] * s[0] / bandwidth:.0%} |")
    for ours, peer in [(o, p) for o, p in PAIRS if o in speed and p in speed]:
        rows.append(f"{ours} / {peer}: " + ", ".join(f"decode b{b} {speed[ours][i] / speed[peer][i]:.2f}"
                                                     for i, b in enumerate(batches)) +
                    f", prefill {speed[ours][-1] / speed[peer][-1]:.2f}")
    if "tfspec int4" not in speed:
        rows.append("tfspec int4: not measured (this tfspec has no `export --int4`)")
    rows += [why for n in speed if f"{n} bare" in speed for i, b in enumerate(batches)
             if (why := invalid(f"{n} (batch {b})", speed[n][i], speed[f"{n} bare"][i]))]
    return rows

