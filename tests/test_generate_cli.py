"""`tfspec generate`: small random GPT-2 and Llama checkpoints with a tokenizer.json built here
by the `tokenizers` library (BPE trained on the shipped sample), imported; the prompt's ids
equal transformers' tokenizer's, greedy tokens equal `generate` (PyTorch backend and ONNX
export), the printed text is transformers' decoding; sampling is reproducible and shaped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_checkpoints import perturb
from tfspec.data import read_split, sample_dir
from tfspec.data.codecs import open_codec
from tfspec.search import Sampling, SearchOptions, Picker, search
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

PROMPT = "Select the cell and click"


def bpe(kind: str):
    """A BPE tokenizer of ~150 tokens: GPT-2's byte-level one with <|endoftext|> (id 0), or
    Llama's with <unk> <s> </s> (0, 1, 2) and <s> put before every text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    lines = [en for en, _ in read_split(sample_dir(), "train")[:300]]
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
        specials = ["<|endoftext|>"]
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer, tok.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
        specials, alphabet = ["<unk>", "<s>", "</s>"], []
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                                        initial_alphabet=alphabet, show_progress=False))
    if kind == "llama":
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


def model_of(kind: str, vocab: int):
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          bos_token_id=1, eos_token_id=2)
        model = transformers.LlamaForCausalLM(config)
    return perturb(model).eval()


def saved_model(kind: str, path):
    """A random ``kind`` model (written to ``path`` by ``save_pretrained``) and its BPE tokenizer."""
    tok = bpe(kind)
    model = model_of(kind, tok.get_vocab_size())
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(path)
    return model, tok


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def imported(request, tmp_path_factory):
    """(kind, import directory, transformers model, transformers tokenizer)."""
    kind, tmp = request.param, tmp_path_factory.mktemp(request.param)
    model, tok = saved_model(kind, tmp / "hf")
    tok.save(str(tmp / "hf" / "tokenizer.json"))
    from tfspec.cli import main

    assert main(["import", str(tmp / "hf"), "-o", str(tmp / "ours"), "--quiet"]) == 0
    return kind, tmp / "ours", model, transformers.PreTrainedTokenizerFast(tokenizer_object=tok)


def expected(model, tokenizer, max_new: int) -> list[int]:
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    eos = model.config.eos_token_id
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                         pad_token_id=eos)[0].tolist()
    return out[: out.index(eos, ids.shape[1])] if eos in out[ids.shape[1]:] else out


def test_greedy_tokens_and_text_equal_transformers(imported, cli):
    kind, directory, model, tokenizer = imported
    spec = load_spec(directory)
    prompt = open_codec(directory, spec.vocab).prompt(PROMPT)
    assert prompt == tokenizer(PROMPT).input_ids
    want = expected(model, tokenizer, 20)
    code, out, err = cli("generate", directory, "--prompt", PROMPT, "--max-new-tokens", "20")
    assert code == 0, err
    assert out.rstrip("\n") == tokenizer.decode(want, skip_special_tokens=True)
    assert len(want) - len(prompt) > 10 and "PyTorch" in err  # real generation was compared


@pytest.fixture(scope="module")
def onnx_dir(imported, tmp_path_factory):
    """The import's ONNX export, written by ``tfspec export --no-check``."""
    from tfspec.cli import main

    kind, directory = imported[:2]
    out = tmp_path_factory.mktemp(f"{kind}-onnx")
    assert main(["export", str(directory), "--weights", str(directory / "model.safetensors"), "-o", str(out),
                 "--no-check"]) == 0
    return out


def test_onnx_export_generates_the_same(imported, onnx_dir, cli):
    kind, directory, model, tokenizer = imported
    code, out, err = cli("generate", onnx_dir, "--prompt", PROMPT, "--max-new-tokens", "20")
    assert code == 0 and "onnxruntime" in err, err
    assert out.rstrip("\n") == tokenizer.decode(expected(model, tokenizer, 20), skip_special_tokens=True)


def test_sampling_is_reproducible_and_top_k_1_is_greedy(imported, cli):
    directory = imported[1]
    short = ("--prompt", PROMPT, "--max-new-tokens", "20")
    runs = [cli("generate", directory, *short, "--sample", *extra)[1]
            for extra in ([], ["--seed", "0"], ["--top-k", "1", "--temperature", "5"],
                          ["--seed", "7", "--temperature", "1.5", "--top-p", "0.9"])]
    greedy = cli("generate", directory, *short)[1]
    assert runs[0] == runs[1] and runs[2] == greedy and runs[3] != greedy


def library_model(directory):
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights

    model = build_module(load_spec(directory)).eval()
    load_weights(model, directory / "model.safetensors")
    return model


@torch.no_grad()
def mass_before(model, prefix: list[int], drawn: list[int], temperature: float = 1.0) -> torch.Tensor:
    """For each drawn token, the probability transformers' ``model`` gives the tokens likelier
    than it at that step (softmax(logits / temperature)): under top-p it must stay below p."""
    logits = model(torch.tensor([prefix + drawn])).logits[0, len(prefix) - 1:-1] / temperature
    probs = torch.softmax(logits, -1)
    chosen = probs[torch.arange(len(drawn)), torch.tensor(drawn)]
    return torch.where(probs > chosen[:, None], probs, 0.0).sum(-1)


