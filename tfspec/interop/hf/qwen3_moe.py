"""Qwen3-MoE (``model_type: qwen3_moe``): transformers' Qwen3MoeForCausalLM and Qwen3MoeModel as
tfspec specs (Qwen/Qwen3-30B-A3B, Qwen3-235B-A22B and their -Base, -Instruct-2507 models).

Qwen3 (``qwen3.py``: per-head q/k RMSNorm, ``attention_bias`` on q, k, v and o) with
Qwen2-MoE's experts (``qwen2_moe.py``'s ``SparseSteps``: ``moe_intermediate_size`` wide, in the
layers ``decoder_sparse_step`` and ``mlp_only_layers`` leave sparse, renormalised with
``norm_topk_prob``) and no shared expert. Its heads are ``head_dim`` wide when the
configuration says (Qwen3-30B-A3B's 128), else hidden_size / heads, not Qwen3's 128. The number
of experts is ``num_experts`` or, as transformers 5 writes it, ``num_local_experts``. Defaults
are Qwen3MoeConfig's (128 experts, top 8, 24 layers of 2048).
"""

from __future__ import annotations

from tfspec.interop.hf.family import register
from tfspec.interop.hf.mixtral import MOE_IGNORED
from tfspec.interop.hf.qwen2_moe import MOE_FIELDS, SparseSteps
from tfspec.interop.hf.qwen3 import Qwen3


@register
class Qwen3Moe(SparseSteps, Qwen3):
    model_type = "qwen3_moe"
    title = "Qwen3-MoE"
    architectures = {"Qwen3MoeForCausalLM": "model.", "Qwen3MoeModel": ""}
    export_architecture = "Qwen3MoeForCausalLM"
    mapped = Qwen3.mapped + MOE_FIELDS + ("num_experts", "num_local_experts")
    ignored = Qwen3.ignored | MOE_IGNORED
    expert_counts = ("num_experts", "num_local_experts")
    defaults = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
                "num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 32768,
                "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768}
