"""Mutants in what the imported model families (the zoo of published decoders) rely on: the
attention options they brought (query/key norms, layers without positions) and the family
modules that map them, each killed by the family tests against transformers."""

QK_NORM_TESTS = ["tests/test_import_qk_norm_families.py::test_logits_and_greedy_tokens_match_transformers"]

TORCH_NORM = ("            if self.qk_norm != \"none\":\n"
              "                q, k = normed(self, q, \"q\"), normed(self, k, \"k\")\n")
TORCH_ROTARY = ("            if self.turn is not None:  # rotary positions\n"
                "                q, k = self.turn(ctx, q, k)\n")
ONNX_NORM = ("        if a[\"qk_norm\"] != \"none\":\n"
             "            q, k = normed(b, node, q, \"q\"), normed(b, node, k, \"k\")\n")
ONNX_ROTARY = ("        if stage is not None and stage.turn is not None:  # rotary positions\n"
               "            q, k = stage.turn(e, q, k)\n")

MUTANTS = [
    dict(name="qk_norm applied after the rotary rotation instead of before (PyTorch)",
         file="backends/torch/attention.py",
         old=TORCH_NORM + TORCH_ROTARY,
         new=TORCH_ROTARY + TORCH_NORM,
         tests=QK_NORM_TESTS),
    dict(name="qk_norm applied after the rotary rotation instead of before (ONNX)",
         file="backends/onnx/lower/attention.py",
         old=ONNX_NORM + ONNX_ROTARY,
         new=ONNX_ROTARY + ONNX_NORM,
         tests=QK_NORM_TESTS),
    dict(name="per-head qk_norm gain indexed per feature of the whole projection (and the reverse)",
         file="tfspec/layers/attention.py",
         old='sizes = {"q": layer.d_k, "k": layer.d_k} if layer.qk_norm == "head" else',
         new='sizes = {"q": layer.d_k, "k": layer.d_k} if layer.qk_norm == "all" else',
         tests=QK_NORM_TESTS),
    dict(name="a layer without positions (NoPE) rotated anyway with the spec's rotary positions",
         file="tfspec/layers/attention.py",
         old="own = self.positions if self.positions is not None else spec.positional",
         new="own = self.positions if self.positions is not None and self.positions.kind != \"none\" "
             "else spec.positional",
         tests=[QK_NORM_TESTS[0] + "[smollm3]"]),
]

GEMMA_BLOOM_TESTS = "tests/test_import_gemma2_bloom.py::test_logits_and_greedy_tokens_match_transformers"
TORCH_CAP = ("        for modify in self.modifiers:  # Gemma 2's softcap\n"
             "            scores = modify(scores)\n")
TORCH_MASK = ("        if causal:\n"
              "            mask = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril(Lk - Lq)\n"
              "        if mask is not None:\n"
              "            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)\n")
STAGES = "tests/test_attention_stages.py::"
ONNX_TERM = ("    if stage is not None and stage.logits is not None:  # the position kind's logit term\n"
             "        scores = b.op(\"Add\", scores, stage.logits(e, q, k))\n"
             "    if stage is not None and stage.from_input is not None:  # forgetting attention's summed log gates\n"
             "        scores = b.op(\"Add\", scores, stage.from_input(e, x))\n")
ONNX_CAP = ("    for modify in modifiers:  # Gemma 2's softcap\n"
            "        scores = modify(b, scores)\n")

