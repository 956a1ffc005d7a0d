"""Small Hugging Face checkpoints for the import/export tests: transformers models at tiny
configurations with random weights, written with ``save_pretrained`` (no download), and the
reference outputs transformers computes from what was written."""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB, POSITIONS = 100, 40
GPT2_EOS = VOCAB - 1  # <|endoftext|> is GPT-2's last id


def make_config(kind: str, **changes):
    import transformers

    if kind == "gpt2":
        return transformers.GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=32, n_layer=2, n_head=4,
                                       bos_token_id=GPT2_EOS, eos_token_id=GPT2_EOS, **changes)
    return transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=POSITIONS, **changes)


ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "bert": "BertModel", "bert-mlm": "BertForMaskedLM"}


def save_checkpoint(kind: str, path: Path, dtype: torch.dtype = torch.float32, pickled: bool = False,
                    **save) -> torch.nn.Module:
    """A random ``kind`` model saved to ``path`` in ``dtype``; returns it in float32 (eval mode)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()  # its bars would mix with the CLI's stderr
    torch.manual_seed(0)
    model = getattr(transformers, ARCHITECTURES[kind])(make_config(kind.removesuffix("-mlm"))).eval()
    with torch.no_grad():  # BERT's and GPT-2's init leaves biases and norms at 0/1: make them matter
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(0.0 if "bias" in name else 1.0, 0.2)
    saved = model.to(dtype)  # in place: the model returned holds the values written
    if pickled:
        saved.config.save_pretrained(path)
        torch.save(saved.state_dict(), path / "pytorch_model.bin")
    else:
        saved.save_pretrained(path, **save)
    return model.float()


def reference(path: Path, kind: str) -> torch.nn.Module:
    """What transformers loads from ``path``, in float32: the outputs tfspec must reproduce."""
    import transformers

    return getattr(transformers, ARCHITECTURES[kind]).from_pretrained(str(path)).float().eval()


def padded_batch(kind: str, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens (3, 13), row 1 right-padded after 8 tokens, and the mask of real tokens."""
    pad = GPT2_EOS if kind == "gpt2" else 0
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, VOCAB - 1, (3, 13), generator=gen)
    tokens[1, 8:] = pad
    return tokens, tokens != pad
