"""`tfspec serve` beside llama.cpp's server (llama-cpp-python's ``llama_cpp.server``) under the
same load from an outside load generator, guidellm, on the same model: throughput, time to first
token and inter-token latency percentiles at several request rates, and the saturation point.

    .venv/bin/python tools/bench_load.py --guidellm /path/to/venv/bin/guidellm \\
        --llama-python /path/to/llama-venv/bin/python --llama-src /path/to/vendor/llama.cpp \\
        [--hidden 512] [--layers 8] [--rates 1,2,4,8] [--seconds 30] [--threads 1] [--out DIR]

The model is a random Llama (seed 0) with a sentencepiece tokenizer trained on the sample
corpus (llama.cpp's converter refuses BPE tokenizers it does not know by their pre-tokenizer's
hash), saved by transformers, then imported and exported by tfspec and converted to a float32
GGUF by llama.cpp's own ``convert_hf_to_gguf.py``: the same weights at the same precision.
Weights are random, so every request runs to its ``max_tokens`` (guidellm sends ``ignore_eos``
too), as a load test wants.

Each server runs in its own process on the first ``--threads`` cores and guidellm on the next
(``os.sched_setaffinity``; on a machine with no core to spare, nothing is pinned). guidellm is
installed in a venv of its own (it has many dependencies): ``python -m venv V && V/bin/pip
install guidellm==0.8.1``. For each engine guidellm first runs its ``throughput`` profile (all
requests at once: the saturation throughput), then Poisson arrivals at each of ``--rates``;
the table holds output tokens per second, TTFT and ITL p50/p99 and guidellm's error count.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_serve import pinned, split_cores


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
                    ["export", directory / "ours", "-o", directory / "onnx", "--no-check"]):
        subprocess.run([sys.executable, "-m", "tfspec", *map(str, command)], check=True, capture_output=True)
    return directory / "onnx", directory / "model.gguf", hf


def convert(hf: Path, gguf: Path, llama_src: Path) -> None:
    """llama.cpp's converter, float32 (this interpreter has the torch and transformers it reads with)."""
    env = os.environ | {"PYTHONPATH": str(llama_src / "gguf-py")}
    subprocess.run([sys.executable, str(llama_src / "convert_hf_to_gguf.py"), str(hf), "--outfile", str(gguf),
                    "--outtype", "f32"], check=True, capture_output=True, env=env)
