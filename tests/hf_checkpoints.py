"""Small Hugging Face checkpoints for the import/export tests: transformers models at tiny
configurations with random weights, written with ``save_pretrained`` (no download), and the
reference outputs transformers computes from what was written."""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB, POSITIONS = 100, 40
GPT2_EOS = VOCAB - 1  # <|endoftext|> is GPT-2's last id


def perturb(model: torch.nn.Module, std: float = 0.2, **spread: float) -> torch.nn.Module:
    """``model`` with every trainable parameter redrawn far from transformers' initialisation.

    At init (matrices ~N(0, 0.02), biases 0, norm gains 1) pre-activations stay near 0.1, where
    exact GELU and its tanh form agree to 1e-7, attention is nearly uniform and a dropped bias
    adds the zero it would have added: a wrong activation, bias, epsilon or position scheme
    passes any tolerance. Norm gains (the 1-D weights) are drawn around 1, the rest around 0,
    with ``std``, or ``spread[key]`` for parameters whose name contains ``key``. Frozen
    parameters (Marian's sinusoids) are left as they are."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad:
                scale = next((s for key, s in spread.items() if key in name), std)
                p.normal_(1.0 if p.dim() == 1 and name.endswith("weight") else 0.0, scale)
    return model


def save_random(model_class: str, config, path: Path) -> torch.nn.Module:
    """A transformers ``model_class`` built from ``config``, every weight perturbed (seed 0),
    written to ``path`` by ``save_pretrained``; returned in eval mode."""
    import transformers

    transformers.utils.logging.disable_progress_bar()  # its bars would mix with the CLI's stderr
    torch.manual_seed(0)
    model = perturb(getattr(transformers, model_class)(config).eval())
    model.save_pretrained(path)
    return model


def make_config(kind: str, **changes):
    """Tiny GPT-2 or BERT configurations; epsilons off their defaults (and far above rounding,
    given perturbed weights), so that an importer ignoring the field computes something else."""
    import transformers

    if kind == "gpt2":
        return transformers.GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=32, n_layer=2, n_head=4,
                                       bos_token_id=GPT2_EOS, eos_token_id=GPT2_EOS, layer_norm_epsilon=1e-3,
                                       **changes)
    return transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=POSITIONS, layer_norm_eps=1e-3,
                                   **changes)


ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "bert": "BertModel", "bert-mlm": "BertForMaskedLM"}


def save_checkpoint(kind: str, path: Path, dtype: torch.dtype = torch.float32, pickled: bool = False,
                    tf_names: bool = False, **save) -> torch.nn.Module:
    """A random ``kind`` model saved to ``path`` in ``dtype``; returns it in float32 (eval mode).
    ``tf_names`` (pickled only): LayerNorm parameters named gamma and beta, as in checkpoints
    converted from TensorFlow."""
    import transformers

    transformers.utils.logging.disable_progress_bar()  # its bars would mix with the CLI's stderr
    torch.manual_seed(0)
    model = perturb(getattr(transformers, ARCHITECTURES[kind])(make_config(kind.removesuffix("-mlm"))).eval())
    saved = model.to(dtype)  # in place: the model returned holds the values written
    if pickled:
        saved.config.save_pretrained(path)
        state = saved.state_dict()
        if tf_names:
            state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
                     for k, v in state.items()}
        torch.save(state, path / "pytorch_model.bin")
    else:
        saved.save_pretrained(path, **save)
    return model.float()


def reference(path: Path, kind: str) -> torch.nn.Module:
    """What transformers loads from ``path``, in float32: the outputs tfspec must reproduce."""
    import transformers

    return getattr(transformers, ARCHITECTURES[kind]).from_pretrained(str(path)).float().eval()


def right_padded(vocab: int, pad: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens (3, 13) drawn from 5 .. vocab - 1, row 1 right-padded with ``pad`` after 8 tokens,
    and the mask of real tokens."""
    tokens = torch.randint(5, vocab, (3, 13), generator=torch.Generator().manual_seed(seed))
    tokens[1, 8:] = pad
    return tokens, tokens != pad


