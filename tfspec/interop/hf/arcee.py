"""Arcee (``model_type: arcee``): transformers' ArceeForCausalLM and ArceeModel as tfspec specs
(arcee-ai/AFM-4.5B, AFM-4.5B-Base).

Llama (``llama.py``: pre-RMSNorm layers, rotary positions in the rotate-half layout on every
feature of a head, grouped-query attention, ``attention_bias`` on q, k, v and o, an untied output
head unless said) whose MLP is not gated: ``down_proj(act(up_proj(x)))``, squared ReLU by
default (``hidden_act: relu2``; transformers' ArceeMLP is Nemotron's), biased when ``mlp_bias``.
The rotary settings read as Llama's, the scaled types included (``rope.py``: yarn, for a context
extended as AFM's, llama3, linear, dynamic, longrope); a ``partial_rotary_factor`` is refused, as
Arcee's attention rotates every feature. Defaults are ArceeConfig's: AFM-4.5B's width, 2560, over
a 32000-token vocabulary, with bos/eos ids 128000 and 128001 (those of AFM's own 128004-token
tokenizer) outside it. No token can carry such an id, so transformers' ``generate`` never meets
it; a tfspec vocabulary holds its special ids, so an id outside it is read as 0 (as StarCoder2's
import does without a tokenizer): the logits are the same, only which id ends a generation differs.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import Rule, Source, number, register
from tfspec.interop.hf.llama import Llama


@register
class Arcee(Llama):
    model_type = "arcee"
    title = "Arcee"
    architectures = {"ArceeForCausalLM": "model.", "ArceeModel": ""}
    export_architecture = "ArceeForCausalLM"
    ignored = {"pretraining_tp": "transformers' Arcee does not read it (ArceeConfig drops Llama's field); it only "
                                 "split Llama's matrix products into slices whose results are added"}
    defaults = {"hidden_size": 2560, "intermediate_size": 18432, "hidden_act": "relu2",
                "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "bos_token_id": 128000,
                "eos_token_id": 128001}
    """ArceeConfig's values where Llama's fallbacks in ``Llama.spec_data`` differ."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        size = number(c, "vocab_size", where, default=32000)
        c |= {key: 0 for key in ("bos_token_id", "eos_token_id")
              if isinstance(c.get(key), int) and not isinstance(c[key], bool) and c[key] >= size}
        return super().spec_data(replace(source, config=c)) | {"gated": False}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's attention, norms, embedding and head; the MLP's two matrices (up_proj, down_proj)
        in place of SwiGLU's three."""
        return [r for r in super().rules(spec, architecture) if ".ffn." not in r.ir] + ungated_mlp(spec)


def ungated_mlp(spec) -> list[Rule]:
    """``w_1`` from ``mlp.up_proj``, ``w_2`` from ``mlp.down_proj`` (and their biases when the spec
    biases its feed-forward layers): Arcee's and Nemotron's MLP."""
    rules = []
    for layer in spec.plan("decoder"):
        ours, theirs = f"decoder.layers.{layer.index}.ffn.", f"layers.{layer.index}.mlp."
        for n, part in (("1", "up_proj"), ("2", "down_proj")):
            rules.append(Rule(f"{ours}w_{n}", (f"{theirs}{part}.weight",)))
            if spec.has_bias("ffn"):
                rules.append(Rule(f"{ours}b_{n}", (f"{theirs}{part}.bias",)))
    return rules
