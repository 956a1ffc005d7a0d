"""GGUF files for llama.cpp from a `save_pretrained` checkpoint, made by llama.cpp's own tools.

llama.cpp is the peer people deploy LLMs with on CPUs; comparing against it is only fair on
files its own converter wrote. F32 and Q8_0 come from the `convert_hf_to_gguf.py` that
llama-cpp-python's source vendors (run with a Python that has torch, transformers and
sentencepiece: tfspec's), Q4_0 (and Q8_0 where asked from F32) from
`llama_cpp.llama_model_quantize`, run in the Python that has llama-cpp-python (its own venv:
it does not hold tfspec). The converter refuses BPE tokenizers it does not know by their
pre-tokenizer's hash, so a random-weight checkpoint gets a trained sentencepiece model
(`add_sentencepiece`); the GGUF vocabulary is padded to the config's size, so ids stay those
of the checkpoint. Used by tools/bench/bench_generate.py and the serving benchmark (llama_cpp.server).

    python tools/bench/to_gguf.py HF_DIR -o OUT_DIR [--types f32 q8_0 q4_0]   # OUT_DIR/model-<type>.gguf

Where the tools are: $LLAMA_CPP_SOURCE (the vendored llama.cpp tree: convert_hf_to_gguf.py,
gguf-py) and $LLAMA_CPP_PYTHON (a python with llama_cpp); defaults below, made by ``INSTALL``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

LLAMA_CPP_SOURCE = Path(os.environ.get("LLAMA_CPP_SOURCE",
                                       "/work/llama-src/llama_cpp_python-0.3.36/vendor/llama.cpp"))
LLAMA_CPP_PYTHON = os.environ.get("LLAMA_CPP_PYTHON", "/work/llama-venv/bin/python")
INSTALL = ("python3 -m venv /work/llama-venv && CMAKE_ARGS=-DGGML_NATIVE=ON /work/llama-venv/bin/pip install "
           "llama-cpp-python==0.3.36 (a compiler and cmake build it), and its source for the converter: pip download "
           "--no-deps --no-binary :all: -d /work/llama-src llama-cpp-python==0.3.36 && tar -xzf "
           "/work/llama-src/llama_cpp_python-0.3.36.tar.gz -C /work/llama-src (or set $LLAMA_CPP_PYTHON and "
           "$LLAMA_CPP_SOURCE)")
"""How to get llama.cpp as the defaults expect it (BENCHMARKS.md: built here, ``GGML_NATIVE``)."""
CONVERTED = ("f32", "f16", "bf16", "q8_0")
"""Types llama.cpp's converter writes itself; the others come from llama_model_quantize."""
QUANTIZED = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}
"""llama.cpp's LLAMA_FTYPE_MOSTLY_* numbers (include/llama.h) of the types quantised from F32."""


def add_sentencepiece(directory: Path, lines: list[str], vocab: int = 4000) -> Path:
    """Train a sentencepiece BPE model on ``lines`` into ``directory``/tokenizer.model (with
    <unk> 0, <s> 1, </s> 2, as Llama's), for a checkpoint whose tokenizer the converter would
    refuse; the converter pads its vocabulary to the config's ``vocab_size``."""
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(directory / "tokenizer"), vocab_size=vocab,
        model_type="bpe", unk_id=0, bos_id=1, eos_id=2, pad_id=-1, byte_fallback=True,
        hard_vocab_limit=False, minloglevel=2)
    (directory / "tokenizer.vocab").unlink(missing_ok=True)
    for stale in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (directory / stale).unlink(missing_ok=True)  # the converter would read a BPE tokenizer.json first
    return directory / "tokenizer.model"


def convert(hf_dir: Path, out: Path, outtype: str = "f32", python: str = sys.executable) -> Path:
    """``hf_dir`` -> ``out`` (GGUF at ``outtype``, one of CONVERTED) by llama.cpp's converter."""
    env = dict(os.environ, PYTHONPATH=str(LLAMA_CPP_SOURCE / "gguf-py"), NO_LOCAL_GGUF="")
    done = subprocess.run([python, str(LLAMA_CPP_SOURCE / "convert_hf_to_gguf.py"), str(hf_dir), "--outfile",
                           str(out), "--outtype", outtype], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"convert_hf_to_gguf.py failed on {hf_dir}:\n{done.stderr[-3000:]}")
    return out


QUANTIZE = """
import sys, llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = int(sys.argv[3])
params.nthread = int(sys.argv[4])
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), params))
"""


def quantize(source: Path, out: Path, kind: str = "q4_0", threads: int = 2, python: str = LLAMA_CPP_PYTHON) -> Path:
    """``source`` (an F32 GGUF) -> ``out`` at ``kind`` (a key of QUANTIZED) by
    ``llama_cpp.llama_model_quantize``, in the Python that has llama-cpp-python."""
    done = subprocess.run([python, "-c", QUANTIZE, str(source), str(out), str(QUANTIZED[kind]), str(threads)],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"llama_model_quantize to {kind} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return out


def gguf_files(hf_dir: Path, out_dir: Path, types=("f32", "q8_0", "q4_0"), python: str = sys.executable) -> dict:
    """Type -> GGUF path in ``out_dir`` (``model-<type>.gguf``) for each of ``types``: the
    converter's own types directly, the others quantised from an F32 file (kept only if asked)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {t: out_dir / f"model-{t}.gguf" for t in types}
    for kind in [t for t in types if t in CONVERTED]:
        convert(hf_dir, paths[kind], kind, python)
    if rest := [t for t in types if t not in CONVERTED]:
        source = paths.get("f32") or convert(hf_dir, out_dir / "model-f32.gguf", "f32", python)
        for kind in rest:
            quantize(source, paths[kind], kind)
        if "f32" not in types:
            source.unlink()
    return paths


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("hf_dir", type=Path, help="a save_pretrained directory (config.json, safetensors, tokenizer)")
    p.add_argument("-o", "--out", type=Path, required=True, help="directory for model-<type>.gguf")
    p.add_argument("--types", nargs="+", default=["f32", "q8_0", "q4_0"], choices=sorted({*CONVERTED, *QUANTIZED}))
    args = p.parse_args()
    print(json.dumps({t: str(path) for t, path in gguf_files(args.hf_dir, args.out, args.types).items()}))


if __name__ == "__main__":
    main()
