"""tools/bench/to_gguf.py and llama.cpp's worker in tools/bench/peer_bare.py: a tiny Llama converted by
llama.cpp's own converter generates transformers' greedy tokens under llama.cpp (batch 1 and
a batch of 3 sequences in one context), and quantises to Q4_0."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "bench"
sys.path.insert(0, str(TOOLS))

from isolated import Job  # noqa: E402
from to_gguf import LLAMA_CPP_PYTHON, LLAMA_CPP_SOURCE, add_sentencepiece, gguf_files  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (Path(LLAMA_CPP_PYTHON).exists() and (LLAMA_CPP_SOURCE / "convert_hf_to_gguf.py").exists()),
    reason="llama-cpp-python's venv or llama.cpp's converter is not here ($LLAMA_CPP_PYTHON, $LLAMA_CPP_SOURCE)")]


def test_llama_cpp_generates_transformers_tokens_from_the_converted_file(tmp_path):
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "hf")
    sample = Path(__file__).resolve().parents[1] / "tfspec" / "data" / "sample" / "train.en"
    add_sentencepiece(tmp_path / "hf", sample.read_text().splitlines(), vocab=500)
    files = gguf_files(tmp_path / "hf", tmp_path / "gguf", ("f32", "q4_0"))
    assert files["q4_0"].stat().st_size < files["f32"].stat().st_size / 4
    rows = np.random.default_rng(0).integers(3, 1000, (3, 9))
    np.save(tmp_path / "rows.npy", rows)
    check = {"prompts": {}, "n": 6, "check": str(tmp_path / "rows.npy")}
    ours = Job("peer_bare", "llama_generate", ("llama_cpp",), {"model": str(files["f32"])}, python=LLAMA_CPP_PYTHON)
    hf = Job("peer_bare", "hf_generate", ("torch", "transformers"), {"model": str(tmp_path / "hf")})
    expected = hf.but(kwargs=check).run(1)[0]
    assert ours.but(kwargs=check).run(1)[0] == expected
    np.save(tmp_path / "row.npy", rows[:1])
    assert ours.but(kwargs=check | {"check": str(tmp_path / "row.npy")}).run(1)[0] == expected[:1]
