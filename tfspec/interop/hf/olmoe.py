"""OLMoE (``model_type: olmoe``): transformers' OlmoeForCausalLM and OlmoeModel as tfspec specs
(allenai/OLMoE-1B-7B-0924, OLMoE-1B-7B-0125 and their -Instruct models).

Llama (``llama.py``: pre-RMSNorm, rotary positions, grouped-query attention) with OLMo 2's
RMSNorm over the whole query (heads x head_dim) and key (kv_heads x head_dim) projections
before the rotation (``qk_norm: all``; the norms stay on each sub-layer's input, unlike OLMo 2's)
and every feed-forward layer a mixture of ``num_experts`` SwiGLU experts ``intermediate_size``
wide (``mixtral.py``'s ``Experts``), each token running the ``num_experts_per_tok`` best,
renormalised only with ``norm_topk_prob``. ``attention_bias`` biases q, k, v and o. Heads are
always hidden_size / heads wide (transformers sizes the query norm so): ``head_dim`` is refused
as unknown. Refused by name: ``clip_qkv`` (OLMo 1's clamping of q, k and v, which no published
OLMoE sets). Defaults are OlmoeConfig's (OLMoE-1B-7B's shape, 64 experts, top 8, with experts 2048
wide, not its 1024).
"""

from __future__ import annotations

from tfspec.interop.hf.family import Rule, register
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.mixtral import MOE_IGNORED, Experts
from tfspec.interop.hf.olmo2 import Olmo2
from tfspec.interop.hf.qwen3 import qk_norm_rules


@register
class Olmoe(Experts, Llama):
    model_type = "olmoe"
    title = "OLMoE"
    architectures = {"OlmoeForCausalLM": "model.", "OlmoeModel": ""}
    export_architecture = "OlmoeForCausalLM"
    mapped = tuple(f for f in Llama.mapped if f not in ("head_dim", "mlp_bias")) + (
        "num_experts", "num_local_experts", "num_experts_per_tok", "norm_topk_prob")
    required = {"clip_qkv": (None,)}
    ignored = Llama.ignored | MOE_IGNORED
    expert_counts = ("num_experts", "num_local_experts")
    defaults = {"vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048, "num_hidden_layers": 16,
                "num_attention_heads": 16, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "pad_token_id": 1,
                "eos_token_id": 50279, "num_experts": 64, "num_experts_per_tok": 8}

    _attention = Olmo2._attention  # qk_norm: all
    _config_biases = Olmo2._config_biases  # attention_bias only

    def rules(self, spec, architecture: str) -> list[Rule]:
        return super().rules(spec, architecture) + qk_norm_rules(spec)

    def config(self, spec) -> dict:
        return {k: v for k, v in super().config(spec).items() if k != "head_dim"}