def test_sampled_text_is_the_library_draw_inside_transformers_nucleus(imported, cli):
    """--sample --seed 7 --temperature 1.5 --top-p 0.9 prints what ``search`` draws with those
    options, and each drawn token lies in the nucleus of transformers' distribution at that
    temperature (the likeliest tokens holding 0.9 of the probability)."""
    from tfspec.backends.torch import TorchDecoder

    kind, directory, model, tokenizer = imported
    code, out, err = cli("generate", directory, "--prompt", PROMPT, "--sample", "--seed", "7", "--temperature", "1.5",
                         "--top-p", "0.9", "--max-new-tokens", "20")
    assert code == 0, err
    prompt = tokenizer(PROMPT).input_ids
    options = SearchOptions(beam=1, max_extra=20, max_length=20, sampling=Sampling(temperature=1.5, top_p=0.9, seed=7))
    drawn = search(TorchDecoder(library_model(directory)), None, options, prefix=np.array([prompt]))[0]
    assert out.rstrip("\n") == tokenizer.decode(prompt + drawn, skip_special_tokens=True)
    assert len(drawn) > 5 and (mass_before(model, prompt, drawn, 1.5) < 0.9).all()


def test_picker_draws_as_temperature_top_k_and_top_p_say():
    log_probs = np.log(np.array([[0.5, 0.3, 0.15, 0.05]] * 20000))
    ids = np.array([[7, 8, 9, 10]] * 20000)

    def frequencies(**options):
        drawn = Picker(Sampling(seed=1, **options))(log_probs, ids)
        return np.bincount(drawn - 7, minlength=4) / len(drawn)

    np.testing.assert_allclose(frequencies(), [0.5, 0.3, 0.15, 0.05], atol=0.015)
    np.testing.assert_allclose(frequencies(top_p=0.6), [0.625, 0.375, 0, 0], atol=0.015)  # 0.5 < 0.6: two kept
    np.testing.assert_allclose(frequencies(top_k=3), [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0], atol=0.015)
    hot = np.array([0.5, 0.3, 0.15, 0.05]) ** 0.5
    np.testing.assert_allclose(frequencies(temperature=2.0), hot / hot.sum(), atol=0.015)


def test_sampling_options_need_sample_and_encoder_decoders_are_refused(imported, cli):
    directory = imported[1]
    code, _, err = cli("generate", directory, "--prompt", PROMPT, "--top-p", "0.5")
    assert code == 2 and "--top-p applies to sampling: add --sample" in err
    code, _, err = cli("generate", "tiny", "--prompt", PROMPT)
    assert code == 2 and "generate continues prompts with decoder-only models" in err


def test_search_samples_through_any_decoder(imported, onnx_dir):
    """The same draws through the PyTorch and the ONNX decoder, each among transformers' five
    likeliest tokens at its step (top_k 5)."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import TorchDecoder

    _, directory, reference, _ = imported
    model = library_model(directory)
    prefix = np.array([[5, 6, 7], [8, 9, 10]])
    options = SearchOptions(beam=1, max_extra=8, sampling=Sampling(seed=3, top_k=5))
    first = search(TorchDecoder(model), None, options, prefix)
    assert first == search(TorchDecoder(model), None, options, prefix) and len(first) == 2
    assert search(OnnxModel(onnx_dir, device="cpu").decoder(), None, options, prefix) == first
    for row, drawn in zip(prefix.tolist(), first):
        with torch.no_grad():
            likeliest = reference(torch.tensor([row + drawn])).logits[0, len(row) - 1:-1].topk(5).indices
        assert all(token in likeliest[i] for i, token in enumerate(drawn))
    assert sum(map(len, first)) > 8  # more than one step was drawn and compared


DEPLOYED = """\
import io, runpy, sys
from pathlib import Path
kind, directory, prompt = sys.argv[1:4]
if kind == "serve":
    from tfspec.serve.server import build
    from tfspec.serve.service import ServeConfig
    build(ServeConfig(Path(directory)), 1.0, "127.0.0.1", 0)
else:
    sys.argv = ["tfspec", "generate", directory, "--prompt", prompt, "--max-new-tokens", "3"]
    try:
        runpy.run_module("tfspec", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        assert e.code in (0, None), e.code
print("loaded:", *[m for m in ("torch", "transformers", "tfspec.interop.hf", "tfspec.backends.torch") if m in sys.modules])
"""


@pytest.mark.parametrize("command", ["generate", "serve"])
def test_generating_and_serving_an_export_load_neither_torch_nor_the_families(imported, onnx_dir, command):
    """A deployment runs on onnxruntime alone: torch, transformers and the Hugging Face families
    cost seconds of start-up and hundreds of MB it never uses (structural: sys.modules)."""
    done = subprocess.run([sys.executable, "-c", DEPLOYED, command, str(onnx_dir), PROMPT], capture_output=True,
                          text=True, cwd=Path(__file__).parents[1], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "loaded:"
