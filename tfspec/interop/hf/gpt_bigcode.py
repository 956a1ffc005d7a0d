"""GPTBigCode (``model_type: gpt_bigcode``): transformers' GPTBigCodeForCausalLM and
GPTBigCodeModel as tfspec specs (bigcode/starcoder, starcoderbase, gpt_bigcode-santacoder).

GPT-2 (``gpt2.py``) with multi-query attention: one key/value head shared by every query head
(``kv_heads: 1``). Its layers are ``nn.Linear`` (stored (out, in), as tfspec's), not GPT-2's
Conv1D, and ``c_attn`` holds the query (d_model rows), then the one key and value head
(head_dim rows each): exactly tfspec's ``w_qkv``. Defaults are GPTBigCodeConfig's.

Refused by name: ``multi_query: false``, whose ``c_attn`` interleaves q, k and v per head
(rows q0 k0 v0 q1 k1 v1 ..), a layout tfspec's stacked ``w_qkv`` does not hold.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import Rule, Source, register
from tfspec.interop.hf.gpt2 import GPT2
from tfspec.interop.hf.layouts import Copy


@register
class GPTBigCode(GPT2):
    model_type = "gpt_bigcode"
    title = "GPTBigCode"
    architectures = {"GPTBigCodeForCausalLM": "transformer.", "GPTBigCodeModel": ""}
    export_architecture = "GPTBigCodeForCausalLM"
    required = {"multi_query": (True,), "scale_attn_weights": (True,), "tie_word_embeddings": (True,)}
    ignored = {**GPT2.ignored,
               "num_key_value_heads": "derived by transformers from multi_query (1 when true)",
               **dict.fromkeys(("attention_softmax_in_fp32", "scale_attention_softmax_in_fp32"),
                               "the softmax's precision under half-precision weights; the same in float32")}

    def spec_data(self, source: Source) -> dict:
        return super().spec_data(source) | {"kv_heads": 1}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """GPT-2's names, every matrix stored as tfspec's (Linear, not Conv1D)."""
        return [replace(r, layout=Copy()) for r in super().rules(spec, architecture)]

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"lm_head.weight": "the output projection, tied to the token embedding"}

    def config(self, spec) -> dict:
        return super().config(spec) | {"architectures": [self.export_architecture], "model_type": self.model_type,
                                       "multi_query": True}

