"""``tfspec generate``: continue a text prompt with a decoder-only model, through the model's
own tokenizer: an imported checkpoint's directory (PyTorch backend) or its ONNX export
(onnxruntime), both decoded by ``tfspec.search`` with their KV caches."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from tfspec.cli.fields import add_fields, flag, from_args
from tfspec.cli.types import integer
from tfspec.data.codecs import open_codec
from tfspec.errors import TfspecError
from tfspec.search import Sampling, SearchOptions, search

MANIFEST = "tfspec.json"  # what `tfspec export` writes beside its graphs


def cmd_generate(args) -> int:
    directory = Path(args.model)
    decoder, spec, backend = _decoder(directory, args.weights)
    codec = open_codec(directory, spec.vocab)
    if codec is None:
        raise TfspecError(f"{directory}: no tokenizer (tokenizer.json or tokenizer.model) to read the prompt with")
    prompt = codec.prompt(args.prompt)
    room = spec.positional.room(len(prompt))
    room = args.max_new_tokens if room is None else room
    if not prompt or room < 1:
        raise TfspecError(f"the prompt is {len(prompt)} tokens; the model takes 1 to {spec.positional.limit - 1}")
    options = SearchOptions(beam=1, max_extra=args.max_new_tokens, max_length=min(room, args.max_new_tokens),
                            sampling=_sampling(args))
    started = time.perf_counter()
    new = search(decoder, None, options, prefix=np.array([prompt], dtype=np.int64))[0]
    print(codec.decode(prompt + new))
    elapsed = time.perf_counter() - started
    print(f"{spec.name} ({backend}): {len(prompt)} prompt + {len(new)} new tokens in {elapsed:.2f}s, "
          f"{'sampled' if options.sampling else 'greedy'}", file=sys.stderr)
    return 0


def _decoder(directory: Path, weights: str | None):
    """(search decoder, spec, backend name): the ONNX export's, or the spec's with its weights."""
    if (directory / MANIFEST).is_file():
        if weights:
            raise TfspecError(f"{directory} is an ONNX export: its weights are in the graphs; drop --weights")
        from tfspec.backends.onnx import OnnxModel

        model = OnnxModel(directory)
        return model.decoder(), _decoder_only(model.spec), model.describe()
    from tfspec.backends.torch import TorchDecoder, build_module
    from tfspec.backends.torch.training.checkpoint import load_any_weights
    from tfspec.spec import load_spec

    spec = _decoder_only(load_spec(directory))
    weights = weights or (directory / "model.safetensors" if (directory / "model.safetensors").is_file() else None)
    if weights is None:
        raise TfspecError(f"{directory}: no model.safetensors; pass --weights (random weights generate noise)")
    model = build_module(spec)
    load_any_weights(model, weights)
    return TorchDecoder(model), spec, "PyTorch, CPU"


def _decoder_only(spec):
    if spec.family != "decoder-only":
        raise TfspecError(f"{spec.name} is {spec.family}: generate continues prompts with decoder-only models; "
                          "use tfspec translate")
    return spec


def _sampling(args) -> Sampling | None:
    if not args.sample:
        given = [name for name in Sampling.__pydantic_fields__ if getattr(args, name) is not None]
        if given:
            raise TfspecError(f"{flag(given[0])} applies to sampling: add --sample (without it generation is greedy)")
        return None
    return from_args(Sampling, args)


def register(command) -> None:
    c = command("generate", cmd_generate,
                "Continue --prompt with a decoder-only model: DIR is an imported checkpoint (spec.yaml, "
                "model.safetensors; the PyTorch backend) or its ONNX export (onnxruntime). The prompt and the "
                "output go through DIR's tokenizer (tokenizer.json, or tfspec's tokenizer.model). Greedy by "
                "default; --sample draws tokens (--temperature, --top-k, --top-p, --seed). Prints the prompt "
                "and its continuation as one text; stops at the end-of-sequence token.")
    c.add_argument("model", metavar="DIR", help="an imported checkpoint directory or a `tfspec export` directory")
    c.add_argument("--prompt", required=True, help="the text to continue")
    c.add_argument("--max-new-tokens", type=integer(1), default=50, help="most tokens generated (default 50)")
    c.add_argument("--weights", metavar="CKPT", help="weights for a spec directory (default: DIR/model.safetensors)")
    c.add_argument("--sample", action="store_true", help="draw each token instead of taking the likeliest")
    add_fields(c, Sampling, unset=True)  # None where not given: without --sample, a given one is refused