def padded_batch(kind: str, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``right_padded`` for GPT-2 or BERT: below GPT-2's <|endoftext|>, padded with it or with 0."""
    return right_padded(VOCAB - 1, GPT2_EOS if kind == "gpt2" else 0, seed)


def assert_pytorch_import_matches(cli, directory: Path, ref, tokens: torch.Tensor, keep: torch.Tensor):
    """``tfspec import directory`` (a checkpoint ``ref`` wrote) computes ``ref``'s logits within
    1e-4 at the real tokens of ``tokens`` in PyTorch; returns (the module, its directory, ``ref``'s
    logits)."""
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.spec import load_spec

    ours = directory.with_name(directory.name + "-imported")
    code, _, err = cli("import", directory, "-o", ours, "--quiet")
    assert code == 0, err
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    with torch.no_grad():
        want = ref(input_ids=tokens, attention_mask=keep.long()).logits
        torch.testing.assert_close(model(tokens)[keep], want[keep], atol=1e-4, rtol=0)
    return model, ours, want


def assert_decoder_import_matches(cli, directory: Path, ref, tokens: torch.Tensor, keep: torch.Tensor,
                                  pad: int) -> None:
    """``tfspec import directory`` (a decoder-only checkpoint ``ref`` wrote) computes ``ref``'s
    logits within 1e-4 at the real tokens of ``tokens``, in PyTorch and in onnxruntime, and
    continues two 4-token prompts with the 20 tokens ``ref.generate`` gives, through both
    backends' KV caches."""
    import numpy as np

    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import TorchDecoder
    from tfspec.search import SearchOptions, search

    model, ours, want = assert_pytorch_import_matches(cli, directory, ref, tokens, keep)
    code, out, err = cli("export", ours, "-o", ours.with_name(ours.name + "-onnx"))
    assert code == 0, out + err
    onnx = OnnxModel(ours.with_name(ours.name + "-onnx"), device="cpu")
    np.testing.assert_allclose(onnx.logits(tgt=tokens.numpy())[keep], want[keep].numpy(), atol=1e-4, rtol=0)
    prompt = tokens[[0, 2], :4]
    expected = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, min_new_tokens=20,
                            do_sample=False)[:, 4:].tolist()
    assert pad not in sum(expected, [])  # tfspec finds padding by id: a generated pad would be hidden
    options = SearchOptions(beam=1, max_length=20, min_length=20, max_extra=20)
    assert search(TorchDecoder(model), None, options, prefix=prompt.numpy()) == expected
    assert search(onnx.decoder(), None, options, prefix=prompt.numpy()) == expected  # the KV-cached step graph


def assert_step_after_prompt_matches(cli, directory: Path, vocab: int, pad: int) -> None:
    """The ONNX step graph of ``tfspec import directory``, fed a 9-token prompt, then its 10th
    token with the state it carried (a recurrent layer's window and state, attention's keys and
    values), gives the full-sequence graph's logits of the 10th position."""
    import numpy as np

    from tfspec.backends.onnx import OnnxModel

    ours, onnx_dir = directory.with_name("step-imported"), directory.with_name("step-onnx")
    assert cli("import", directory, "-o", ours, "--quiet")[0] == 0
    assert cli("export", ours, "-o", onnx_dir)[0] == 0
    onnx = OnnxModel(onnx_dir, device="cpu")
    tokens = right_padded(vocab, pad)[0][:1, :10].numpy()
    full = onnx.logits(tgt=tokens)[0, -1]
    full = full - np.log(np.exp(full - full.max()).sum()) - full.max()
    decoder = onnx.decoder()
    state = decoder.start(None)
    _, _, state = decoder.step(state, tokens[:, :9], 1)
    values, ids, _ = decoder.step(state, tokens[:, 9:], 5)
    np.testing.assert_allclose(np.asarray(values)[0], full[np.asarray(ids)[0]], atol=1e-4)


def transformers_count(config, architecture: str) -> int:
    """Parameters of transformers' ``architecture`` built from ``config`` on the meta device."""
    import transformers

    with torch.device("meta"):
        return sum(p.numel() for p in getattr(transformers, architecture)(config).parameters())


def assert_config_imports_at_count(cli, directory: Path, config, architecture: str) -> None:
    """``config`` alone, imported with ``tfspec import``, reports transformers' own count."""
    import json

    directory.mkdir()
    (directory / "config.json").write_text(config.to_json_string())
    ours = directory.with_name(directory.name + "-imported")
    code, _, err = cli("import", directory, "-o", ours, "--quiet")
    assert code == 0, err
    code, out, _ = cli("report", ours, "--format", "json")
    assert code == 0 and json.loads(out)["params"]["total"] == transformers_count(config, architecture)


@torch.no_grad()
def assert_hf_round_trip(cli, directory: Path, original, architecture: str, tokens: torch.Tensor,
                         keep: torch.Tensor, **inputs) -> None:
    """import -> ``export --format hf`` -> ``from_pretrained`` of the checkpoint ``original`` wrote to
    ``directory`` gives ``architecture`` and ``original``'s logits at the real tokens (``inputs``:
    the model's other inputs, an encoder-decoder's attention_mask and decoder_input_ids)."""
    import json

    import transformers

    imported, exported = directory.with_name("imported"), directory.with_name("exported")
    assert cli("import", directory, "-o", imported, "--quiet")[0] == 0
    code, out, err = cli("export", imported, "--weights", imported / "model.safetensors", "--format", "hf",
                         "-o", exported)
    assert code == 0 and "parity: ok" in out, out + err
    assert json.loads((exported / "config.json").read_text())["architectures"] == [architecture]
    got = getattr(transformers, architecture).from_pretrained(exported).eval()(tokens, **inputs).logits
    torch.testing.assert_close(got[keep], original(tokens, **inputs).logits[keep], atol=1e-4, rtol=0)


def assert_config_refused(cli, tmp_path: Path, config: dict, needle: str) -> None:
    """``config`` as a checkpoint's config.json imports as one ``error:`` line holding
    ``needle``, exit 2, and writes no output directory."""
    import json

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "ours").exists()