MUTANTS += [
    dict(name="ALiBi slopes in reverse head order (the steepest slope on the last head)",
         file="tfspec/ir/positions.py",
         old="        slopes = np.concatenate([slopes, extra])\n    return slopes\n",
         new="        slopes = np.concatenate([slopes, extra])\n    return slopes[::-1].copy()\n",
         tests=[GEMMA_BLOOM_TESTS + "[bloom]"]),
    dict(name="attention soft-capping applied after the mask (masked logits capped to -c, not hidden) (PyTorch)",
         file="backends/torch/attention.py",
         old=TORCH_CAP + TORCH_MASK,
         new=TORCH_MASK + TORCH_CAP,
         tests=[GEMMA_BLOOM_TESTS + "[gemma2]"]),
    dict(name="attention soft-capping applied before the position terms (ONNX)",
         file="backends/onnx/lower/attention.py",
         old=ONNX_TERM + ONNX_CAP,
         new=ONNX_CAP + ONNX_TERM,
         tests=[STAGES + "test_every_position_kind_with_a_softcap_exports_with_parity[alibi]"]),
    dict(name="relative positions' value term left out of the ONNX graphs",
         file="backends/onnx/lower/attention.py",
         old="    return y if stage is None or stage.output is None else stage.output(e, weights, y)",
         new="    return y",
         tests=[STAGES + "test_every_position_kind_with_a_softcap_exports_with_parity[relative]"]),
    dict(name="sandwich norm: the norm after each sub-layer declared but its output unused",
         file="tfspec/ir/build.py",
         old="        y = b.norm(f\"{name}_{'out_' if norm == 'sandwich' else ''}norm\", y)\n",
         new="        b.norm(f\"{name}_{'out_' if norm == 'sandwich' else ''}norm\", y)\n",
         tests=[GEMMA_BLOOM_TESTS + "[gemma2]", GEMMA_BLOOM_TESTS + "[gemma3]"]),
]

PARALLEL_TESTS = "tests/test_import_parallel_families.py::"
PARALLEL_FULL = PARALLEL_TESTS + "test_logits_and_greedy_tokens_match_transformers"

MUTANTS += [
    dict(name="parallel residual: the feed-forward branch reads the attention's output (sequential layer)",
         file="tfspec/ir/build.py",
         old='_shift(b, sublayer, name, shared or b.norm(f"{name}_norm", x))))',
         new='_shift(b, sublayer, name, shared or b.norm(f"{name}_norm", out))))',
         tests=[PARALLEL_FULL + "[gpt_neox]", PARALLEL_FULL + "[falcon-40b]"]),
    dict(name="parallel_shared_norm: a norm per sub-layer instead of the one shared (Phi, falcon-7b)",
         file="tfspec/ir/build.py",
         old='shared = b.norm(f"{layer.names[0]}_norm", x) if layer.residual == "parallel_shared_norm" else None',
         new="shared = None",
         tests=[PARALLEL_FULL + "[phi-qk-norm]", PARALLEL_TESTS + "test_default_config_counts_as_transformers"]),
    dict(name="Falcon-40B's grouped query_key_value read with keys and values swapped",
         file="tfspec/interop/hf/layouts.py",
         old="x[:, -2], x[:, -1]]).reshape(value.shape)",
         new="x[:, -1], x[:, -2]]).reshape(value.shape)",
         tests=[PARALLEL_FULL + "[falcon-40b]"]),
    dict(name="Falcon's two parallel norms swapped (attention reads ln_mlp)",
         file="tfspec/interop/hf/falcon.py",
         old='"parallel": ("ln_attn", "ln_mlp")',
         new='"parallel": ("ln_mlp", "ln_attn")',
         tests=[PARALLEL_FULL + "[falcon-40b]"]),
    dict(name="GPT-NeoX's rotary_pct (transformers 4 files) ignored: the default quarter rotated",
         file="tfspec/interop/hf/gpt_neox.py",
         old='"rotary_pct": "partial_rotary_factor"',
         new='"rotary_pct": "rotary_fraction"',
         tests=[PARALLEL_TESTS + "test_other_layouts_match_transformers_in_pytorch[gpt_neox-sequential]"]),
]

MOE_TESTS = "tests/test_import_moe_families.py::test_logits_and_greedy_tokens_match_transformers"

