"""`tfspec serve`'s application in this process, on 127.0.0.1 and a port the kernel picks, over
a decoder whose steps can be slowed: a test sees the service's state (``inflight``, queue,
metrics) while its requests are open, and a slow step makes a full queue certain."""

from __future__ import annotations

import signal
import threading
import time


class Slowed:
    """``decoder`` whose steps take at least ``delay`` seconds (set it to 0 to stop slowing),
    counted in ``steps``."""

    def __init__(self, decoder, delay: float = 0.0):
        self.decoder, self.delay, self.steps = decoder, delay, 0

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def step(self, *args, **kwargs):
        self.steps += 1
        time.sleep(self.delay)
        return self.decoder.step(*args, **kwargs)


class InProcess:
    """``tfspec serve``'s server (``server.build``: its drain included) in a thread;
    ``service.batcher.decoder`` is ``Slowed``. ``drain()`` is what SIGTERM does."""

    def __init__(self, config, grace: float = 10.0):
        from tfspec.serve.server import build

        ports = []
        self.server = build(config, grace, "127.0.0.1", 0, announce=ports.append)
        self.service = self.server.service
        self.slowed = self.service.batcher.decoder = Slowed(self.service.batcher.decoder)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        for _ in range(600):
            if ports:
                break
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{ports[0]}"

    def drain(self) -> None:
        self.server.handle_exit(signal.SIGTERM, None)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def chat_export(tmp):
    """(ONNX export of an imported random GPT-2 of 256 positions whose tokenizer has a ChatML
    template, transformers' tokenizer): ``test_serve_chat``'s model."""
    import transformers
    from test_generate_cli import bpe

    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe("gpt2"), bos_token="<|endoftext|>",
                                               eos_token="<|endoftext|>")
    config = transformers.GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    return _chat_export(tmp, "GPT2LMHeadModel", config, tok)


def _chat_export(tmp, model_class: str, config, tok):
    """(``tmp``/onnx, ``tok``): a random ``model_class`` of ``config`` and ``tok`` with ChatML,
    saved by transformers to ``tmp``/hf, imported and exported."""
    from test_serve_chat import CHATML

    from hf_checkpoints import save_random
    from tfspec.cli import main

    tok.chat_template = CHATML
    save_random(model_class, config, tmp / "hf")
    tok.save_pretrained(tmp / "hf")
    assert main(["import", str(tmp / "hf"), "-o", str(tmp / "ours"), "--quiet"]) == 0
    assert main(["export", str(tmp / "ours"), "-o", str(tmp / "onnx"), "--no-check"]) == 0
    return tmp / "onnx", tok


def answered(batcher, jobs, loop, timeout: float = 120) -> list:
    """Start ``batcher`` (its first jobs submitted) and wait on ``loop`` for every one of
    ``jobs``' outputs; the batcher is stopped and the loop closed either way."""
    import asyncio

    batcher.start()
    try:
        return loop.run_until_complete(asyncio.wait_for(asyncio.gather(*(job.future for job in jobs)), timeout))
    finally:
        batcher.stop()
        loop.close()


def llama_export(tmp):
    """The ONNX export (``tmp``/onnx, beside the transformers checkpoint in ``tmp``/hf) of an
    imported random tiny Llama (64 positions) with its tokenizer.json."""
    from test_generate_cli import saved_model

    from tfspec.cli import main

    _, tok = saved_model("llama", tmp / "hf")
    tok.save(str(tmp / "hf" / "tokenizer.json"))
    assert main(["import", str(tmp / "hf"), "-o", str(tmp / "ours"), "--quiet"]) == 0
    assert main(["export", str(tmp / "ours"), "-o", str(tmp / "onnx"), "--no-check"]) == 0
    return tmp / "onnx"


def byte_fallback_llama():
    """Llama 2's tokenizer as transformers builds it (``LlamaTokenizer``: BPE over Metaspace with
    byte fallback, ``<0x00>``..``<0xFF>`` at ids 3..258, a decoder that strips the first space),
    its merges trained on the shipped sample, ``<s>`` put before every text."""
    import json

    import transformers
    from test_generate_cli import bpe
    from tokenizers import processors

    trained = json.loads(bpe("llama").to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{b:02X}>": 3 + b for b in range(256)}
    for piece in trained["vocab"]:
        vocab.setdefault(piece, len(vocab))
    tok = transformers.LlamaTokenizer(vocab=vocab, merges=[tuple(m) for m in trained["merges"]])
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


def llama_chat_export(tmp):
    """(ONNX export of an imported random Llama of 256 positions whose tokenizer is
    ``byte_fallback_llama`` with a ChatML template, transformers' tokenizer): the
    SentencePiece-style counterpart of ``chat_export``."""
    import transformers

    tok = byte_fallback_llama()
    config = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      bos_token_id=1, eos_token_id=2)
    return _chat_export(tmp, "LlamaForCausalLM", config, tok)
