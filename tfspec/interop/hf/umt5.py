"""umT5 (``model_type: umt5``): transformers' UMT5ForConditionalGeneration as a tfspec spec
(google/umt5-small .. umt5-xxl).

T5's computation (``t5.py``: pre-RMSNorm, no biases, unscaled attention, its relative attention
bias) with one difference: every self-attention layer has a relative bias table of its own
(``positional.tables: layer``), where T5 computes one per stack in its first layer. Defaults are
UMT5Config's (mT5-small's shape: gated-gelu, a 250,112-token vocabulary). Whether the output is
scaled by d_model^-0.5 and whether lm_head is its own follow T5's reading
(``scale_decoder_outputs``, else ``tie_word_embeddings``: UMT5Config keeps the checkpoint's
setting that way although it always writes ``tie_word_embeddings: true``).
"""

from __future__ import annotations

from tfspec.interop.hf.family import Rule, Source, register
from tfspec.interop.hf.t5 import T5


@register
class UMT5(T5):
    model_type = "umt5"
    title = "umT5"
    architectures = {"UMT5ForConditionalGeneration": ""}
    export_architecture = "UMT5ForConditionalGeneration"
    defaults = {"vocab_size": 250112, "d_ff": 1024, "num_layers": 8, "num_heads": 6, "feed_forward_proj": "gated-gelu"}

    def spec_data(self, source: Source) -> dict:
        data = super().spec_data(source)
        return data | {"positional": data["positional"] | {"tables": "layer"}}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """T5's rules, and the table of every self-attention layer above the first."""
        return super().rules(spec, architecture) + [
            Rule(f"{stack}.layers.{i}.self_attn.rel_bias",
                 (f"{stack}.block.{i}.layer.0.SelfAttention.relative_attention_bias.weight",))
            for stack in ("encoder", "decoder") for i in range(1, getattr(spec, stack).num_layers)]