MUTANTS += [
    dict(name="moe router: softmax over the top_k logits instead of over all experts (PyTorch)",
         file="backends/torch/moe.py",
         old="weights = probs.gather(1, chosen) if self.scoring",
         new="weights = torch.softmax(logits.gather(1, chosen), -1) if self.scoring",
         tests=[MOE_TESTS + "[qwen2_moe]", MOE_TESTS + "[olmoe]"]),
    dict(name="moe router: softmax over the top_k logits instead of over all experts (ONNX)",
         file="backends/onnx/lower/moe.py",
         old='top = b.op("GatherElements", scores, chosen, axis=1) if',
         new='top = b.op("Softmax", b.op("GatherElements", logits, chosen, axis=1), axis=-1) if',
         tests=[MOE_TESTS + "[qwen2_moe]", MOE_TESTS + "[olmoe]"]),
    dict(name="moe: normalize ignored (the top_k probabilities never renormalised)",
         file="tfspec/layers/moe.py",
         old='"normalize": layer.normalize, "d_ff": f,',
         new='"normalize": False, "d_ff": f,',
         tests=[MOE_TESTS + "[mixtral]", MOE_TESTS + "[qwen3_moe]"]),
]

MLA_TESTS = "tests/test_import_latent_attention.py::test_logits_and_greedy_tokens_match_transformers"

MUTANTS += [
    dict(name="moe router: DeepSeek-V3's score bias ignored when choosing experts (PyTorch)",
         file="backends/torch/moe.py",
         old='        scores = probs if getattr(self, "score_bias", None) is None else probs + self.score_bias\n',
         new="        scores = probs\n",
         tests=[MLA_TESTS + "[v3]"]),
    dict(name="moe router: a group scored by its best expert, not its two best summed (ONNX)",
         file="backends/onnx/lower/moe.py",
         old='        best = b.op("ReduceSum", b.op("TopK", grouped, b.ints(2), axis=-1, outputs=2)[0], b.ints(-1),\n',
         new='        best = b.op("ReduceSum", b.op("TopK", grouped, b.ints(1), axis=-1, outputs=2)[0], b.ints(-1),\n',
         tests=[MLA_TESTS + "[v3]"]),
    dict(name="deepseek_v3: routed_scaling_factor not read (weights unscaled)",
         file="tfspec/interop/hf/deepseek_v3.py",
         old='                        "routed_scale": scale}',
         new='                        "routed_scale": 1.0}',
         tests=[MLA_TESTS + "[v3_ungrouped]"]),
]

MUTANTS += [
    dict(name="deepseek_v2: DeepSeek's interleaved rope rows taken as rotate-half ones (not permuted at import)",
         file="tfspec/interop/hf/deepseek_v2.py",
         old="        return parts[0][self._order(len(parts[0]))]\n",
         new="        return parts[0]\n",
         tests=[MLA_TESTS + "[lite]"]),
    dict(name="latent attention: the queries' latent not RMS-normalised, only scaled by its gain (PyTorch)",
         file="backends/torch/latent_attention.py",
         old="            q = F.linear(self._norm(F.linear(x, self.w_qa), self.q_norm), self.w_qb)\n",
         new="            q = F.linear(F.linear(x, self.w_qa) * self.q_norm, self.w_qb)\n",
         tests=[MLA_TESTS + "[q_lora]"]),
    dict(name="latent attention: the shared key part left unrotated (ONNX)",
         file="backends/onnx/lower/latent_attention.py",
         old="        k_pe = rotate(b, k_pe, cos, sin, 1, rope, rope)\n",
         new="",
         tests=[MLA_TESTS + "[lite]"]),
]

MORE_DECODERS = "tests/test_import_more_decoders.py::test_logits_and_greedy_tokens_match_transformers"

MUTANTS += [
    dict(name="residual_scale ignored in the ONNX graphs (Granite's residual_multiplier: x + f(x))",
         file="backends/onnx/lower/residual.py",
         old='    return e.b.op("Add", x, y if scale == 1.0 else e.b.op("Mul", y, e.b.const(scale)))\n',
         new='    return e.b.op("Add", x, y)\n',
         tests=[MORE_DECODERS + "[granite]"]),
    dict(name="interleaved rotary rows (Cohere, GPT-J) taken as rotate-half ones: not permuted at import",
         file="tfspec/interop/hf/cohere.py",
         old="        return value[self._order(len(value))]\n",
         new="        return value\n",
         tests=[MORE_DECODERS + "[cohere]", MORE_DECODERS + "[gptj]"]),
]
