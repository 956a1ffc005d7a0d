"""A random-weight Hugging Face checkpoint in a published model's shape, written tensor by tensor.

For measuring what depends on size alone (streaming import and export, peak memory, decoding
speed) without downloading weights: config.json as published (``torch_dtype`` set to the dtype
written), bf16 or fp16 safetensors sharded as published, with model.safetensors.index.json. Only
one tensor is in memory at a time. Weights ~N(0, 0.02), norm gains ~N(1, 0.02). A word-level tokenizer.json over the vocabulary
(``<unk>``, ``<s>``, ``</s>``, then ``w3``, ``w4``, ...) stands in for the published one, so that
``tfspec generate`` reads a prompt such as "w5 w17 w300".

    python tools/bench/random_checkpoint.py llama-2-7b /work/scratch/int4/llama-2-7b
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from tfspec.tensors import write_safetensors

LLAMA_2_7B = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
              "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008,
              "max_position_embeddings": 4096, "model_type": "llama", "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 32, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
              "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float16",
              "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000}
"""meta-llama/Llama-2-7b-hf's config.json; published as two shards, layers 0-23 in the first."""
MODELS = {"llama-2-7b": (LLAMA_2_7B, 24)}


def llama_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of a LlamaForCausalLM checkpoint, in the published order."""
    d, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = d // config["num_attention_heads"] * config["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (v, d)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": (d, d), p + "self_attn.k_proj.weight": (kv, d),
                   p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, d),
                   p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                   p + "mlp.down_proj.weight": (d, f), p + "input_layernorm.weight": (d,),
                   p + "post_attention_layernorm.weight": (d,)}
    return shapes | {"model.norm.weight": (d,), "lm_head.weight": (v, d)}


def write(model: str, output: Path, dtype: str, seed: int) -> None:
    config, first_shard_layers = MODELS[model]
    config = config | {"torch_dtype": dtype}
    shapes = llama_shapes(config)
    last = f"model.layers.{first_shard_layers}."
    split = next(i for i, n in enumerate(shapes) if n.startswith(last))
    names = list(shapes)
    shards = [names[:split], names[split:]]
    files = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    output.mkdir(parents=True, exist_ok=True)
    (output / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    rng = np.random.default_rng(seed)
    for file, group in zip(files, shards):
        tensors = ((n, rng.standard_normal(shapes[n], dtype=np.float32) * np.float32(0.02)
                    + np.float32(len(shapes[n]) == 1)) for n in group)
        write_safetensors(output / file, {n: shapes[n] for n in group}, dtype, tensors, {"format": "pt"})
        print(f"{file}: {len(group)} tensors, {(output / file).stat().st_size / 2**30:.2f} GiB", flush=True)
    size = sum(math.prod(s) for s in shapes.values()) * 2
    write_tokenizer(output, config["vocab_size"])
    index = {"metadata": {"total_size": size},
             "weight_map": {n: f for f, group in zip(files, shards) for n in group}}
    (output / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def write_tokenizer(output: Path, size: int) -> None:
    """A word-level tokenizer.json with ``size`` entries and Llama's special ids (0, 1, 2)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, size)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(output / "tokenizer.json"))
    (output / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                              "unk_token": "<unk>", "add_bos_token": True}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("output", type=Path)
    parser.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write(args.model, args.output, args.dtype, args.seed)


if __name__ == "__main__":
    main()
